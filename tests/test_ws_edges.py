"""The WebSocket's own edges (issue 22): options that carry the input (finding 6), ``ping`` /
``pong`` and the idle close ("What to build" item 3). Fake engine, real gateway on loopback."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
from yarl import URL

from .conftest import Server, fake_settings
from .support.engines import SlowLoadingEngine

Events = list[tuple[str, Any]]


async def read_to_close(ws: aiohttp.ClientWebSocketResponse, deadline_s: float = 20.0) -> Events:
    """Every message until the socket closes: ``(type, body)`` for events, ``("audio", bytes)``."""
    seen: Events = []
    async with asyncio.timeout(deadline_s):
        async for msg in ws:
            if msg.type == aiohttp.WSMsgType.BINARY:
                seen.append(("audio", len(msg.data)))
            elif msg.type == aiohttp.WSMsgType.TEXT:
                body = json.loads(msg.data)
                seen.append((body["type"], body))
    return seen


async def read_until(ws: aiohttp.ClientWebSocketResponse, kind: str, deadline_s: float = 20.0) -> Events:
    seen: Events = []
    async with asyncio.timeout(deadline_s):
        while not seen or seen[-1][0] != kind:
            msg = await ws.receive()
            if msg.type == aiohttp.WSMsgType.BINARY:
                seen.append(("audio", len(msg.data)))
            else:
                assert msg.type == aiohttp.WSMsgType.TEXT, (msg, seen)
                body = json.loads(msg.data)
                seen.append((body["type"], body))
    return seen


def kinds(events: Events) -> list[str]:
    return [k for k, _ in events]


def sentences(events: Events) -> list[str]:
    return [body["text"] for k, body in events if k == "sentence"]


# -- finding 6: text / prompt among the options ------------------------------------------------
async def test_text_in_start_is_spoken_and_more_text_may_follow(fake_server: Server, http) -> None:
    """Issue 22, finding 6: ``start {text}`` was accepted and never spoken (the reply ended in
    ``nothing_to_speak``). It is the reply's beginning, flushed: spoken at once, and the reply
    takes more ``text`` until ``end``."""
    async with http.ws_connect(fake_server.ws_url) as ws:
        await ws.send_json({"type": "start", "format": "pcm", "text": "One two three."})
        first = await read_until(ws, "audio")  # spoken before any more input
        await ws.send_json({"type": "text", "text": "Four five six."})
        await ws.send_json({"type": "end"})
        rest = await read_to_close(ws)
    events = first + rest
    assert "error" not in kinds(events), events
    assert sentences(events) == ["One two three.", "Four five six."]
    assert kinds(events)[-1] == "done" and ws.close_code == 1000


async def test_text_in_the_query_is_the_whole_reply(fake_server: Server, http) -> None:
    """Issue 22, finding 6: ``?text=`` was accepted and never spoken. With the input in the URL
    the session starts as the socket opens, and the text is the whole reply: ``done`` follows
    with no message from the client."""
    url = URL(fake_server.ws_url).with_query({"text": "One two three. Four five.", "format": "pcm"})
    async with http.ws_connect(url) as ws:
        events = await read_to_close(ws)
    assert kinds(events)[0] == "ready" and events[0][1]["preroll_ms"] is not None
    assert sentences(events) == ["One two three.", "Four five."]
    assert kinds(events)[-1] == "done" and ws.close_code == 1000


async def test_prompt_in_start_or_query_begins_a_conversation(start_server, http) -> None:
    """Issue 22, finding 6: ``prompt`` among the options is the conversation's first turn; the
    socket stays open after its ``done`` for the next ``prompt``, until ``end``."""
    server = await start_server(fake_settings(agent_first_token_ms=0.0, agent_tokens_per_s=0.0))
    for where in ("start", "query"):
        url = URL(server.ws_url).with_query({"prompt": "Hello?"} if where == "query" else {})
        async with http.ws_connect(url) as ws:
            if where == "start":
                await ws.send_json({"type": "start", "prompt": "Hello?"})
            turn = await read_until(ws, "done")
            assert "text" in kinds(turn) and "error" not in kinds(turn), (where, turn)
            await ws.send_json({"type": "prompt", "prompt": "And then?"})
            assert "error" not in kinds(await read_until(ws, "done")), where
            await ws.send_json({"type": "end"})
            assert await read_to_close(ws) == [] and ws.close_code == 1000, where


async def test_start_after_input_in_the_query_is_refused_and_the_reply_goes_on(fake_server: Server, http) -> None:
    """The query's input started the session: a ``start`` after it is ``already_started``."""
    url = URL(fake_server.ws_url).with_query({"text": "One two.", "format": "pcm"})
    async with http.ws_connect(url) as ws:
        await ws.send_json({"type": "start", "voice": "tone_b"})
        events = await read_to_close(ws)
    errors = [body["code"] for k, body in events if k == "error"]
    assert errors in ([], ["already_started"])  # the reply may be done before the start arrives
    assert sentences(events) == ["One two."] and kinds(events)[-1] == "done"


# -- idle sockets ---------------------------------------------------------------------------------
async def test_an_idle_socket_is_told_and_closed(start_server, http) -> None:
    """Issue 22, item 3: a socket with no client message and no reply in progress for
    ``ws_idle_timeout_s`` gets ``closing {reason: "idle"}`` and then close 1000, before a
    session and after a reply alike."""
    server = await start_server(fake_settings(ws_idle_timeout_s=0.3))
    async with http.ws_connect(server.ws_url) as ws:
        events = await read_to_close(ws)
    assert events == [("closing", {"type": "closing", "reason": "idle", "idle_timeout_s": 0.3})]
    assert ws.close_code == 1000
    async with http.ws_connect(server.ws_url) as ws:  # a reply, cancelled: then nothing more
        await ws.send_json({"type": "start", "format": "pcm", "text": "One two three."})
        await read_until(ws, "audio")
        await ws.send_json({"type": "cancel"})
        events = await read_to_close(ws)
    assert kinds(events)[-2:] == ["cancelled", "closing"] and ws.close_code == 1000


async def test_ping_answers_pong_and_keeps_the_socket(start_server, http) -> None:
    """Issue 22, item 3: ``ping`` is answered ``pong`` (with its ``id``) and, like any client
    message, restarts the idle clock; it starts no session."""
    server = await start_server(fake_settings(ws_idle_timeout_s=1.5))
    async with http.ws_connect(server.ws_url) as ws:
        for n in range(40):  # 40 x 50 ms: longer than the timeout, never idle for it
            await ws.send_json({"type": "ping", "id": n})
            assert await ws.receive_json(timeout=10) == {"type": "pong", "id": n}
            await asyncio.sleep(0.05)
        events = await read_to_close(ws)
    assert kinds(events) == ["closing"] and ws.close_code == 1000  # no `ready`: no session


async def test_a_reply_at_work_is_not_idle(start_server, http) -> None:
    """Issue 22, item 3: a segment that takes longer than the idle timeout to make its first
    audio (nothing sent meanwhile) is a reply in progress, not an idle socket."""
    server = await start_server(fake_settings(ws_idle_timeout_s=0.2, fake_first_delay_ms=800.0))
    async with http.ws_connect(server.ws_url) as ws:
        await ws.send_json({"type": "start", "format": "pcm", "text": "One two three."})
        await ws.send_json({"type": "end"})
        events = await read_to_close(ws)
    assert "closing" not in kinds(events) and kinds(events)[-1] == "done" and ws.close_code == 1000


async def test_a_start_waiting_for_the_engine_is_not_idle(http) -> None:
    """Issue 22, item 3: a client whose ``start`` waits for the engine to load has a message
    in hand: no idle close however long the load takes (here 3 idle timeouts)."""
    from bench.servers import serve_app
    from gateway.web.app import make_app

    settings = fake_settings(ws_idle_timeout_s=0.2)
    engine = SlowLoadingEngine(settings)
    async with serve_app(make_app(settings, engine)) as url:
        async with http.ws_connect(url.replace("http://", "ws://") + "/v1/stream/ws") as ws:
            await ws.send_json({"type": "start", "format": "pcm", "text": "One two."})
            await ws.send_json({"type": "end"})
            await asyncio.sleep(0.6)
            engine.loaded.set()
            events = await read_to_close(ws)
    assert "closing" not in kinds(events) and kinds(events)[-1] == "done", events
