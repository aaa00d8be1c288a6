"""Synthesize once: identical segments share one engine call, recent ones come from a cache.

A ``Flight`` is one engine call for one segment, run as its own task so that several sessions
can follow it: a session that asks for the same segment (same voice, speed, vocoder mode and
text) while it is in flight joins it, gets the chunks made so far at once, then follows it
live (Go's singleflight, for a stream). Each session still encodes and frames its own audio.
The flight stops when the last session following it leaves; a sharer that cancels or
disconnects does not stop a synthesis that others still need. A session follows from the
moment it joins, not from its first read: one that joined and has not read yet is still owed
the whole segment.

Finished segments go into a bounded LRU cache of PCM (``cache_mb``), so the greetings and
confirmations an agent repeats all day are served at once. A request with ``cache: false``
neither reads nor fills the cache nor joins a flight: a synthesis of its own.

A flight's engine call waits for one of the engine's slots in deadline order (``scheduler.py``:
the listener whose buffer runs dry first goes first); the speed is measured from the moment
it has one. ``budget`` holds the admitted listeners and forecasts what the engine can take.

Every flight reports its rate to ``EngineRate``, and has one watchdog timer (re-armed only
when it fires early), not one per chunk.

An engine that declares ``timestamps`` is always asked for them (they cost nothing): a flight's
items are PCM chunks and, before the audio each describes, ``WordTimes``; both are shared and
cached alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Protocol

from ..config import Settings
from ..engines.base import Engine
from ..errors import EngineTimeout
from ..kokoro.timestamps import WordTimes
from ..metrics import Metrics
from .budget import Budget
from .cpu import CpuShare
from .engine_rate import EngineRate
from .schedule import PLAYER_LEAD_S, early_s
from .scheduler import EngineScheduler, nobody

log = logging.getLogger(__name__)

Key = tuple[str, float, str, str]
Item = bytes | WordTimes  # what a flight yields: PCM, or the words of the PCM that follows


class SlotOwner(Protocol):
    """Whom an engine call is for (a ``Listener``): it says when it needs its next call."""

    def next_deadline(self, call_audio_s: float) -> float | None:
        """When it runs dry once this call's ``call_audio_s`` is in, if it has another segment
        ready; None: it has none, so the engine's slot is not kept for it."""
        ...

    def standing(self) -> float | None:
        """When it was admitted, while its player plays (``scheduler.Standing``)."""
        ...

    def stretch(self) -> float:
        """What its forecasts stretch the engine's compute by (``EngineRate.safety``)."""
        ...


class ItemStream(Protocol):
    """What ``SynthesisHub.synthesize`` returns: a flight's follower or a cached reply; closing
    it early leaves the flight (``contextlib.aclosing``)."""

    def __aiter__(self) -> AsyncIterator[Item]: ...
    async def __anext__(self) -> Item: ...
    async def aclose(self) -> None: ...


class Flight:
    """One engine call: its chunks so far, its end (or error), and who follows it."""

    def __init__(
        self,
        hub: SynthesisHub,
        key: Key | None,
        text: str,
        voice: str,
        speed: float,
        mode: str | None,
        buffered_s: float,
        slot: tuple[float, SlotOwner | None] | None = None,
        waiting: bool = False,
    ) -> None:
        self.hub, self.key = hub, key
        self.chunks: list[Item] = []
        self.samples = 0
        self.done = False
        self.error: BaseException | None = None
        self.followers: set[asyncio.Event] = set()
        self._loop = asyncio.get_running_loop()
        self._progress = self._loop.time()
        self._watchdog: asyncio.TimerHandle | None = None
        deadline, owner = slot if slot is not None else (hub.clock(), None)
        audio = hub.engine_rate.audio_s(text, speed)
        work = hub.engine_rate.predict(mode, audio)
        early = early_s(work, audio, hub.engine_rate.first_fraction(mode, audio))
        lead = (buffered_s, waiting)  # what the listener holds now, and whether their player waits
        self.asked = hub.clock()  # ... measured then: a playing player's buffer drains until the call starts
        self.task = asyncio.create_task(self._scheduled(text, voice, speed, mode, lead, (deadline, work, early), owner))

    async def _scheduled(
        self,
        text: str,
        voice: str,
        speed: float,
        mode: str | None,
        lead: tuple[float, bool],
        due: tuple[float, float, float],
        owner: SlotOwner | None,
    ) -> None:
        deadline, work, early = due
        try:
            standing = owner.standing if owner is not None else nobody
            async with self.hub.scheduler.slot(deadline, work, owner, standing, early) as call:
                self._progress = self._loop.time()  # the watchdog counts from the engine's start
                await self._run(text, voice, speed, mode, lead, owner)
                if self.error is None and owner is not None:  # it keeps its slot if it is first
                    call.then = owner.next_deadline(self.samples / self.hub.engine.sample_rate)
        finally:
            self.done = True
            self.hub.forget(self)
            self._wake()
            self.hub.budget.changed()

    async def _run(
        self, text: str, voice: str, speed: float, mode: str | None, lead: tuple[float, bool], owner: SlotOwner | None
    ) -> None:
        """The engine's call. A playing ``owner``'s buffer (``lead``) drained while the call waited
        for its slot; the engine paces its chunks on it with a margin of its own on their cost,
        so it is told the buffer shrunk by the ``stretch`` the owner's forecasts give the engine's
        compute (told all of it, a first chunk after a start on "Hello!" was sized to come just
        in time where calls ran 1.3-2x their forecast: Play both ran dry in Chromium)."""
        hub = self.hub
        m = hub.metrics
        if m:
            m.inflight.inc()
        clock = hub.clock
        started = clock()
        first: float | None = None
        cpu = CpuShare() if hub.engine_rate.tracing() else None
        self._arm()
        try:
            extra = {"timestamps": True} if hub.engine.capabilities.timestamps else {}
            held, waiting = lead
            if owner is not None and owner.standing() is not None:  # (one that waits has it all still)
                held = max(0.0, held - (started - self.asked) - PLAYER_LEAD_S) / max(1.0, owner.stretch())
            synth = hub.engine.synthesize(
                text, voice=voice, speed=speed, vocoder=mode, buffered_s=held, waiting=waiting, **extra
            )
            async with contextlib.aclosing(synth) as chunks:
                async for pcm in chunks:
                    self.chunks.append(pcm)
                    if isinstance(pcm, WordTimes):
                        continue
                    if first is None:
                        first = clock() - started
                    self.samples += len(pcm) // 2
                    self._progress = self._loop.time()
                    self._wake()
            wall = clock() - started
            audio_s = self.samples / hub.engine.sample_rate
            first = first if first is not None else wall
            paced = held > 0 and not waiting and hub.engine.capabilities.paces  # its first chunk sized to the buffer
            others = cpu.others() if cpu is not None else None  # traced only
            rate, chars = hub.engine_rate, len(text.strip())
            rate.observe(mode, audio_s, wall, first, chars=chars, speed=speed, paced=paced, others=others)
            if m:
                m.rtf.labels(mode or "default").set(hub.engine_rate.rtf(mode))
            hub.finished(self)
        except asyncio.CancelledError:
            if self.error is None:
                raise
        except Exception as exc:  # reaches every follower as itself
            self.error = exc
        finally:
            self.done = True
            hub.forget(self)
            if self._watchdog is not None:
                self._watchdog.cancel()
            self._wake()
            if m:
                m.inflight.dec()
                m.segments.inc()
                m.synth_seconds.observe(clock() - started)

    # one timer per flight: when it fires early (audio came meanwhile) it moves to the new deadline
    def _arm(self) -> None:
        self._watchdog = self._loop.call_at(self._progress + self.hub.timeout_s, self._check)

    def _check(self) -> None:
        if self.done:
            return
        if self._loop.time() - self._progress < self.hub.timeout_s - 1e-3:
            self._arm()
            return
        self.error = EngineTimeout(f"the engine produced no audio for {self.hub.timeout_s:g} s")
        self.task.cancel()

    def _wake(self) -> None:
        for event in self.followers:
            event.set()

    def follow(self) -> Follower:
        """A follower, counted from now (not from its first read), so that the flight goes on
        for a session that joined it but has not started reading when the others leave."""
        return Follower(self)

    async def leave(self, event: asyncio.Event) -> None:
        """A follower is done with the flight: stop it if nobody else follows."""
        self.followers.discard(event)
        if not self.followers and not self.done:
            self.hub.forget(self)  # nobody joins a flight that is being stopped
            self.task.cancel()  # nobody needs it any more: the engine stops
            with contextlib.suppress(asyncio.CancelledError):
                await self.task


class Follower:
    """A flight's chunks from the first, live. ``aclose()`` leaves it (a follower that never
    read leaves too); a flight's error is raised as itself."""

    def __init__(self, flight: Flight) -> None:
        self.flight = flight
        self.event = asyncio.Event()
        self.sent = 0
        self.closed = False
        flight.followers.add(self.event)

    def __aiter__(self) -> Follower:
        return self

    async def __anext__(self) -> Item:
        flight = self.flight
        while self.sent >= len(flight.chunks) and not self.closed:
            if flight.done:
                await self.aclose()
                if flight.error is not None:
                    raise flight.error
                break
            self.event.clear()
            await self.event.wait()
        if self.closed:
            raise StopAsyncIteration
        self.sent += 1
        return flight.chunks[self.sent - 1]

    async def aclose(self) -> None:
        if not self.closed:
            self.closed = True
            await self.flight.leave(self.event)


class SynthesisHub:
    """The one place that calls the engine for streaming sessions: flights, cache, the engine's rate."""

    def __init__(
        self,
        engine: Engine,
        *,
        cache_mb: float = 0.0,
        timeout_s: float = 30.0,
        metrics: Metrics | None = None,
        engine_rate: EngineRate | None = None,
        settings: Settings | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.engine, self.metrics, self.timeout_s = engine, metrics, timeout_s
        self.clock = clock  # every schedule's clock (a test's virtual time: tests/support/virtual_time.py)
        self.engine_rate = engine_rate or EngineRate()
        rate = self.engine_rate
        rate.exact_below_s = engine.capabilities.exact_below_s

        def overrun() -> float:  # who goes first when not every deadline can be met counts it
            return 1.0 + max(0.0, rate.recent_overrun(), rate.peak())

        self.scheduler = EngineScheduler(engine.max_concurrency, clock, overrun)
        self.budget = Budget(self.engine_rate, self.scheduler, settings or Settings(), clock)
        self.cache_limit = int(cache_mb * 1024 * 1024)
        self.cache: OrderedDict[Key, tuple[bytes, tuple[WordTimes, ...]]] = OrderedDict()
        self.cache_bytes = 0
        self.flights: dict[Key, Flight] = {}

    def synthesize(
        self,
        text: str,
        *,
        voice: str,
        speed: float,
        mode: str | None = None,
        requested_mode: str | None = None,
        buffered_s: float = 0.0,
        share: bool = True,
        slot: tuple[float, SlotOwner | None] | None = None,
        waiting: bool = False,
    ) -> ItemStream:
        """PCM chunks for ``text`` (and ``WordTimes`` before them, where the engine gives them).
        ``mode`` goes to the engine (the listener's pick for this segment); ``requested_mode``
        (default ``mode``) is the mode the request asked for, which identical requests share on.
        ``slot``: (deadline, listener) for the engine's queue (default: due now, nobody's);
        ``buffered_s`` and ``waiting``: the engine's hints (``Engine.synthesize``)."""
        if not share:
            return Flight(self, None, text, voice, speed, mode, buffered_s, slot, waiting).follow()
        key: Key = (
            voice,
            round(speed, 3),
            requested_mode if requested_mode is not None else (mode or ""),
            " ".join(text.split()),
        )
        entry = self.cache.get(key)
        flight = self.flights.get(key) if entry is None else None
        if slot is not None and slot[1] is not None and (entry is not None or flight is not None):
            self.scheduler.served_elsewhere(slot[1])
        if entry is not None:
            self.cache.move_to_end(key)
            self._count("hit")
            return _once(*entry)
        if flight is not None:
            self._count("join")
            return flight.follow()
        self._count("miss")
        flight = Flight(self, key, text, voice, speed, mode, buffered_s, slot, waiting)
        self.flights[key] = flight
        return flight.follow()

    def _count(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.cache.labels(outcome).inc()

    def forget(self, flight: Flight) -> None:
        if flight.key is not None and self.flights.get(flight.key) is flight:
            del self.flights[flight.key]

    def finished(self, flight: Flight) -> None:
        """A flight made all its audio: keep it for repeats, within the size limit."""
        if flight.key is None or not self.cache_limit:
            return
        pcm = b"".join(c for c in flight.chunks if isinstance(c, bytes))
        if not pcm or len(pcm) > self.cache_limit:
            return
        old = self.cache.pop(flight.key, None)
        self.cache_bytes -= len(old[0]) if old is not None else 0
        self.cache[flight.key] = (pcm, tuple(c for c in flight.chunks if isinstance(c, WordTimes)))
        self.cache_bytes += len(pcm)
        while self.cache_bytes > self.cache_limit:
            _, (dropped, _words) = self.cache.popitem(last=False)
            self.cache_bytes -= len(dropped)
        if self.metrics is not None:
            self.metrics.cache_bytes.set(self.cache_bytes)


async def _once(pcm: bytes, words: tuple[WordTimes, ...]) -> AsyncGenerator[Item, None]:
    for w in words:  # times from the segment's first sample: all of them may come first
        yield w
    yield pcm
