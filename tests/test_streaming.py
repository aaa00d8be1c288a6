"""Both browser channels against a real gateway on loopback (fake engine)."""

from __future__ import annotations

import asyncio
import json
import re

import aiohttp
import pytest

from bench.client import sse_stream, ws_stream
from gateway.agent import pick_reply
from gateway.audio.decode import decode_mp3
from gateway.audio.mp3 import is_whole_frames, parse_header
from gateway.config import Settings
from gateway.engines.fake import fake_duration_s
from gateway.text.segmenter import split_text
from gateway.web.state import GATEWAY

from .conftest import Server, fake_settings

REPLY = (
    "Sure, I can help with that. Dr. Smith arrives at 3:30 p.m. on Friday. "
    "The ticket costs $29.99, which is cheaper than last year! Does that work for you?"
)


def tokens_of(text: str) -> list[str]:
    return re.findall(r"\s*\S{1,5}", text)


def expected_seconds(text: str, first_clause_words: int = Settings().first_clause_words) -> float:
    return sum(fake_duration_s(p) for p in split_text(text, first_clause_words=first_clause_words))


async def test_ws_token_by_token_gives_sentences_and_whole_frames(
    fake_server: Server, http: aiohttp.ClientSession
) -> None:
    result = await ws_stream(http, fake_server.ws_url, tokens=tokens_of(REPLY))
    assert [t for _, t, _ in result.events][0] == "ready"
    sentences = [s["text"] for s in result.of("sentence")]
    assert sentences == [
        "Sure, I can help with that.",
        "Dr. Smith arrives at 3:30 p.m. on Friday.",
        "The ticket costs $29.99, which is cheaper than last year!",
        "Does that work for you?",
    ]
    assert all(is_whole_frames(p) for p in result.payloads)
    assert len(result.payloads) > 3
    seconds = len(decode_mp3(result.audio)) / 24000
    assert abs(seconds - expected_seconds(REPLY)) < 0.1
    done = result.done
    assert done and done["sentences"] == len(sentences)
    assert done["audio_bytes"] == len(result.audio)
    assert result.close_code == 1000


async def test_sse_base64_decodes_to_whole_frames(fake_server: Server, http: aiohttp.ClientSession) -> None:
    for method in ("GET", "POST"):
        result = await sse_stream(http, fake_server.url + "/v1/stream/sse", method=method, text=REPLY)
        assert result.of("ready")[0]["format"] == "mp3"
        assert all(is_whole_frames(p) for p in result.payloads)
        assert abs(len(decode_mp3(result.audio)) / 24000 - expected_seconds(REPLY)) < 0.1
        assert result.done and result.done["audio_bytes"] == len(result.audio)


async def test_overhead_near_zero_on_ws_and_a_third_on_sse(fake_server: Server, http: aiohttp.ClientSession) -> None:
    ws = await ws_stream(http, fake_server.ws_url, text=REPLY)
    sse = await sse_stream(http, fake_server.url + "/v1/stream/sse", text=REPLY)
    ws_over = ws.done["wire_bytes"] / ws.done["audio_bytes"] - 1
    sse_over = sse.done["wire_bytes"] / sse.done["audio_bytes"] - 1
    assert ws.done["audio_bytes"] == sse.done["audio_bytes"]  # same audio on both channels
    assert 0 < ws_over < 0.01, ws_over
    assert 0.33 < sse_over < 0.45, sse_over


async def test_naive_byte_chunking_breaks_frame_alignment(fake_server: Server, http: aiohttp.ClientSession) -> None:
    result = await ws_stream(http, fake_server.ws_url, text=REPLY, options={"chunking": "bytes:1000"})
    assert len(result.payloads) > 3
    assert all(len(p) == 1000 for p in result.payloads[:-1])
    misaligned = [p for p in result.payloads if parse_header(p) is None]
    assert misaligned, "naive mode must produce payloads that do not start on a frame sync"
    assert is_whole_frames(result.audio)  # the joined stream is still valid MP3


async def test_pcm_format_streams_raw_samples(fake_server: Server, http: aiohttp.ClientSession) -> None:
    result = await ws_stream(http, fake_server.ws_url, text=REPLY, options={"format": "pcm"})
    assert all(len(p) % 2 == 0 for p in result.payloads)
    assert len(result.audio) / 2 / 24000 == pytest.approx(expected_seconds(REPLY), abs=0.001)


async def test_msgpack_envelope(fake_server: Server, http: aiohttp.ClientSession) -> None:
    result = await ws_stream(http, fake_server.ws_url, text=REPLY, options={"envelope": "msgpack"})
    assert result.of("ready") and result.done
    assert all(is_whole_frames(p) for p in result.payloads)
    overhead = result.done["wire_bytes"] / result.done["audio_bytes"] - 1
    assert 0.001 < overhead < 0.08


async def test_cancel_stops_audio_and_engine_work(start_server, http: aiohttp.ClientSession) -> None:
    server = await start_server(fake_settings(fake_rtf=0.5, fake_chunk_ms=100))
    long_text = " ".join(f"This is sentence number {n} of a long reply." for n in range(20))
    result = await ws_stream(http, server.ws_url, text=long_text, cancel_after_payloads=2)
    kinds = [t for _, t, _ in result.events]
    assert "cancelled" in kinds and "done" not in kinds
    after = kinds[kinds.index("cancelled") + 1 :]
    assert "audio" not in after
    async with asyncio.timeout(10):  # the client has closed: wait for the gateway to end the session
        while server.app[GATEWAY].admission.active:
            await asyncio.sleep(0.01)
    engine = server.engine
    assert engine.active == 0  # no synthesis left running
    assert engine.calls <= 4  # look-ahead only: not the 20 sentences of the reply


async def test_cancel_then_new_reply_on_same_socket(fake_server: Server, http: aiohttp.ClientSession) -> None:
    async with http.ws_connect(fake_server.ws_url) as ws:
        await ws.send_json({"type": "text", "text": "First reply that will be interrupted. More words here."})
        await ws.send_json({"type": "cancel"})
        await ws.send_json({"type": "text", "text": "Second reply."})
        await ws.send_json({"type": "end"})
        kinds = []
        async for msg in ws:
            if msg.type == aiohttp.WSMsgType.TEXT:
                body = json.loads(msg.data)
                kinds.append(body["type"])
                if body["type"] == "sentence":
                    assert body["text"] != "More words here."
        assert kinds[0] == "ready" and "cancelled" in kinds and kinds[-1] == "done"


async def test_prompt_streams_agent_text_and_audio(start_server, http: aiohttp.ClientSession) -> None:
    server = await start_server(fake_settings(agent_first_token_ms=10, agent_tokens_per_s=500))
    result = await ws_stream(http, server.ws_url, prompt="Where is my order?")
    deltas = "".join(t["delta"] for t in result.of("text"))
    assert deltas == pick_reply("Where is my order?")
    assert result.done and result.done["sentences"] >= 3
    sse = await sse_stream(http, server.url + "/v1/stream/sse", prompt="Where is my order?")
    assert "".join(t["delta"] for t in sse.of("text")) == deltas
    assert sse.done["audio_bytes"] == result.done["audio_bytes"]


@pytest.mark.parametrize(
    "message,code",
    [
        ("not json", "invalid_json"),
        ("[1, 2]", "invalid_json"),
        ('{"type": "shout"}', "unknown_type"),
        ('{"type": "text", "text": 5}', "invalid_message"),
        ('{"type": "prompt"}', "invalid_message"),
    ],
)
async def test_ws_recoverable_bad_messages(
    fake_server: Server, http: aiohttp.ClientSession, message: str, code: str
) -> None:
    async with http.ws_connect(fake_server.ws_url) as ws:
        await ws.send_str(message)
        body = await ws.receive_json(timeout=5)
        if body["type"] == "ready":
            body = await ws.receive_json(timeout=5)
        assert body == {"type": "error", "code": code, "message": body["message"]}
        # the session goes on
        await ws.send_json({"type": "text", "text": "Still here."})
        await ws.send_json({"type": "end"})
        kinds = [json.loads(m.data)["type"] async for m in ws if m.type == aiohttp.WSMsgType.TEXT]
        assert kinds[-1] == "done"


async def test_ws_binary_frame_and_text_after_end(fake_server: Server, http: aiohttp.ClientSession) -> None:
    async with http.ws_connect(fake_server.ws_url) as ws:
        await ws.send_bytes(b"\x00\x01")
        assert (await ws.receive_json(timeout=5))["code"] == "binary_not_supported"
        await ws.send_json({"type": "text", "text": "Hello there. And more words to say."})
        await ws.send_json({"type": "end"})
        await ws.send_json({"type": "text", "text": "too late"})
        codes, kinds = [], []
        async for m in ws:
            if m.type == aiohttp.WSMsgType.TEXT:
                body = json.loads(m.data)
                kinds.append(body["type"])
                codes.append(body.get("code"))
        assert "input_ended" in codes and kinds[-1] == "done"


@pytest.mark.parametrize(
    "start,code",
    [
        ({"voice": "nobody"}, "unknown_voice"),
        ({"speed": 9}, "invalid_speed"),
        ({"format": "flac"}, "unknown_format"),
        ({"chunking": "bytes:0"}, "invalid_option"),
        ({"bitrate": 65}, "invalid_option"),
    ],
)
async def test_ws_bad_options_error_then_policy_close(
    fake_server: Server, http: aiohttp.ClientSession, start: dict, code: str
) -> None:
    async with http.ws_connect(fake_server.ws_url) as ws:
        await ws.send_json({"type": "start", **start})
        body = await ws.receive_json(timeout=5)
        assert body["type"] == "error" and body["code"] == code
        msg = await ws.receive(timeout=5)
        assert msg.type == aiohttp.WSMsgType.CLOSE and ws.close_code == 1008


async def test_ws_engine_fault_mid_reply_then_next_session_works(start_server, http: aiohttp.ClientSession) -> None:
    server = await start_server(fake_settings(fake_fail_after=1, fake_chunk_ms=100))
    result = await ws_stream(http, server.ws_url, text="A sentence long enough to need several chunks of audio.")
    assert result.error and result.error["code"] == "engine_error"
    assert result.close_code == 1011
    async with http.get(server.url + "/healthz") as r:
        assert r.status == 200


async def test_sse_bad_options_are_http_errors(fake_server: Server, http: aiohttp.ClientSession) -> None:
    result = await sse_stream(http, fake_server.url + "/v1/stream/sse", text="Hi.", speed="3")
    assert result.error == {"code": "invalid_speed", "message": result.error["message"], "status": 400}
    result = await sse_stream(http, fake_server.url + "/v1/stream/sse", text="  ")
    assert result.error["code"] == "empty_input"
