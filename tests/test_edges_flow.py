"""Issue 22, findings 1, 5, 8 and 13: sessions that must give back what they hold.

A reader that stops reading SSE, a speech request that must queue like every other session,
an admission slot freed in the same tick as its waiter is cancelled, a joiner of a shared
synthesis whose first follower leaves: real servers on loopback and the fake engine.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import time
from typing import AsyncIterator

import aiohttp
import pytest

from bench.client import sse_stream
from gateway.admission import Admission
from gateway.engines.fake import FakeEngine
from gateway.errors import Overloaded
from gateway.metrics import Metrics
from gateway.state import GATEWAY
from gateway.synthesis import SynthesisHub

from .conftest import Server, fake_settings

LONG = " ".join(f"This is sentence number {n} of a long reply." for n in range(40))
REPLY = "A short reply. It has two sentences."


async def test_a_slot_handed_to_a_waiter_cancelled_in_the_same_tick_goes_to_the_next() -> None:
    """Issue 22, finding 8: the slot freed for a queued waiter that is cancelled before it runs
    (Python 3.11's Condition dropped that wake-up) goes to the next waiter; on the old code the
    next waiter was refused after its queue time with no session active."""
    admission = Admission(max_active=1, max_queued=2, queue_timeout_s=5.0, per_client=0, metrics=Metrics())
    entered: list[str] = []

    async def queued(name: str) -> None:
        async with admission.session(name):
            entered.append(name)

    holder = admission.session("holder")
    await holder.__aenter__()
    first, second = asyncio.create_task(queued("first")), asyncio.create_task(queued("second"))
    while admission.waiting < 2:  # both tasks run until they wait in the queue
        await asyncio.sleep(0)
    await holder.__aexit__(None, None, None)  # the slot goes to `first`, which has not run yet ...
    first.cancel()  # ... and is cancelled in the same tick (its client went away)
    await second  # Overloaded after 5 s on the old code
    with pytest.raises(asyncio.CancelledError):
        await first
    assert entered == ["second"]
    assert admission.active == 0 and admission.waiting == 0
    async with admission.session("next"):  # nothing lost: the next one is admitted at once
        assert admission.active == 1


async def test_a_waiter_cancelled_before_its_turn_takes_no_slot() -> None:
    """Issue 22, finding 8 (a guard on the fix; passes on the old code too): waiters that time
    out or are cancelled while queued leave the queue without a slot; the counts stay right."""
    admission = Admission(max_active=1, max_queued=3, queue_timeout_s=0.05, per_client=0, metrics=Metrics())
    async with admission.session("holder"):
        with pytest.raises(Overloaded):
            async with admission.session("late"):
                pass
        admission.queue_timeout_s = 5.0
        waiter = asyncio.create_task(admission.session("gone").__aenter__())
        while admission.waiting < 1:
            await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert admission.waiting == 0 and admission.active == 1
    assert admission.active == 0


async def test_a_joiner_that_has_not_started_gets_the_whole_segment() -> None:
    """Issue 22, finding 13: a session that joined a shared synthesis but has not started to
    iterate when the last running follower leaves still gets the whole segment (a listener
    wants the audio, not a reply cut short that looks whole); on the old code it got a part."""
    engine = FakeEngine(fake_settings(fake_rtf=0.2, fake_chunk_ms=50))
    hub = SynthesisHub(engine)
    text = "One two three four five six seven eight."
    first = hub.synthesize(text, voice="tone_a", speed=1.0)
    await first.__anext__()  # the synthesis is under way and followed
    joiner = hub.synthesize(text, voice="tone_a", speed=1.0)  # joins it, not iterating yet
    await first.aclose()  # the only running follower leaves
    pcm = b"".join([c async for c in joiner if isinstance(c, bytes)])
    assert pcm == engine.render(text, "tone_a", 1.0).tobytes()
    assert engine.calls == 1  # shared, never restarted


async def test_a_joiner_that_leaves_before_it_starts_still_stops_the_synthesis() -> None:
    """Issue 22, finding 13: counting a joiner from the moment it joins must not keep a flight
    alive after everyone has left: a joiner closed before it iterated lets it stop."""
    engine = FakeEngine(fake_settings(fake_rtf=0.5, fake_chunk_ms=50))
    hub = SynthesisHub(engine)
    text = "One two three four five six seven eight nine ten."
    first = hub.synthesize(text, voice="tone_a", speed=1.0)
    await first.__anext__()
    joiner = hub.synthesize(text, voice="tone_a", speed=1.0)
    await first.aclose()
    assert engine.active == 1  # still needed by the joiner
    await joiner.aclose()
    assert engine.active == 0 and not hub.flights
