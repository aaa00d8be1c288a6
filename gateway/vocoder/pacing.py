"""When to cut the next chunk, and how big: keep a real-time player fed from the first chunk on.

The cost of a vocoder call is measured per generator window size (the chunk shapes form a
small fixed set, so every shape's cost is learned after a few calls) and shared by every
stream of one ``StreamingVocoder``. A stream tracks how much audio it has produced beyond
what a player that started at its first chunk has played.
"""
from __future__ import annotations

import threading
import time

from .chunked import FRAME_S, SAMPLE_RATE, Policy


class CostModel:
    """Seconds per call by generator window size (frames), learned from every call."""

    def __init__(self) -> None:
        self._seconds: dict[int, float] = {}
        self._lock = threading.Lock()

    def observe(self, window: int, seconds: float) -> None:
        with self._lock:
            old = self._seconds.get(window)
            self._seconds[window] = seconds if old is None else 0.7 * old + 0.3 * seconds

    def predict(self, window: int) -> float:
        """Measured for this size, else scaled from the nearest measured size (a fixed cost
        per call makes that pessimistic for larger windows, which is the safe side)."""
        with self._lock:
            if window in self._seconds:
                return self._seconds[window]
            if not self._seconds:
                return 0.01 * window  # a guess, overwritten by the first measurement
            near = min(self._seconds, key=lambda w: abs(w - window))
            return self._seconds[near] * window / near


class Pacer:
    """How far one stream's produced audio is ahead of real-time playback.

    ``buffered_s``: audio the player already holds from before this stream (it is playing
    now); without it, playback starts with this stream's first chunk.
    """

    def __init__(self, costs: CostModel, buffered_s: float = 0.0) -> None:
        self.costs = costs
        self.first: float | None = time.perf_counter() if buffered_s > 0 else None
        self.produced_s = max(0.0, buffered_s)

    def observe(self, window: int, elapsed: float, produced_samples: int) -> None:
        self.costs.observe(window, elapsed)
        if self.first is None:
            self.first = time.perf_counter()
        self.produced_s += produced_samples / SAMPLE_RATE

    def ahead_s(self) -> float:
        if self.first is None:
            return 0.0
        return self.produced_s - (time.perf_counter() - self.first)


def first_size(policy: Policy, costs: CostModel) -> int:
    """The smallest opening chunk that pays for the next one of its size (a smaller one would
    only bring the first audio forward to stall right after it), at most ``max_first``: on a
    machine too loaded for any to pay, stalls will come anyway and first audio still counts."""
    sizes = policy.sizes
    if not policy.adaptive:
        return sizes[0]
    for n in sizes:
        if n >= policy.max_first or costs.predict(n + 2 * policy.context) * policy.margin <= n * FRAME_S:
            return n
    return sizes[-1]


def next_size(policy: Policy, pacer: Pacer, previous: int, index: int) -> int:
    """The largest shape predicted to finish before the audio runs out, and never smaller than
    the one before.

    Small chunks spend most of their time on context, so shrinking to fit a short budget
    would keep the lead short for good. When nothing fits (a machine slower than real time)
    the stream stalls anyway, and the next larger shape at least wastes less.
    """
    sizes = policy.sizes
    if not policy.adaptive:
        return sizes[min(index, len(sizes) - 1)]
    budget = pacer.ahead_s() / policy.margin
    fits = [n for n in sizes if pacer.costs.predict(n + 2 * policy.context) <= budget]
    if fits:
        return max(previous, *fits)
    return min((n for n in sizes if n > previous), default=sizes[-1])
