"""A bounded fuzz test: generated client messages thrown at the WebSocket channel.

Whatever arrives, the server must answer with well-formed events or close with a proper code,
and stay healthy for the next client.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.client import ws_stream

from .conftest import fake_settings

VALID_CLOSE = {1000, 1007, 1008, 1009, 1011, 1013}
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)
messages = st.one_of(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["start", "text", "prompt", "flush", "end", "cancel", "bogus", ""])},
        optional={
            "text": st.one_of(st.text(max_size=80), json_values),
            "prompt": st.one_of(st.text(max_size=40), json_values),
            "voice": st.one_of(st.sampled_from(["tone_a", "tone_b", "x"]), json_values),
            "speed": st.one_of(st.floats(allow_nan=True), st.text(max_size=5), json_values),
            "format": st.one_of(st.sampled_from(["mp3", "pcm", "wav", "opus", "ogg"]), json_values),
            "bitrate": st.one_of(st.sampled_from([64, 64.9, "inf", 10**400]), json_values),
            "chunking": st.one_of(st.sampled_from(["frames", "bytes:7", "bytes:-1", "bytes:x"]), json_values),
            "envelope": st.one_of(st.sampled_from(["json", "msgpack", "xml"]), json_values),
        },
    ).map(json.dumps),
    json_values.map(json.dumps),
    st.text(max_size=60),
    st.binary(max_size=60),
    # JSON past the decoder's own limits (nesting depth, integer digits): these dropped the socket
    st.integers(1000, 6000).map(lambda n: "[" * n),
    st.integers(4301, 6000).map(lambda n: '{"type": "cancel", "played_ms": ' + "7" * n + "}"),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=st.lists(messages, min_size=1, max_size=8))
async def test_fuzzed_messages_get_answers_or_proper_closes(start_server, script: list) -> None:
    server = await _server(start_server)
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(server.ws_url) as ws:
            for item in script:
                if ws.closed:
                    break
                if isinstance(item, bytes):
                    await ws.send_bytes(item)
                else:
                    await ws.send_str(item)
            if not ws.closed:
                await ws.send_json({"type": "end"})
            while True:
                msg = await ws.receive(timeout=10)
                if msg.type == aiohttp.WSMsgType.TEXT:
                    body = json.loads(msg.data)
                    assert isinstance(body.get("type"), str)
                    if body["type"] == "error":
                        assert isinstance(body["code"], str) and isinstance(body["message"], str)
                elif msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING):
                    break
            assert ws.close_code in VALID_CLOSE, ws.close_code
        # the gateway is still healthy for the next client
        result = await ws_stream(http, server.ws_url, text="Still serving.")
        assert result.done


_SERVERS: dict[int, object] = {}


async def _server(start_server):
    # one server per test function run: hypothesis calls the body many times in one event loop
    key = id(start_server)
    if key not in _SERVERS:
        _SERVERS.clear()
        _SERVERS[key] = await start_server(fake_settings(ws_messages_per_s=1000, ws_burst=1000))
    return _SERVERS[key]


SENTENCES = st.lists(
    st.lists(st.sampled_from(["one", "two", "three", "four", "five"]), min_size=1, max_size=4).map(
        lambda words: " ".join(words).capitalize() + "."
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sentences=SENTENCES,
    frames=st.integers(0, 4),
    played=st.none() | st.floats(0, 5_000) | st.just(1e8),
    fmt=st.sampled_from(["pcm", "mp3"]),
)
async def test_heard_text_is_a_prefix_of_the_sentences_sent(
    start_server, sentences: list[str], frames: int, played: float | None, fmt: str
) -> None:
    """Issue 22, item 5, on the wire: a reply cancelled after any number of audio frames, at any
    claimed playback position (far past the audio sent included), answers a ``heard_text`` that
    is a prefix of the ``sentence`` texts the client got before ``cancelled``; the socket goes on."""
    server = await _server(start_server)
    async with aiohttp.ClientSession() as http, http.ws_connect(server.ws_url) as ws:
        await ws.send_json({"type": "start", "format": fmt})
        for sentence in sentences:
            await ws.send_json({"type": "text", "text": sentence + " "})
            await ws.send_json({"type": "flush"})
        got, texts = 0, []
        async with asyncio.timeout(10):
            while got < min(frames, len(sentences)):  # each sentence brings at least one
                msg = await ws.receive()
                if msg.type == aiohttp.WSMsgType.BINARY:
                    got += 1
                elif (body := json.loads(msg.data))["type"] == "sentence":
                    texts.append(body["text"])
            await ws.send_json({"type": "cancel", **({} if played is None else {"played_ms": played})})
            while (msg := await ws.receive()).type != aiohttp.WSMsgType.TEXT or json.loads(msg.data)[
                "type"
            ] != "cancelled":
                if msg.type == aiohttp.WSMsgType.TEXT and (body := json.loads(msg.data))["type"] == "sentence":
                    texts.append(body["text"])
        heard = json.loads(msg.data)["heard_text"]
        assert " ".join(texts).startswith(heard), (heard, texts)
        await ws.send_json({"type": "text", "text": "Still here."})
        await ws.send_json({"type": "end"})
        async with asyncio.timeout(10):
            while (msg := await ws.receive()).type == aiohttp.WSMsgType.BINARY or json.loads(msg.data)[
                "type"
            ] != "done":
                assert msg.type in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT), msg
