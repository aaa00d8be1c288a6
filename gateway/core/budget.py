"""The engine's real-time budget: who it can serve gaplessly, and when a newcomer can start.

Every admitted live reply (a ``Member``: the pipeline, through its listener) describes the
engine work it still needs as a ``Stream`` of ``Job``s: each segment's forecast compute (live
rate, stretched by the safety margin) and its deadline, the moment the listener's buffer
runs dry without it. ``edf`` plays that work out as the scheduler (``scheduler.py``) will:
the engine's slots, busy first with the calls running now, take the earliest deadline whose
segment is ready (a reply's segments go one after another). A listener stalls where a
segment finishes after its deadline.

A newcomer's forecast start is the earliest start ``S`` at which its own segments (deadline
``S`` + the audio before each) and everyone else's are all met, ``forecast``; it is admitted
at once when ``S`` is at most ``max_start_s`` (or what it would need on an idle engine, so a
session alone is never held back); otherwise it waits in the queue (its ``ready`` says how
long: ``queued_ms``) or, when the wait would pass ``queue_timeout_s``, is refused with
``overloaded`` and a ``Retry-After`` of the forecast wait. Nobody admitted stalls because of
someone who came after them: admission needs every admitted deadline met (or no later than
it would be anyway, on a machine that already runs behind).

Replies that share their synthesis (the demo's "Play both": the same text, voice, speed and
vocoder mode with ``cache`` on, so the hub serves both from one flight) are one reply's work:
``share_key`` names it, a newcomer whose twin is admitted starts with it (its verdict is the
twin's start, never a wait for the twin's work), and the budget counts their work once.

``load`` is the engine-seconds per second the admitted listeners need while they play (each
listener's live RTF, over the slots), with the work queued now (``backlog_s``) beside it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ..errors import Overloaded
from ..kokoro.vocoder.modes import VocoderMode
from .edf import HORIZON_S, SEGMENT_S, TYPICAL_AUDIO_S, Job, Stream, edf, forecast, late, newcomer, planned, still_open

if TYPE_CHECKING:
    from ..config import Settings
    from .engine_rate import EngineRate
    from .scheduler import EngineScheduler

__all__ = [
    "ADMIT",
    "SEGMENT_S",
    "TYPICAL_AUDIO_S",
    "Budget",
    "Job",
    "Member",
    "Seat",
    "Stream",
    "Verdict",
    "edf",
    "late",
    "newcomer",
    "planned",
    "still_open",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Verdict:
    start_s: float  # forecast playback start from now (inf: not within the horizon)
    alone_s: float  # the same on an idle engine
    wait_s: float  # 0: admitted now; else the forecast wait in the queue

    def to_fields(self) -> dict[str, float]:
        return {"queued_ms": round(self.wait_s * 1000), "start_forecast_ms": round(min(self.start_s, HORIZON_S) * 1000)}


ADMIT = Verdict(0.0, 0.0, 0.0)

# (voice, speed, vocoder mode, the remaining segments' texts): the synthesis hub's key per segment
ShareKey = tuple[str, float, str, tuple[str, ...]]


def share_key(voice: str, speed: float, mode: str | None, texts: Sequence[str], share: bool) -> ShareKey | None:
    """What a reply's remaining work is shared on (None: it shares nothing, or has no text yet)."""
    if not share or not texts:
        return None
    return voice, round(speed, 3), mode or "", tuple(" ".join(t.split()) for t in texts)


def shares(a: ShareKey | None, b: ShareKey | None) -> bool:
    """Do two replies follow the same flights? The same voice, speed and mode, and the remaining
    segments of one are the last segments of the other (one of them is a little ahead)."""
    if a is None or b is None or a[:3] != b[:3]:
        return False
    short, long = sorted((a[3], b[3]), key=len)
    return bool(short) and long[len(long) - len(short) :] == short


class Seat(Protocol):
    """A member's listener as the budget sees it: the owner of its engine calls (matched by
    identity) and the start it was promised at admission."""

    @property
    def promised_start(self) -> float | None:
        """Clock time its playback was forecast to start (None: not promised yet)."""
        ...


class Member(Protocol):
    """An admitted live reply (the pipeline, ``membership.BudgetMember``)."""

    @property
    def listener(self) -> Seat:
        """The listener its engine calls are for (``Call.owner``)."""
        ...

    def share_key(self) -> ShareKey | None:
        """What its remaining work is shared on with identical replies (None: nothing)."""
        ...

    def stream(self, now: float, running: float | None) -> Stream:
        """The work still to do; ``running``: the compute left in this member's call that is
        running now (None when it has none running)."""
        ...


class Budget:
    """The admitted members, the queue of those waiting, and the verdict for a newcomer."""

    def __init__(
        self,
        engine_rate: EngineRate,
        scheduler: EngineScheduler,
        settings: Settings,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.engine_rate, self.scheduler, self.clock = engine_rate, scheduler, clock
        self.max_start_s = settings.max_start_s
        self.queue_timeout_s = settings.queue_timeout_s
        self.max_queued = settings.max_queued_sessions
        self.safety_floor = settings.preroll_safety
        self.enabled = True  # off: everyone is admitted at once (the model container)
        self.members: list[Member] = []
        self.queue: list[object] = []  # tickets of members waiting, first come first
        self.expected: list[Member] = []  # sessions told to wait, from their verdict until they enter
        self._changed = asyncio.Event()

    # -- the state ------------------------------------------------------------------------
    def add(self, member: Member) -> None:
        if member not in self.members:
            self.members.append(member)
        self.expected = [m for m in self.expected if m is not member]
        self.changed()

    def expect(self, member: Member) -> None:
        """A session told to wait: its work is ahead of every later newcomer's until it enters."""
        if member not in self.expected:
            self.expected.append(member)

    def remove(self, member: Member) -> None:
        if member in self.members:
            self.members.remove(member)
        self.expected = [m for m in self.expected if m is not member]
        self.changed()

    def changed(self) -> None:
        """Something freed engine time (a call ended, a member left): queued sessions look again."""
        self._changed.set()
        self._changed = asyncio.Event()

    def contended(self) -> bool:
        """Could anyone wait for the engine? Not while it has a slot for every member, every
        running call and a newcomer (the fake engine, remote endpoints): then each reply's own
        forecast is the whole story, and nothing here needs to look at the others (a capacity
        run holds thousands of sessions)."""
        return self.scheduler.slots <= len(self.members) + len(self.scheduler.running)

    def slots(self) -> int:
        """Slots that matter: an engine with more slots than calls and members (and a newcomer)
        never makes anyone wait."""
        return min(self.scheduler.slots, len(self.members) + len(self.scheduler.running) + 1)

    def streams(
        self, exclude: Member | Seat | None = None, key: ShareKey | None = None, queued: bool = False
    ) -> tuple[list[Stream], list[float]]:
        """Every member's remaining work now, and when each slot is free. Members sharing
        their synthesis count once; ``exclude`` (a member or its listener) and the members it
        shares with, or that share ``key``, are left out. ``queued``: the sessions waiting in the
        queue count too (all of them are ahead of a newcomer)."""
        now = self.clock()
        if key is None and exclude is not None:
            key = next((m.share_key() for m in self.members if exclude in (m, m.listener)), None)
        counted: list[ShareKey | None] = [key]
        left_out: set[int] = set()  # listeners whose work is the one left out's own
        members: list[tuple[Member, Seat]] = []
        for m in [*self.members, *(self.expected if queued else ())]:
            listener, mine = m.listener, m.share_key()
            if (exclude is not None and exclude in (m, listener)) or any(shares(mine, k) for k in counted):
                left_out.add(id(listener))  # left out, or its work is a twin's
                continue
            counted.append(mine)
            members.append((m, listener))
        running: dict[int, float] = {}
        busy = []
        left_s = self.scheduler.remaining_s()  # once: the same instant for every part
        for call, left in zip(self.scheduler.running, left_s):
            if call.owner is not None:
                running[id(call.owner)] = left
            if call.owner is None or id(call.owner) not in left_out or key is None:
                busy.append(left)  # (a twin's call is the segment the one left out will join)
        busy.sort()  # each running call holds its slot that long
        free = busy + [0.0] * (self.slots() - len(busy))
        streams = [m.stream(now, running.get(id(listener))) for m, listener in members]
        return [s for s in streams if s.jobs], free

    def twin_start(self, key: ShareKey | None) -> float | None:
        """The forecast start (s from now) of an admitted reply that ``key``'s shares its
        synthesis with, else None."""
        for m in self.members:
            if shares(key, m.share_key()):
                promised = m.listener.promised_start
                return max(0.0, promised - self.clock()) if promised is not None else 0.0
        return None

    def safety(self) -> float:
        """The stretch of every forecast here: the learned margin, never below the floor (what
        admission promises must hold on a machine noisier than the replies it learned from)."""
        return max(self.safety_floor, self.engine_rate.safety(self.safety_floor))

    def load(self, exclude: Member | Seat | None = None) -> float:
        """Engine-seconds per second the admitted listeners need while they play, per slot."""
        streams, _ = self.streams(exclude)
        need = sum(sum(j.work_s for j in s.jobs) / max(1e-3, sum(j.audio_s for j in s.jobs)) for s in streams)
        return round(need / max(1, min(self.scheduler.slots, max(1, len(streams)))), 3)

    def headroom(self, listener: Seat, rtf: float) -> bool:
        """Can the engine give ``listener`` ``rtf`` engine-seconds per second beside the others'?"""
        if not self.contended():
            return True
        streams, _ = self.streams(exclude=listener)
        if not streams or self.scheduler.slots > len(streams):
            return True
        need = sum(sum(j.work_s for j in s.jobs) / max(1e-3, sum(j.audio_s for j in s.jobs)) for s in streams)
        return need + rtf <= self.scheduler.slots

    def backlog_s(self) -> float:
        streams, free = self.streams()
        return round(sum(free) + sum(j.work_s for s in streams for j in s.jobs), 3)

    def snapshot(self) -> dict[str, float]:
        return {
            "load": self.load(),
            "backlog_s": self.backlog_s(),
            "listeners": len(self.members),
            "queued": len(self.queue),
            "max_start_s": self.max_start_s,
        }

    # -- admission ------------------------------------------------------------------------
    def plan(self, audio: Sequence[float], mode: str | None) -> tuple[list[float], list[float]]:
        """Work and audio of a reply's segments (``audio`` s each; a nominal reply when empty)."""
        audio = planned(audio)
        k = self.safety()
        return [k * self.engine_rate.predict(mode, a) for a in audio], audio

    def first_fraction(self, mode: str | None, audio_s: float | None = None) -> float:
        """How a segment's audio (``audio_s``) arrives in the forecasts across listeners: streamed
        from this share of its call on, or whole (1). ``frozen-first`` counts as whole: it streams
        only while the engine has headroom (``Listener.mode_for``), which others may take."""
        return 1.0 if mode == VocoderMode.FROZEN_FIRST else self.engine_rate.first_fraction(mode, audio_s)

    def verdict(
        self,
        audio: Sequence[float],
        mode: str | None,
        exclude: Member | Seat | None = None,
        key: ShareKey | None = None,
        queued: bool = False,
    ) -> Verdict:
        """Start forecast for a reply of ``audio`` segments; one that shares its synthesis with
        an admitted reply (``key``) starts with it and adds no work."""
        if (twin := self.twin_start(key)) is not None:
            return Verdict(twin, twin, 0.0)
        work, seg_audio = self.plan(audio, mode)
        others, free = self.streams(exclude, queued=queued) if self.contended() else ([], [0.0])
        shape = [self.first_fraction(mode, a) for a in seg_audio]
        start, alone = forecast(others, work, seg_audio, free, shape)
        limit = max(self.max_start_s, alone)
        return Verdict(start, alone, 0.0 if start <= limit + 1e-6 else start - limit)

    def admit(
        self,
        audio: Sequence[float],
        mode: str | None,
        key: ShareKey | None = None,
        exclude: Member | Seat | None = None,
        tentative: bool = False,
    ) -> Verdict:
        """The verdict for a new session (``audio``: its segments' forecast audio; empty: not
        known yet, a nominal reply), or ``Overloaded`` when it must be refused (``tentative``: the
        caller decides again later, so the refusal is not logged as one). A session whose
        ``key`` an admitted member shares (the same text, voice, speed and vocoder mode, the
        cache on: "Play both") adds no engine work: the hub synthesizes it once for both."""
        if not self.enabled:
            return ADMIT
        v = self.verdict(audio, mode, exclude, key, queued=True)  # behind those already waiting
        if v.wait_s == 0.0 and (not self.queue or self.twin_start(key) is not None):  # a twin adds no work
            return v
        wait = v.wait_s if v.wait_s > 0 else self.max_start_s  # behind the queue: at least one turn
        if wait > self.queue_timeout_s or len(self.queue) >= self.max_queued:
            retry = wait if math.isfinite(wait) else self.queue_timeout_s
            log.log(
                logging.DEBUG if tentative else logging.WARNING,
                "refused a listener: forecast start %.2f s (%.2f s alone), %d listeners, %d queued, load %.2f",
                v.start_s,
                v.alone_s,
                len(self.members),
                len(self.queue),
                self.load(),
            )
            raise Overloaded(
                f"the engine is fully booked: a new listener could start in {retry:.1f} s at the "
                f"earliest (limit {self.max_start_s:g} s); retry then",
                retry_after=max(1.0, min(60.0, retry)),
            )
        return Verdict(v.start_s, v.alone_s, wait)

    async def enter(
        self, member: Member, audio: Callable[[], Sequence[float]], mode: str | None, verdict: Verdict
    ) -> None:
        """Join the admitted members: at once when ``verdict`` says so, else after waiting in
        the queue (first come first) until its forecast start is within the limit."""
        if verdict.wait_s == 0.0 and (not self.queue or self.twin_start(member.share_key()) is not None):
            self.add(member)
            return
        ticket = object()
        self.queue.append(ticket)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + verdict.wait_s + self.queue_timeout_s
        try:
            while not (
                (self.queue[0] is ticket or self.twin_start(member.share_key()) is not None)
                and self.verdict(audio(), mode, member, member.share_key()).wait_s == 0.0
            ):
                if loop.time() >= give_up:
                    raise Overloaded(
                        "the engine stayed fully booked while this session waited; retry shortly",
                        retry_after=max(1.0, self.max_start_s),
                    )
                event = self._changed
                try:  # (not wait_for: on 3.11 it can swallow a cancel that comes with the timeout)
                    async with asyncio.timeout(0.25):  # playback moves deadlines too: look again
                        await event.wait()
                except TimeoutError:
                    pass
            self.add(member)
        finally:
            self.queue.remove(ticket)
            self.changed()
