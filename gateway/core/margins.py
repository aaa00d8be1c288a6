"""How much to stretch the engine's forecasts, learned from what replies' arrivals needed.

A player starts once it holds ``preroll_ms``; the forecast behind it stretches every
segment's compute by a safety factor because machines are noisy. A fixed factor (or one
that only grows with the calls' overruns) errs on the late side: one core busy elsewhere
made starts 5 s later than the arrivals needed. So after each reply whose whole text the
first forecast saw, the gateway compares: the arrivals it really made give the oracle start
(``schedule.oracle_start``) and the audio a player needed to hold then; the forecast gives
the preroll at each stretch; the smallest stretch whose preroll covers the oracle's is what
that reply needed (``needed_stretch``). ``Margins`` keeps a decayed mean and spread of it per
bucket (the vocoder mode: each has its own errors; ``shared`` for replies forecast with other
listeners' work on the engine) and answers mean + 2 spreads from its first reply on; before
that, the caller's fixed rule stands. One or two replies are not trusted as if certain: on an
exact engine nearly every reply needs exactly 1.0 (the forecast misses only by its texts'
estimated lengths), so their spread is 0 and a later text whose estimate ran short stalled
(0.93 s on the replay, ``tests/test_margin_replay.py``). The rule before learning (``prior``)
stays in the answer as one pseudo-reply that decays as replies come.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from ..kokoro.vocoder.modes import VocoderMode
from .schedule import Forecast, Rate, arrivals, earliest_start, forecast, oracle_start, preroll_from, preroll_s

EXACT = VocoderMode.EXACT
LOW, HIGH = 1.0, 2.0  # a stretch is never below the forecast itself, nor above twice it
MIN_REPLIES = 1  # replies seen before a bucket's learned margin replaces the fixed rule


START = ":start"  # a bucket's twin for the clock start (``start_in_ms``): ``started(bucket)``


def started(bucket: str) -> str:
    """The margins' bucket of the clock start of replies of ``bucket``: a player that starts on
    a clock has no arrival to round its start up to, so it needs its own (larger) stretch."""
    return bucket + START


def needed_stretch(preroll_at: Callable[[float], float], arrivals: Iterable[tuple[float, float]]) -> float:
    """The smallest stretch whose forecast preroll (``preroll_at(stretch)``, the forecast made
    when the reply started) is at least what the actual ``arrivals`` (time from that
    forecast, audio) needed: the hold that makes a player start at their oracle start."""
    need = needed_hold(list(arrivals))
    return smallest(lambda k: preroll_at(k) >= need)


def needed_start(start_at: Callable[[float], float], got: Iterable[tuple[float, float]]) -> float:
    """The smallest stretch whose forecast earliest start (``start_at(stretch)``) is no earlier
    than the actual arrivals' oracle start: what a player starting on a clock needed. A clock
    start is offered only to a player holding audio, so none starts before the first arrival:
    where the oracle is that arrival, any stretch would do. (Counting the forecast's own start
    there, a first call late by its fixed cost taught clock starts 1.3-2.4 where the arrivals
    needed 1.0: ``bench listeners``' frozen-first clock margin sat at its cap of 2.)"""
    got = list(got)
    oracle, first = oracle_start(got), got[0][0] if got else 0.0
    return smallest(lambda k: max(start_at(k), first) >= oracle - 1e-9)


def smallest(enough: Callable[[float], bool]) -> float:
    """The smallest stretch from ``LOW`` that is ``enough`` (to 0.01; at most 1.5 x ``HIGH``)."""
    if enough(LOW):
        return LOW
    lo, hi = LOW, HIGH * 1.5
    if not enough(hi):
        return hi
    while hi - lo > 0.01:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return hi


@dataclass(frozen=True, slots=True)
class Plan:
    """A reply's first forecast, learned from once its arrivals are in: the preroll it gives at
    each stretch, when it was made (the arrivals' clock), the margins' bucket, the earliest
    start it gives at each stretch (what a clock start, ``start_in_ms``, is made of) and, made
    on the prior rate, its texts and modes to forecast again at the rate measured since."""

    preroll_at: Callable[[float], float]
    at: float
    bucket: str
    start_at: Callable[[float], float]
    again: tuple[list[str], list[str | None]] | None = None
    # the segments as forecast, their modes, and the same segments forecast whole (``as_made``)
    segments: tuple[Forecast, ...] = ()
    modes: tuple[str | None, ...] = ()
    whole: tuple[Forecast, ...] = ()

    @staticmethod
    def of(
        segments: Sequence[Forecast],
        at: float,
        bucket: str,
        again: tuple[list[str], list[str | None]] | None = None,
        modes: Sequence[str | None] = (),
        whole: Sequence[Forecast] = (),
    ) -> Plan:
        return Plan(
            lambda s: preroll_s(segments, 0.0, s),
            at,
            bucket,
            lambda s: earliest_start(arrivals(segments, s)),
            again,
            tuple(segments),
            tuple(modes),
            tuple(whole),
        )

    @staticmethod
    def made_of(
        texts: Sequence[str],
        modes: Sequence[str | None],
        rate: Rate,
        speed: float,
        at: float,
        bucket: str,
        measured: bool,
        paced_from: int | None = None,
    ) -> Plan:
        """The plan of ``texts`` in ``modes`` at ``rate`` (and each whole, for ``as_made``); not
        ``measured`` (a mode the engine has not made yet): with its texts, to forecast again;
        ``paced_from``: ``schedule.forecast``'s."""
        whole = forecast(texts, [EXACT] * len(texts), rate, speed)
        again = None if measured else (list(texts), list(modes))
        return Plan.of(forecast(texts, modes, rate, speed, paced_from), at, bucket, again, modes, whole)

    @staticmethod
    def beside(got: Sequence[tuple[float, float, float]], k: float, at: float, bucket: str) -> Plan:
        """The plan of a reply forecast beside other listeners' work: its pieces ``got`` where the
        scheduler will serve them, at the budget's stretch ``k``."""
        return Plan(
            lambda s: preroll_from(scaled(got, s / k)), at, bucket, lambda s: earliest_start(scaled(got, s / k))
        )

    def redone(self, segments: Sequence[Forecast]) -> Plan:
        """The same plan on ``segments`` forecast again."""
        return Plan.of(segments, self.at, self.bucket)

    def as_made(self, made: Sequence[str | None]) -> Plan:
        """The plan with each segment the engine made whole (``made``: the modes the segments got)
        where it was forecast streamed, as forecast whole when the plan was made. A reply's mode
        can change after its plan (a first call over its forecast makes streaming too slow:
        ``Listener.later_mode``), and the margins then learned the change as noise: a cold
        press's third sentence, planned streamed and made whole, taught 1.77 where the plan with
        it whole needs 1.13 (its clock start 1.27), and the next Play both held 2.2 s. With the texts (``again``,
        a plan on the prior rate), their modes become the modes made."""
        if not (n := len(made)) or not (len(self.segments) == len(self.modes) == len(self.whole) == n):
            return self
        if self.again is not None and len(self.again[1]) == n:
            return replace(self, again=(self.again[0], list(made)))
        if all(m == u for m, u in zip(self.modes, made)):
            return self
        segments = [
            w if u == EXACT and m != u else s for s, w, m, u in zip(self.segments, self.whole, self.modes, made)
        ]
        return Plan.of(segments, self.at, self.bucket, None, made, self.whole)

    def needed(self, got: Sequence[tuple[float, float]]) -> tuple[float, float]:
        """What the arrivals ``got`` needed: the hold's stretch, and the clock start's."""
        return needed_stretch(self.preroll_at, got), needed_start(self.start_at, got)


def needed_hold(got: Sequence[tuple[float, float]]) -> float:
    """The least preroll that makes a player counting ``got`` (time, audio) as it comes start
    at their oracle start: a hair more than it holds just before the first arrival at or after
    it (0 when that is the first). Not the hold including that arrival: segments come whole,
    and a forecast whose first segment was estimated a little shorter than it came asked for
    a stretch large enough to take in the next segment as well (1.8 where 1.0 was enough)."""
    start = oracle_start(got)
    if not got or start <= got[0][0] + 1e-9:
        return 0.0
    held = 0.0
    for t, audio in got:
        if t >= start - 1e-9:
            break
        held += audio
    return held + 1e-3


def scaled(pieces: Sequence[tuple[float, float, float]], factor: float) -> list[tuple[float, float, float]]:
    """Forecast pieces (arrival, audio, position) with every arrival ``factor`` times later: the
    schedule of work stretched by ``factor`` (its calls one after another from now)."""
    return [(at * factor, audio, pos) for at, audio, pos in pieces]


class Margins:
    def __init__(self, forget: float = 0.8) -> None:
        self.forget = forget
        self._sums: dict[str, list[float]] = {}  # weight, sum, sum of squares, sum of overruns
        self._replies: dict[str, int] = {}
        self._startup: dict[str, float] = {}  # what the start-up warm-up's replies needed
        self._prior: dict[str, list[float]] = {}  # weight, stretch: the rule before learning

    def settle(self) -> None:
        """What was learned so far came from the start-up warm-up (``warmup.py``): a short reply
        on an idle machine, one per bucket, too few to say how far a listener's text can miss
        its forecast. It becomes a lower bound of the rule before learning (``startup``), and
        listeners' replies are learned from scratch."""
        self._startup = {b: f for b in self.buckets() if (f := self.factor(b, prior=False)) is not None}
        self._sums.clear()
        self._replies.clear()
        self._prior.clear()

    def startup(self, bucket: str | None) -> float:
        """What the warm-up's reply of ``bucket`` needed (None: the largest); 1.0 if none."""
        if bucket is None:
            return max(self._startup.values(), default=LOW)
        return self._startup.get(bucket, LOW)

    def observe(self, bucket: str, needed: float, overrun: float = 0.0, prior: float | None = None) -> None:
        """A reply of ``bucket`` needed ``needed`` while the engine's calls ran ``overrun``
        (``EngineRate.overrun``) over their forecast. ``prior``: the stretch the rule before
        learning gave (``EngineRate.safety``); a bucket's first reply keeps it as one
        pseudo-reply, which decays as replies do (``factor``)."""
        w, s, sq, o = self._sums.get(bucket, [0.0, 0.0, 0.0, 0.0])
        f = self.forget
        if prior is not None and bucket not in self._prior:
            self._prior[bucket] = [1.0, prior]
        if bucket in self._prior:
            self._prior[bucket][0] *= f
        self._sums[bucket] = [w * f + 1.0, s * f + needed, sq * f + needed * needed, o * f + overrun]
        self._replies[bucket] = self._replies.get(bucket, 0) + 1

    def factor(self, bucket: str, overrun: float | None = None, prior: bool = True, floor: float = LOW) -> float | None:
        """The learned stretch for ``bucket`` (None until ``MIN_REPLIES`` replies were seen).
        With the calls' ``overrun`` now: widened by as much as they run over their forecast
        beyond what they did while it was learned (1 + 2 x overrun, as the rule before any
        margin), so a margin learned on an idle machine does not hold once the machine is seen
        to slow down, until replies on the busy machine teach it. With ``prior``: drawn towards
        the rule before learning by its pseudo-reply's weight (``forget`` per reply since). Never
        below ``floor`` (``EngineRate.margin``: 1 + what the calls measured run over now)."""
        if self._replies.get(bucket, 0) < MIN_REPLIES:
            return None
        w, s, sq, o = self._sums[bucket]
        wider = 2.0 * max(0.0, overrun - o / w) if overrun is not None else 0.0
        mean = s / w
        spread = math.sqrt(max(0.0, sq / w - mean * mean))
        learned = mean + 2.0 * spread
        pw, p = self._prior.get(bucket, (0.0, 0.0)) if prior else (0.0, 0.0)
        learned = (w * learned + pw * p) / (w + pw)
        return min(HIGH, max(LOW, learned + wider, floor))

    def buckets(self) -> list[str]:
        return [b for b in self._sums if self._replies.get(b, 0) >= MIN_REPLIES]

    def snapshot(self) -> dict[str, float]:
        return {b: round(f, 3) for b in self._sums if (f := self.factor(b)) is not None}

    def startup_snapshot(self) -> dict[str, float]:
        return {b: round(f, 3) for b, f in self._startup.items()}
