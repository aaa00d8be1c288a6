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
from collections.abc import AsyncIterator

import aiohttp
import pytest

from bench.client import sse_stream
from gateway.core.synthesis import SynthesisHub
from gateway.engines.fake import FakeEngine
from gateway.errors import Overloaded
from gateway.metrics import Metrics
from gateway.web.admission import Admission
from gateway.web.state import GATEWAY

from .conftest import Server, fake_settings

LONG = " ".join(f"This is sentence number {n} of a long reply." for n in range(40))
REPLY = "A short reply. It has two sentences."


def metric(text: str, name: str, **labels: str) -> float:
    found = 0.0
    for line in text.splitlines():
        m = re.match(rf"^{re.escape(name)}\{{(.*)\}} ([0-9.e+-]+)$", line)
        if m and all(f'{k}="{v}"' in m.group(1) for k, v in labels.items()):
            found += float(m.group(2))
    return found


async def raw_request_that_never_reads(server: Server, path: str, body: dict) -> socket.socket:
    """A POST on a socket with a small receive buffer that reads the status line, then nothing."""
    loop = asyncio.get_running_loop()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await loop.sock_connect(sock, ("127.0.0.1", int(server.url.rsplit(":", 1)[1])))
    data = json.dumps(body).encode()
    await loop.sock_sendall(
        sock,
        b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (path.encode(), len(data), data),
    )
    head = await loop.sock_recv(sock, 1024)
    assert head.startswith(b"HTTP/1.1 200"), head[:100]
    return sock


# a reply of 240 sentences (27 MB of PCM) that stops being read; then a short one, queued
STUCK = {
    "sse": ("/v1/stream/sse", {"text": LONG * 6, "format": "pcm"}),
    "speech": ("/v1/audio/speech", {"input": LONG * 6, "response_format": "pcm"}),
    "speech-sse": ("/v1/audio/speech", {"input": LONG * 6, "response_format": "pcm", "stream_format": "sse"}),
}


async def queued_reply(http: aiohttp.ClientSession, server: Server, route: str) -> None:
    if route == "sse":
        result = await sse_stream(http, server.url + "/v1/stream/sse", text=REPLY)
        assert result.done, result.error
        return
    async with http.post(
        server.url + "/v1/audio/speech", json={"input": REPLY, "response_format": "pcm", "stream": False}
    ) as r:
        assert r.status == 200, await r.text()
        assert len(await r.read()) > 0


@pytest.mark.parametrize("route", ["sse", "speech", "speech-sse"])
async def test_reader_that_stops_reading_is_cut_off_and_frees_its_slot(start_server, http, route: str) -> None:
    """Issue 22, finding 1 (and finding 5's streamed speech, audio or OpenAI's SSE, which now
    holds a slot too): `send_timeout_s` holds on SSE and on a streamed speech reply as on the
    WebSocket. A reader
    that stops reading is cut off, its synthesis stops, and the one slot goes to the session
    queued behind it (which, on the old code, waited out its queue and was refused)."""
    server = await start_server(
        fake_settings(
            max_active_sessions=1,
            max_queued_sessions=1,
            queue_timeout_s=20,
            send_timeout_s=1.0,
            lookahead=1,
            lookahead_s=0,
            max_text_chars=20000,
        )
    )
    stuck = await raw_request_that_never_reads(server, *STUCK[route])
    try:
        await queued_reply(http, server, route)  # admitted once the reader that stopped was cut off
        gw = server.app[GATEWAY]
        assert server.engine.active == 0 and not gw.hub.flights  # nothing runs on for it
        assert server.engine.calls < 60, server.engine.calls  # stopped, not run to the end
        async with http.get(server.url + "/metrics") as r:
            text = await r.text()
        assert metric(text, "tts_errors_total", channel=route.split("-")[0], code="slow_client") == 1
        assert metric(text, "tts_sessions_active", channel="sse") == 0
        # cut off: what it can still read is what the buffers held, far from the whole reply
        assert await read_to_the_end(stuck) < 12 << 20
    finally:
        stuck.close()


async def read_to_the_end(sock: socket.socket) -> int:
    loop = asyncio.get_running_loop()
    total = 0
    with contextlib.suppress(ConnectionResetError):
        while data := await loop.sock_recv(sock, 1 << 20):
            total += len(data)
    return total


@contextlib.asynccontextmanager
async def held_slot(http: aiohttp.ClientSession, server: Server) -> AsyncIterator[None]:
    """A WebSocket session that holds its slot (admitted: `ready` came) until the block ends."""
    async with http.ws_connect(server.ws_url) as ws:
        await ws.send_json({"type": "start"})
        assert json.loads((await ws.receive()).data)["type"] == "ready"
        yield
        await ws.send_json({"type": "text", "text": "Done now."})
        await ws.send_json({"type": "end"})
        async for _ in ws:
            pass


async def refusal(response: aiohttp.ClientResponse) -> tuple[int, str, dict]:
    return response.status, response.headers.get("Retry-After", ""), await response.json()


async def test_speech_route_is_refused_exactly_as_the_channels_are(start_server, http) -> None:
    """Issue 22, finding 5: with the one slot held and no queue, the OpenAI route is refused
    (whole file, streamed audio and OpenAI's SSE alike) with the SSE channel's status, error
    body and Retry-After; on the old code all 9 speech requests ran."""
    server = await start_server(fake_settings(max_active_sessions=1, max_queued_sessions=0))
    async with held_slot(http, server):
        async with http.get(server.url + "/v1/stream/sse", params={"text": "Hi."}) as r:
            channel = await refusal(r)
        assert channel[0] == 503 and channel[1].isdigit() and channel[2]["error"]["code"] == "overloaded"

        async def speech(form: dict) -> tuple[int, str, dict]:
            async with http.post(server.url + "/v1/audio/speech", json={"input": "Hi.", **form}) as r:
                return await refusal(r) if r.status != 200 else (200, "", {})

        forms = [{"stream": False}, {}, {"stream_format": "sse"}] * 3
        answers = await asyncio.gather(*(speech(form) for form in forms))
        assert answers == [channel] * 9
        assert server.engine.calls == 0


async def test_speech_route_queues_for_a_slot_like_the_channels(start_server, http) -> None:
    """Issue 22, finding 5: a speech request past the active sessions waits in the same queue
    and runs once the slot is free; past its queue time it is refused as a channel is."""
    server = await start_server(fake_settings(max_active_sessions=1, max_queued_sessions=2))
    admission = server.app[GATEWAY].admission
    async with held_slot(http, server):
        batch = asyncio.create_task(
            http.post(server.url + "/v1/audio/speech", json={"input": REPLY, "response_format": "pcm", "stream": False})
        )
        streamed = asyncio.create_task(
            http.post(server.url + "/v1/audio/speech", json={"input": REPLY, "response_format": "pcm", "stream": True})
        )
        t0 = time.perf_counter()
        while admission.waiting < 2 and not (batch.done() and streamed.done()) and time.perf_counter() - t0 < 10:
            await asyncio.sleep(0.01)
        assert admission.waiting == 2 and not batch.done() and not streamed.done()  # queued behind the slot
    for task in (batch, streamed):
        async with await task as r:
            assert r.status == 200 and len(await r.read()) > 0

    short = await start_server(fake_settings(max_active_sessions=1, max_queued_sessions=2, queue_timeout_s=0.2))
    async with held_slot(http, short):
        async with http.get(short.url + "/v1/stream/sse", params={"text": "Hi."}) as r:
            channel = await refusal(r)
        async with http.post(short.url + "/v1/audio/speech", json={"input": "Hi."}) as r:
            assert await refusal(r) == channel and channel[0] == 503


@pytest.mark.parametrize("form", [{}, {"stream_format": "sse"}], ids=["audio", "sse"])
async def test_speech_stream_client_that_leaves_gives_back_its_slot(start_server, http, form: dict) -> None:
    """Issue 22 (checked with finding 5): a client that leaves a streamed speech reply mid-way
    stops its synthesis (as `test_reliability.py::test_client_disconnect_cancels_synthesis_and_leaves_no_task`
    shows for every route) and, now that the route takes a slot, gives it back."""
    server = await start_server(fake_settings(fake_rtf=0.5, fake_chunk_ms=100, max_active_sessions=1))
    resp = await http.post(server.url + "/v1/audio/speech", json={"input": LONG, "response_format": "pcm", **form})
    assert resp.status == 200
    await resp.content.readexactly(4800)  # audio is flowing
    assert server.app[GATEWAY].admission.active == 1
    resp.close()
    admission = server.app[GATEWAY].admission
    t0 = time.perf_counter()
    while (server.engine.active or admission.active) and time.perf_counter() - t0 < 30:  # a hang guard
        await asyncio.sleep(0.01)
    assert server.engine.active == 0 and admission.active == 0
    assert server.engine.calls < 10  # 40 sentences asked for


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
