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
    """Seconds per call as a function of the generator window (frames), learned from every call.

    A line, fixed cost plus cost per frame, fitted by least squares over the calls seen, older
    ones fading (each call weighs ``forget`` times less than the next). One line for every
    window size means every call, of whatever shape, updates every prediction: when the
    machine slows down, the cost of a shape that has not run for a while follows.
    """

    def __init__(self, forget: float = 0.85) -> None:
        self.forget = forget
        self._sums = [0.0] * 5  # weight, x, y, xx, xy
        self._lock = threading.Lock()

    def observe(self, window: int, seconds: float) -> None:
        x, y = float(window), float(seconds)
        with self._lock:
            self._sums = [s * self.forget + d for s, d in zip(self._sums, (1.0, x, y, x * x, x * y))]

    @property
    def seen(self) -> bool:
        return self._sums[0] > 0.0

    def predict(self, window: int) -> float:
        """The fitted line at ``window``; with too little spread in the calls seen, their mean
        cost per frame times ``window`` (a fixed cost per call makes that pessimistic for
        larger windows, the safe side)."""
        with self._lock:
            w, sx, sy, sxx, sxy = self._sums
        if w == 0.0:
            return 0.01 * window  # a guess, replaced by the first measurement
        spread = w * sxx - sx * sx
        if spread > 1e-9 * max(1.0, w * sxx):
            slope = (w * sxy - sx * sy) / spread
            fixed = (sy - slope * sx) / w
            if slope > 0 and fixed >= 0:
                return fixed + slope * window
        return sy / sx * window


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
