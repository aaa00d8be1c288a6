"""What the generated-input properties (tests/test_properties.py) found, on the wire.

Before the fixes: JSON nested a few thousand deep (``RecursionError``) or holding an integer of
over 4300 digits (a plain ``ValueError``), both far under the size limits, and a body whose
``charset`` names no codec (``LookupError``) were 500s on every JSON route, and on the WebSocket
escaped the channel and dropped the socket without an answer; ``bitrate`` of ``inf`` or an
integer past a float's range (``OverflowError``) did the same on every route; and a blend
spelling with a long run of spaces or digits held the event loop for minutes to hours (the blend
pattern backtracked), on every engine that takes blends (the embedded one, the default).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator

import aiohttp
import msgpack
from aiohttp import web

from gateway.engines.fake import FakeEngine
from gateway.web.container import make_container_app

from .conftest import fake_settings

KEY = "hostile-input-master-key"
BEARER = {"Authorization": f"Bearer {KEY}"}
DEEP = "[" * 5000
HUGE_INT = '{"input": "Hi.", "text": "Hi.", "n": ' + "9" * 5000 + "}"
JSON_ROUTES = ("/v1/stream/sse", "/v1/audio/speech", "/v1/tokens")


async def answer(
    http: aiohttp.ClientSession, url: str, body: str | bytes, content_type: str = "application/json"
) -> tuple[int, str]:
    data = body.encode() if isinstance(body, str) else body
    async with http.post(url, data=data, headers={**BEARER, "Content-Type": content_type}) as resp:
        return resp.status, (await resp.json())["error"]["code"]


@contextlib.asynccontextmanager
async def container_url() -> AsyncIterator[str]:
    """The model container's app (fake engine) on a free loopback port."""
    settings = fake_settings()
    runner = web.AppRunner(make_container_app(settings, FakeEngine(settings)))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        host, port = runner.addresses[0][:2]
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


async def test_hostile_json_bodies_are_400_invalid_json_on_every_route(start_server, http) -> None:
    server = await start_server(fake_settings(auth_token=KEY))
    async with container_url() as container:
        urls = [server.url + route for route in JSON_ROUTES] + [container + "/invocations"]
        for url in urls:
            for body in (DEEP, HUGE_INT, b'{"input": "\xff"}'):
                assert await answer(http, url, body) == (400, "invalid_json"), (url, body[:20])
            headers = {**BEARER, "Content-Type": "application/json; charset=no-such-codec"}
            async with http.post(url, data=b'{"input": "Hi.", "text": "Hi."}', headers=headers) as resp:
                assert resp.status == 200, url  # JSON is UTF-8 whatever charset a request names
                await resp.read()


async def test_ws_hostile_json_is_answered_and_the_session_goes_on(start_server, http) -> None:
    server = await start_server()
    async with http.ws_connect(server.ws_url) as ws:
        for frame in (DEEP, '{"type": "text", "text": ' + "1" * 5000 + "}"):
            await ws.send_str(frame)
            body = await ws.receive_json(timeout=10)
            assert (body["type"], body["code"]) == ("error", "invalid_json")
        await ws.send_json({"type": "text", "text": "Still here."})
        await ws.send_json({"type": "end"})
        kinds = []
        while (msg := await ws.receive(timeout=10)).type != aiohttp.WSMsgType.CLOSE:
            if msg.type == aiohttp.WSMsgType.TEXT:
                kinds.append(msg.json()["type"])
        assert kinds[-1] == "done" and "error" not in kinds and msg.data == 1000


async def test_out_of_range_numbers_are_invalid_options_not_500s(start_server, http) -> None:
    server = await start_server()
    for query in ("bitrate=inf", "bitrate=1e400", "bitrate=64.9", "buffered_s=-1e400"):
        async with http.get(f"{server.url}/v1/stream/sse?text=Hi.&{query}") as resp:
            assert resp.status == 400 and (await resp.json())["error"]["code"] == "invalid_option", query
    body = '{"input": "Hi.", "bitrate": 1' + "0" * 400 + "}"
    assert await answer(http, server.url + "/v1/audio/speech", body) == (400, "invalid_option")
    async with http.ws_connect(server.ws_url) as ws:
        await ws.send_str('{"type": "start", "speed": 1' + "0" * 400 + "}")
        body = await ws.receive_json(timeout=10)
        assert (body["type"], body["code"]) == ("error", "invalid_option")
        assert (await ws.receive(timeout=10)).data == 1008


async def test_a_long_blend_spelling_is_refused_at_once(start_server, http) -> None:
    """A 1 MiB body whose voice is a blend with a 500,000-digit weight: 400 ``invalid_option``
    (the old pattern's backtracking held the event loop past the client's 5-minute timeout)."""
    settings = fake_settings()
    engine = FakeEngine(settings)
    engine.declare(blends=True)
    server = await start_server(settings, engine)
    for voice in ("tone_a(" + "1" * 500_000 + "x)+tone_b", "tone_a" + " " * 500_000 + "x+tone_b"):
        body = json.dumps({"text": "Hi.", "voice": voice})
        assert await answer(http, server.url + "/v1/stream/sse", body) == (400, "invalid_option")
    async with http.get(server.url + "/healthz") as resp:
        assert resp.status == 200


async def test_the_envelope_is_read_alike_before_and_after_the_session_starts(start_server, http) -> None:
    """``?envelope=MSGPACK``: options read it case-blind, so every message is msgpack; an error
    before the session started (a malformed first message) came as JSON text."""
    server = await start_server()
    for envelope in ("msgpack", "MSGPACK"):
        async with http.ws_connect(f"{server.ws_url}?envelope={envelope}") as ws:
            await ws.send_str("not json")
            await ws.send_json({"type": "text", "text": "Hi."})
            first, second = await ws.receive(timeout=10), await ws.receive(timeout=10)
            assert [first.type, second.type] == [aiohttp.WSMsgType.BINARY] * 2, envelope
            assert [msgpack.unpackb(m.data)["type"] for m in (first, second)] == ["error", "ready"]
