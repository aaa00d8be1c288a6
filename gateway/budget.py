"""The engine's real-time budget: who it can serve gaplessly, and when a newcomer can start.

Every admitted live reply (a ``Member``: the pipeline, through its listener) describes the
engine work it still needs as a ``Stream`` of ``Job``s: each segment's forecast compute (live
speed, stretched by the safety margin) and its deadline, the moment the listener's buffer
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

``load`` is the engine-seconds per second the admitted listeners need while they play (each
listener's live RTF, over the slots), with the work queued now (``backlog_s``) beside it.
"""
from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol, Sequence

from .errors import Overloaded

if TYPE_CHECKING:
    from .config import Settings
    from .scheduler import EngineScheduler
    from .speed import LiveSpeed

HORIZON_S = 600.0  # no forecast looks further ahead than this
TYPICAL_AUDIO_S = 8.0  # a reply whose text is not known yet (a WebSocket before its text)
SEGMENT_S = 3.0  # ... cut into segments of about this much audio


@dataclass(frozen=True, slots=True)
class Job:
    """One segment's engine work: ``work_s`` of compute, needed ``deadline`` s from now."""

    work_s: float
    deadline: float
    audio_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Stream:
    """One reply's remaining segments, in order; the first may start ``release`` s from now
    (after its own call that is running)."""

    jobs: tuple[Job, ...]
    release: float = 0.0


@dataclass(frozen=True, slots=True)
class Verdict:
    start_s: float  # forecast playback start from now (inf: not within the horizon)
    alone_s: float  # the same on an idle engine
    wait_s: float  # 0: admitted now; else the forecast wait in the queue

    def to_fields(self) -> dict[str, float]:
        return {"queued_ms": round(self.wait_s * 1000), "start_forecast_ms": round(min(self.start_s, HORIZON_S) * 1000)}


ADMIT = Verdict(0.0, 0.0, 0.0)


class Member(Protocol):
    def stream(self, now: float, running: float | None) -> Stream:
        """The work still to do; ``running``: the compute left in this member's call that is
        running now (None when it has none running)."""
        ...


def edf(streams: Sequence[Stream], free_at: Sequence[float]) -> list[list[float]]:
    """Finish times (s from now) of every job of ``streams``: non-preemptive earliest deadline
    first on ``len(free_at)`` slots (each free from its time on), a stream's jobs in order."""
    free = sorted(free_at) or [0.0]
    nxt = [0] * len(streams)
    ready = [s.release for s in streams]
    done: list[list[float]] = [[] for _ in streams]
    left = sum(len(s.jobs) for s in streams)
    while left:
        t = free[0]
        cands = [i for i, s in enumerate(streams) if nxt[i] < len(s.jobs)]
        now_ready = [i for i in cands if ready[i] <= t + 1e-12]
        if not now_ready:
            t = min(ready[i] for i in cands)
            now_ready = [i for i in cands if ready[i] <= t + 1e-12]
        i = min(now_ready, key=lambda k: (streams[k].jobs[nxt[k]].deadline, k))
        end = t + streams[i].jobs[nxt[i]].work_s
        done[i].append(end)
        ready[i] = end
        nxt[i] += 1
        left -= 1
        free[0] = end
        free.sort()
    return done


def late(stream: Stream, finish: Sequence[float]) -> float:
    """How far the latest job of ``stream`` finishes after its deadline (<= 0: none late)."""
    return max((f - j.deadline for j, f in zip(stream.jobs, finish)), default=-math.inf)


def newcomer(work: Sequence[float], audio: Sequence[float], start: float) -> Stream:
    """A reply that starts playing ``start`` s from now: segment k is due then plus the audio before it."""
    jobs, pos = [], 0.0
    for w, a in zip(work, audio):
        jobs.append(Job(w, start + pos, a))
        pos += a
    return Stream(tuple(jobs))


def forecast(others: Sequence[Stream], work: Sequence[float], audio: Sequence[float],
             free_at: Sequence[float]) -> tuple[float, float]:
    """(start, start alone): the earliest playback start of a new reply (segments' ``work`` and
    ``audio``) that keeps every other stream no later than it is without it and every one of
    its own segments in time; the same on an idle engine. ``inf`` beyond ``HORIZON_S``."""
    if not work:
        return 0.0, 0.0
    alone_fin = edf([newcomer(work, audio, 0.0)], [0.0] * len(free_at))[0]
    alone = max(0.0, late(newcomer(work, audio, 0.0), alone_fin))
    if not others and not any(free_at):
        return alone, alone
    base = [max(0.0, late(s, f)) for s, f in zip(others, edf(others, free_at))]

    def fits(start: float) -> bool:
        mine = newcomer(work, audio, start)
        fin = edf([*others, mine], free_at)
        if late(mine, fin[-1]) > 1e-6:
            return False
        return all(late(s, f) <= b + 1e-6 for s, f, b in zip(others, fin, base))

    lo, hi = alone, alone + sum(work) + sum(sum(j.work_s for j in s.jobs) for s in others) + max(free_at, default=0)
    if fits(lo):
        return lo, alone
    if hi > HORIZON_S or not fits(hi):
        return math.inf, alone
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
        if hi - lo < 0.01:
            break
    return hi, alone


def planned(audio: Sequence[float]) -> list[float]:
    """``audio`` itself, or a nominal reply's segments when it is not known yet."""
    if audio:
        return list(audio)
    n = max(1, round(TYPICAL_AUDIO_S / SEGMENT_S))
    return [TYPICAL_AUDIO_S / n] * n


class Budget:
    """The admitted members, the queue of those waiting, and the verdict for a newcomer."""

    def __init__(self, speed: "LiveSpeed", scheduler: "EngineScheduler", settings: "Settings",
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.speed, self.scheduler, self.clock = speed, scheduler, clock
        self.max_start_s = settings.max_start_s
        self.queue_timeout_s = settings.queue_timeout_s
        self.max_queued = settings.max_queued_sessions
        self.safety_floor = settings.preroll_safety
        self.enabled = True  # off: everyone is admitted at once (the model container)
        self.members: list[Member] = []
        self.queue: list[object] = []  # tickets of members waiting, first come first
        self._changed = asyncio.Event()

    # -- the state ------------------------------------------------------------------------
    def add(self, member: Member) -> None:
        if member not in self.members:
            self.members.append(member)
        self.changed()

    def remove(self, member: Member) -> None:
        if member in self.members:
            self.members.remove(member)
        self.changed()

    def changed(self) -> None:
        """Something freed engine time (a call ended, a member left): queued sessions look again."""
        self._changed.set()
        self._changed = asyncio.Event()

    def slots(self) -> int:
        """Slots that matter: an engine with more slots than members never makes anyone wait."""
        return min(self.scheduler.slots, len(self.members) + 1)

    def streams(self, exclude: object = None) -> tuple[list[Stream], list[float]]:
        """Every member's remaining work now, and when each slot is free."""
        now = self.clock()
        running: dict[int, float] = {}
        for call, left in zip(self.scheduler.running, self.scheduler.remaining_s()):
            if call.owner is not None:
                running[id(call.owner)] = left
        free = sorted(self.scheduler.remaining_s())[: self.slots()]
        free += [0.0] * (self.slots() - len(free))
        streams = []
        for m in self.members:
            listener = getattr(m, "listener", m)
            if exclude is not None and exclude in (m, listener):
                continue
            streams.append(m.stream(now, running.get(id(listener))))
        return [s for s in streams if s.jobs], free

    def safety(self) -> float:
        return self.speed.safety(self.safety_floor)

    def load(self) -> float:
        """Engine-seconds per second the admitted listeners need while they play."""
        streams, _ = self.streams()
        need = sum(sum(j.work_s for j in s.jobs) / max(1e-3, sum(j.audio_s for j in s.jobs)) for s in streams)
        return round(need / max(1, min(self.scheduler.slots, max(1, len(streams)))), 3)

    def backlog_s(self) -> float:
        streams, free = self.streams()
        return round(sum(free) + sum(j.work_s for s in streams for j in s.jobs), 3)

    def snapshot(self) -> dict[str, float]:
        return {"load": self.load(), "backlog_s": self.backlog_s(), "listeners": len(self.members),
                "queued": len(self.queue), "max_start_s": self.max_start_s}

    # -- admission ------------------------------------------------------------------------
    def plan(self, audio: Sequence[float], mode: str | None) -> tuple[list[float], list[float]]:
        """Work and audio of a reply's segments (``audio`` s each; a nominal reply when empty)."""
        audio = planned(audio)
        k = self.safety()
        return [k * self.speed.predict(mode, a) for a in audio], audio

    def verdict(self, audio: Sequence[float], mode: str | None, exclude: object = None) -> Verdict:
        work, seg_audio = self.plan(audio, mode)
        others, free = self.streams(exclude)
        start, alone = forecast(others, work, seg_audio, free)
        limit = max(self.max_start_s, alone)
        return Verdict(start, alone, 0.0 if start <= limit + 1e-6 else start - limit)

    def admit(self, audio: Sequence[float], mode: str | None) -> Verdict:
        """The verdict for a new session (``audio``: its segments' forecast audio; empty: not
        known yet, a nominal reply), or ``Overloaded`` when it must be refused."""
        if not self.enabled:
            return ADMIT
        v = self.verdict(audio, mode)
        if v.wait_s == 0.0 and not self.queue:
            return v
        wait = v.wait_s if v.wait_s > 0 else self.max_start_s  # behind the queue: at least one turn
        if wait > self.queue_timeout_s or len(self.queue) >= self.max_queued:
            retry = wait if math.isfinite(wait) else self.queue_timeout_s
            raise Overloaded(f"the engine is fully booked: a new listener could start in {retry:.1f} s at the "
                             f"earliest (limit {self.max_start_s:g} s); retry then",
                             retry_after=max(1.0, min(60.0, retry)))
        return Verdict(v.start_s, v.alone_s, wait)

    async def enter(self, member: Member, audio: Callable[[], Sequence[float]], mode: str | None,
                    verdict: Verdict) -> None:
        """Join the admitted members: at once when ``verdict`` says so, else after waiting in
        the queue (first come first) until its forecast start is within the limit."""
        if verdict.wait_s == 0.0 and not self.queue:
            self.add(member)
            return
        ticket = object()
        self.queue.append(ticket)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + verdict.wait_s + self.queue_timeout_s
        try:
            while not (self.queue[0] is ticket and self.verdict(audio(), mode).wait_s == 0.0):
                if loop.time() >= give_up:
                    raise Overloaded("the engine stayed fully booked while this session waited; retry shortly",
                                     retry_after=max(1.0, self.max_start_s))
                event = self._changed
                try:
                    await asyncio.wait_for(event.wait(), timeout=0.25)  # playback moves deadlines too
                except TimeoutError:
                    pass
            self.add(member)
        finally:
            self.queue.remove(ticket)
            self.changed()
