"""When to cut the next chunk, and how big: keep a real-time player fed from the first chunk on.

The cost of a vocoder call is measured per generator window size (the chunk shapes form a
small fixed set, so every shape's cost is learned after a few calls) and shared by every
stream of one ``StreamingVocoder``. A stream tracks how much audio it has produced beyond
what a player that started at its first chunk has played.
"""

from __future__ import annotations

import math
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
        self._sums = [0.0] * 6  # weight, x, y, xx, xy, yy
        self._lock = threading.Lock()

    def observe(self, window: int, seconds: float) -> None:
        x, y = float(window), float(seconds)
        with self._lock:
            self._sums = [s * self.forget + d for s, d in zip(self._sums, (1.0, x, y, x * x, x * y, y * y))]

    @property
    def seen(self) -> bool:
        return self._sums[0] > 0.0

    def predict(self, window: int) -> float:
        """The fitted line at ``window``; with too little spread in the calls seen, their mean
        cost per frame times ``window`` (a fixed cost per call makes that pessimistic for
        larger windows, the safe side)."""
        return self._fit(window)[0]

    def _fit(self, window: int) -> tuple[float, float, float]:
        """(``predict``, the line's standard error there, the calls' mean cost per frame times
        ``window``); the error is inf where no line was fitted or the calls leave no degree of
        freedom to say how far they stray from it."""
        with self._lock:
            w, sx, sy, sxx, sxy, syy = self._sums
        if w == 0.0:
            guess = 0.01 * window  # replaced by the first measurement
            return guess, math.inf, guess
        per_frame = sy / sx * window
        spread = w * sxx - sx * sx
        if spread > 1e-9 * max(1.0, w * sxx):
            slope = (w * sxy - sx * sy) / spread
            fixed = (sy - slope * sx) / w
            if slope > 0 and fixed >= 0:
                line = fixed + slope * window
                if w <= 2.0:
                    return line, math.inf, per_frame
                # residual variance over the weight's degrees of freedom; the error at ``window``
                # grows with its distance from the calls' mean window
                var = max(0.0, syy - fixed * sy - slope * sxy) / (w - 2.0)
                return line, math.sqrt(var * (1.0 / w + (window - sx / w) ** 2 * w / spread)), per_frame
        return per_frame, math.inf, per_frame


class WindowCosts(CostModel):
    """A vocoder's calls (``CostModel``), never forecast below their mean cost per frame times
    the window unless the line is known well enough there to say less (within two standard
    errors of its fit). The calls seen are mostly small (the calibration's and the opening
    chunks, windows of 16-24 frames), and a line through so narrow a range can have any slope:
    extrapolated to a 130-154 frame exact rest it forecast 0.6-1.5 s for calls that took 1.3-1.4
    s, and a stream handed over to that rest with 0.45 s in hand (its 3.1 s arrived in one piece
    1.3 s later: the start-up warm-up's streamed reply then logged a margin of 1.4-1.9, where
    most starts log 1.07, and that bounded the first listener's holds). The cost is close to
    proportional to the window (8.7 ms a frame and about 30 ms a call on the 2-core host), so the
    mean per frame errs by the fixed cost per call times the windows' ratio: on the safe side,
    and less as larger windows are seen."""

    def predict(self, window: int) -> float:
        line, error, per_frame = self._fit(window)
        return line if line >= per_frame else min(per_frame, line + 2.0 * error)


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


def behind(policy: Policy, cost: float, ahead: float, frames: int, frozen_frames: int | None) -> bool:
    """``Policy.batch_rest``: would one call over a stream's rest (``frames`` of audio, predicted
    to take ``cost`` s) end after the audio in hand (``ahead``) and the rest's own? Then no
    chunking can keep a real-time player fed (each chunk only adds context and a call)."""
    p = policy
    return p.batch_rest and p.adaptive and frozen_frames is None and cost > ahead + frames * FRAME_S
