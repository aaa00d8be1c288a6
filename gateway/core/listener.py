"""What the listener holds, and the schedule that follows from it and the engine's live rate.

One ``Listener`` per reply. Before each segment the synthesis stage asks it whether to wait
(``lookahead_s``), the segment's mode (``mode_for``), the ``preroll_ms`` and the engine's hints
(``buffered_s``, ``waiting``); the stages tell it the audio made (``made``). A batch reply is not
``live``. The scheduler and budget read ``deadline``, ``standing`` and ``stream``; beside other
listeners ``preroll_ms`` plays out everyone's work as the scheduler will (``budget.edf``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ..config import Settings
from ..kokoro.vocoder.modes import VocoderMode
from .budget import Stream, share_key
from .edf import TIE_S, Job, job, pieces, placed, play, reached
from .engine_rate import DEFAULT, EngineRate
from .margins import Plan, scaled, started
from .options import StreamOptions
from .schedule import PLAYER_LEAD_S, arrivals, earliest_start, forecast, preroll_from, start_on, start_s

if TYPE_CHECKING:
    from .budget import Budget

# a player whose hold an arrival met waits this long for a newer ``preroll_ms`` (the next
# sentence's, sent right after a segment's last audio) before it starts: static/players.js
GRACE_S = 0.03
SHARED = "shared"  # the margins' bucket of replies forecast beside other listeners' work
Placement = tuple[list[tuple[float, float, float]], float]  # pieces beside the others, and their stretch


class Listener:
    def __init__(
        self,
        engine_rate: EngineRate,
        settings: Settings,
        options: StreamOptions,
        *,
        requested: str | None,
        sample_rate: int,
        live: bool = True,
        budget: Budget | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.engine_rate, self.settings, self.options = engine_rate, settings, options
        self.requested = requested  # the vocoder mode the request asked for (or the engine's)
        self.sample_rate, self.live = sample_rate, live
        self.budget, self.clock = budget, clock
        self.samples = 0  # audio made for this reply
        self.segment_samples = 0  # ... of it in the segment being made
        self.t_created = clock()
        self.t_first_audio: float | None = None  # clock of the first audio payload
        self.promised_start: float | None = None  # clock: the start forecast at admission
        self.preroll_told_s = 0.0  # the preroll in force for the player
        self.t_play: float | None = None  # clock: when the player held that preroll (its start)
        self.met = False  # ... set by the hold, not a clock: a preroll within GRACE_S replaces it
        self.start_at: float | None = None  # clock: its start below that, holding audio (``start_in_ms``)
        self.plan: Plan | None = None  # the reply's first forecast, whole text seen: for ``learn``
        self.arrivals: list[tuple[float, float]] = []  # ... and since it, the audio made
        self.made_modes: list[str | None] = []  # ... and the mode each segment got
        self.more: Callable[[], bool] = lambda: False  # another segment is cut and waits (the pipeline's)
        self.stream_to_start = False  # later segments streamed until the player starts (``preroll_ms``)
        self.offer: float | None = None  # the start ``preroll_ms`` last offered (``_start_offer``)
        self.bucket: str | None = None  # the margins' bucket of the reply: its first segment's mode

    def made(self, samples: int) -> None:
        self.samples += samples
        self.segment_samples += samples
        if self.plan is not None:
            self.arrivals.append((self.clock() - self.plan.at, samples / self.sample_rate))
        self._check_start()

    def tell(self, preroll_s: float) -> None:
        """The player was told to hold ``preroll_s`` before it starts: one that holds that much
        starts now; one whose hold was met less than ``GRACE_S`` ago waits for this one instead."""
        self._check_start()
        if self.t_play is not None and self.met and self.clock() - self.t_play <= GRACE_S:
            if self.samples / self.sample_rate < preroll_s - 1e-9:
                self.t_play, self.met = None, False
        if self.t_play is None:
            self.preroll_told_s = preroll_s
            self._check_start()

    def offer_start(self, at: float | None) -> None:
        """A ``sentence`` sent with the start offer ``at`` (clock; None: none) replaces the last."""
        self._check_start()  # a player whose clock ran out has started, whatever comes now
        self.start_at = at

    def _check_start(self) -> None:
        """Has the player started: its clock start passed (then, not when first looked at: a
        stream's next chunk came 0.5 s after it, and the model took audio played for audio
        held), or its hold met (at an arrival: ``made`` looks)?"""
        if self.t_play is not None or not self.samples:
            return
        if self.start_at is not None and self.clock() >= self.start_at:
            self.t_play = self.start_at
        elif self.samples / self.sample_rate >= self.preroll_told_s - 1e-9:
            self.t_play, self.met = self.clock(), True

    def first_audio(self) -> None:
        self.t_first_audio = self.clock()

    def deadline(self) -> float:
        """When the listener runs dry unless more audio comes (the engine queue's order)."""
        self._check_start()
        made = self.samples / self.sample_rate
        if not self.live:  # nobody plays it yet: behind every listener, never starved
            return self.t_created + self.settings.lookahead_s + made
        if held := self.options.buffered_s:
            return self.t_created + held + made
        base = next((t for t in (self.t_play, self.start_at, self.promised_start) if t is not None), None)
        return (base if base is not None else self.t_created) + made

    def standing(self) -> float | None:
        """When it was created, while its player plays: a gap would be heard (``scheduler.py``)."""
        self._check_start()
        return self.t_created if self.live and (self.options.buffered_s or self.t_play is not None) else None

    def stretch(self) -> float:
        """What its forecasts stretch the engine's compute by (the engine's pacing: ``Flight``)."""
        return self.engine_rate.safety(self.settings.preroll_safety, self.bucket or DEFAULT)

    def next_deadline(self, call_audio_s: float) -> float | None:
        """When it runs dry once the call that just ended (``call_audio_s``, some of it counted
        already) is in, if another segment is ready to go; else None."""
        if not self.more():
            return None
        return self.deadline() + max(0.0, call_audio_s - self.segment_samples / self.sample_rate)

    def stream(
        self, audio: Sequence[float], now: float, running: float | None, current: bool, anchored: bool = True
    ) -> Stream:
        """The engine work of segments of ``audio`` s (``audio[0]``: the one being made when
        ``current``), each due when the listener runs dry without it; ``running``: the compute
        left in its call on the engine now. ``anchored``: a player not started yet starts once
        it holds its preroll (``edf.play``); else at the start planned for it."""
        rate, mode = self.engine_rate, self.later_mode()
        if self.budget is not None:
            k, shape = self.budget.safety(), self.budget.first_fraction
        else:
            k, shape = rate.safety(self.settings.preroll_safety), rate.first_fraction
        due, release, jobs = self.deadline() - now, 0.0, []
        for i, a in enumerate(audio):
            left = max(0.0, a - self.segment_samples / self.sample_rate) if i == 0 and current else a
            if i == 0 and current and running is not None:
                release = running  # on the engine now: its slot is busy that long
            elif a > 0:
                jobs.append(job(k * rate.predict(mode, a) * left / a, due, left, shape(mode, a)))
            due += left
        if anchored and self.live and self.t_play is None and self.start_at is None and not self.options.buffered_s:
            first = job(k * rate.predict(mode, audio[0]), 0.0, audio[0], shape(mode, audio[0])) if audio else None
            return self._anchored(tuple(jobs), release, now, first if current and running is not None else None)
        return Stream(tuple(jobs), release)

    def _anchored(self, jobs: tuple[Job, ...], release: float, now: float, running: Job | None) -> Stream:
        """``jobs`` of a player that has not started: it starts once it holds the preroll it was
        told. Where the call on the engine now (``running``, ending at ``release``) brings that
        much, the start is known: the deadlines move to it; else ``edf.play`` finds it."""
        made = self.samples / self.sample_rate
        anchor, need = self.deadline() - now - made, max(0.0, self.preroll_told_s - made)
        if running is not None:
            in_segment = self.segment_samples / self.sample_rate
            at = reached(release - running.work_s, running, need + in_segment)
            if at is not None:
                shift = max(0.0, at) - anchor
                return Stream(tuple(replace(j, deadline=j.deadline + shift) for j in jobs), release)
            need = max(0.0, need - max(0.0, running.audio_s - in_segment))
        return Stream(jobs, release, need, anchor)

    def audio_of(self, texts: Sequence[str]) -> list[float]:
        return [self.engine_rate.audio_s(t, self.options.speed) for t in texts]

    def buffered_s(self) -> float:
        """Audio made that the listener has not heard: all of it until the player starts, then what
        is ahead of playback from that start; the option ``buffered_s`` (held before) plays first."""
        if not self.live:
            return 0.0
        self._check_start()
        made = self.samples / self.sample_rate
        if held := self.options.buffered_s:
            return max(0.0, held + made - (self.clock() - self.t_created))
        return made if self.t_play is None else max(0.0, made - (self.clock() - self.t_play))

    def waiting(self) -> bool:
        """The engine's hint: the player waits for its preroll, so the next segment's first chunk
        should come soonest, as every forecast for a player not started counts it (``paced_from``).
        Also while ``slowing``: paced to the held audio instead, a cold press's hold 0.24 s short
        was met when the whole next sentence was made, 2.0 s later (no clock start then, though:
        ``_start_offer``)."""
        if not self.live or self.options.buffered_s:
            return False
        self._check_start()
        return self.t_play is None

    def paced_from(self) -> int:
        """From which of the segments to come the engine paces them for a playing player (their
        forecast: ``EngineRate.predict``): all once it plays, else those after the next."""
        self._check_start()
        return 0 if self.t_play is not None else 1

    def mode_for(self, text: str, after: Sequence[str] = ()) -> str | None:
        """The segment's vocoder mode (``after``: the texts forecast to follow it). ``frozen-first``
        streams inside a segment only where it pays: exact for a segment forecast whole before a
        playing listener runs dry, less the player's lead (27 ms to spare, one came 50 ms before
        the end in Chromium: a gap), and where others leave no headroom. For a player holding audio
        but not started, whose audio does not drain, exact where that is forecast whole in time
        for its hold or streaming is no faster than real time, unless streaming this segment
        starts it sooner (made whole, a busy core's hold 0.25 s more than the player held waited
        4.4 s for a 5.6 s sentence; its first chunk comes soonest: ``waiting``)."""
        if self.requested != VocoderMode.FROZEN_FIRST or not self.live:
            return self.requested
        rate, k = self.engine_rate, self.engine_rate.safety(self.settings.preroll_safety)
        need = rate.predict(VocoderMode.EXACT, rate.audio_s(text, self.options.speed))
        waits, later = self.t_first_audio is not None and self.t_play is None, self.later_mode()
        if self.buffered_s() - PLAYER_LEAD_S >= k * need or (waits and later == VocoderMode.EXACT):
            ff, exact, rest = VocoderMode.FROZEN_FIRST, VocoderMode.EXACT, [later] * len(after)
            if not waits or not self._sooner([text, *after], [ff, *rest], [exact, *rest]):
                return VocoderMode.EXACT
        if self.budget is not None and not self.budget.headroom(self, k * rate.rtf(VocoderMode.FROZEN_FIRST)):
            return VocoderMode.EXACT  # streaming inside a segment costs more than the engine has spare
        return self.requested

    def later_mode(self) -> str | None:
        """The mode a segment after the next one is forecast to get: exact once streaming inside
        a segment is no faster than real time, unless the player has not started and streamed
        segments start it sooner (``preroll_ms`` weighs both: ``stream_to_start``)."""
        slow = self.engine_rate.streaming_too_slow(self.settings.preroll_safety)
        if self.requested == VocoderMode.FROZEN_FIRST and slow and not (self.stream_to_start and self.t_play is None):
            return VocoderMode.EXACT
        return self.requested

    def _sooner(self, texts: Sequence[str], streamed: Sequence[str | None], whole: Sequence[str | None]) -> bool:
        """For a player not started yet: is the forecast start sooner with ``texts`` in the
        ``streamed`` modes than in the ``whole`` ones? Exact segments arrive whole, so the hold
        takes in the next one whole."""
        rate, floor = self.engine_rate, self.settings.preroll_safety
        k, held, speed = rate.safety(floor, self.bucket or DEFAULT), self.buffered_s(), self.options.speed
        got = (start_s(forecast(texts, ms, rate, speed, 1), held, k, rate.peak()) for ms in (streamed, whole))
        return next(got) < next(got)

    def preroll_ms(self, texts: Sequence[str], mode: str | None, complete: bool = False) -> int:
        """``preroll_ms`` for a player now; ``texts[0]`` is the segment starting (in ``mode``),
        the rest what is forecast to follow it; ``complete``: they are the whole reply, and
        nothing was made yet (the forecast the margins learn from). Every one is stretched by what
        replies of its kind needed (``bucket``), whatever mode a later segment gets: exact's rule
        there (1.15, where frozen-first had learned 1.44) stalled a player 1.2 s."""
        if self.bucket is None:
            self.bucket = mode or DEFAULT
        if self.live and self.t_play is None:
            n, ff, exact = len(texts) - 1, VocoderMode.FROZEN_FIRST, VocoderMode.EXACT
            slow = self.requested == ff and self.engine_rate.streaming_too_slow(self.settings.preroll_safety)
            self.stream_to_start = slow and n > 0 and self._sooner(texts, [mode, *[ff] * n], [mode, *[exact] * n])
        later = self.later_mode()
        modes = [mode if k == 0 else later for k in range(len(texts))]
        shared = self._shared_pieces(texts)  # once: the plan, the preroll and the offer read it
        if complete and self.live and self.plan is None:
            self.plan = self._plan(texts, modes, mode, shared)
        if self.plan is not None:
            self.made_modes.append(mode)
        floor, held = self.settings.preroll_safety, self.buffered_s()
        ms = (
            round(1000 * preroll_from(self._stretched(shared, SHARED), held))
            if shared is not None
            else self.engine_rate.preroll_ms(
                floor, self.options.speed, texts, held, modes, self.bucket, self.paced_from()
            )
        )
        self.tell(ms / 1000)
        self.offer = self._start_offer(texts, modes, ms / 1000, shared)
        return ms

    def _start_offer(
        self, texts: Sequence[str], modes: Sequence[str | None], hold: float, shared: Placement | None
    ) -> float | None:
        """When (clock) a player not started yet, holding the audio made so far, can start with
        every forecast piece in time, where its ``hold`` would start it a call later. None if
        nothing is held, not ``waiting``, or ``slowing``. No arrival rounds it up, so: stretched by
        what clock starts needed, at least ``preroll_safety`` and 1 + 2 x ``noise``, the next call
        at its ``peak`` (a start 70 ms early ran dry, waited 0.74-2.2 s: docs/SCHEDULING.md)."""
        rate, held, floor = self.engine_rate, self.samples / self.sample_rate, self.settings.preroll_safety
        if not held or hold <= 0 or not self.waiting() or self.slowing():
            return None
        least = max(floor, 1.0 + 2.0 * rate.noise())
        if shared is not None:  # where the scheduler serves it beside the others
            got = self._stretched(shared, started(SHARED), max(least, 1.0 + 2.0 * rate.peak()))
        else:
            k = max(least, rate.safety(floor, started(self.bucket or DEFAULT)))
            segments = forecast(texts, modes, rate, self.options.speed, self.paced_from())
            late = rate.peak() * k * segments[0].compute_s if segments else 0.0  # one call at its peak
            got = [(at + late, audio, pos) for at, audio, pos in arrivals(segments, k)]
        if not got or (early := earliest_start(got, held)) >= start_on(got, hold, held) - TIE_S:
            return None
        return self.clock() + early

    def slowing(self) -> bool:
        """Calls run over their forecast by more than ``preroll_safety``'s slack: no start sooner
        than the arrivals confirm (a busy core's first slow call made holds too small)."""
        return self.engine_rate.recent_overrun() > self.settings.preroll_safety - 1.0

    def learn(self) -> None:
        """The reply is made: what its arrivals needed tunes the margins (``margins.py``), the plan's
        segments as made (``Plan.as_made``; one on the prior rate forecast again at the rate now)."""
        if (plan := self.plan) is not None and self.arrivals:
            rate, floor, plan = self.engine_rate, self.settings.preroll_safety, plan.as_made(self.made_modes)
            if plan.again is not None:
                plan = plan.redone(forecast(*plan.again, rate, self.options.speed, 1))  # as planned: not playing
            hold, clock = plan.needed(self.arrivals)
            rate.learn(plan.bucket, hold, floor)
            rate.learn(started(plan.bucket), clock, floor)
        self.plan, self.made_modes = None, []

    def _plan(
        self, texts: Sequence[str], modes: Sequence[str | None], mode: str | None, shared: Placement | None
    ) -> Plan:
        """The forecast a reply starts with, as the preroll it gives at each stretch (and, made
        on the prior rate, its texts and modes, to forecast again once the engine is measured)."""
        if shared is not None:
            return Plan.beside(*shared, self.clock(), SHARED)
        rate, bucket = self.engine_rate, mode or DEFAULT
        measured = all(map(rate.seen, [mode, *modes]))
        return Plan.made_of(texts, modes, rate, self.options.speed, self.clock(), bucket, measured, self.paced_from())

    def shared_preroll_s(self, texts: Sequence[str]) -> float | None:
        """The preroll with the other listeners' work on the engine (None: it has no others):
        this reply's segments finish where the scheduler will serve them, stretched by the
        margin replies needed where that is more than the budget's (never below its floor: a
        listener admitted beside a reply streaming in stalled 0.24 s on the replay below it)."""
        shared = self._shared_pieces(texts)
        return None if shared is None else preroll_from(self._stretched(shared, SHARED), self.buffered_s())

    def _stretched(self, shared: Placement, bucket: str, least: float = 0.0) -> list[tuple[float, float, float]]:
        """``_shared_pieces`` stretched by the margin ``bucket`` learned (before it learned
        anything, what any reply's hold needed), at least ``least``, where more than the budget's."""
        got, k = shared
        learned = max(self.engine_rate.margin(bucket) or self.engine_rate.margin(None) or 0.0, least)
        return scaled(got, learned / k) if learned > k else got

    def _shared_pieces(self, texts: Sequence[str]) -> Placement | None:
        """(arrival, audio, position) of this reply's segments where the scheduler will serve
        them beside the others' work, forecast at the budget's stretch (returned with them)."""
        if self.budget is None or not self.live or not self.budget.contended():
            return None
        o = self.options  # replies sharing this one's synthesis ("Play both") are its own work
        key = share_key(o.voice, o.speed, self.requested, texts, o.cache)
        others, free = self.budget.streams(exclude=self, key=key)
        if not others and not any(free):
            return None
        now, free = self.clock(), free or [0.0]
        mine = self.stream(self.audio_of(texts), now, None, current=False, anchored=False)
        if self.t_play is not None or o.buffered_s:
            return pieces(mine, play([*others, mine], free)[0][-1]), self.budget.safety()
        # the player starts once it holds the preroll, whenever that comes, and the scheduler
        # follows: the smallest hold that keeps it gapless and the others no later than its
        # planned start does; where its deadlines and another's are within what text-length
        # estimates can swap, whichever order the scheduler takes (the hold that covers both)
        held = self.buffered_s()
        anchor = self.deadline() - now - held
        got = max(
            (placed(others, mine, free, held, anchor, bias) for bias in (0.0, -TIE_S)),
            key=lambda g: preroll_from(g, held),
        )
        return got, self.budget.safety()
