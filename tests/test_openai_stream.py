"""``POST /v1/audio/speech`` streams as OpenAI's does (chunked audio by default, or OpenAI's
server-sent events), against a real gateway on loopback with the fake engine, driven by
OpenAI's own SDK where a client would use it."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import numpy as np
import pytest

from gateway.audio import g711
from gateway.audio.decode import decode_audio
from gateway.audio.mp3 import info_tag, is_whole_frames, parse_header
from gateway.engines.fake import FakeEngine, fake_duration_s

from .conftest import Server, fake_settings

openai = pytest.importorskip("openai", reason="the test extra installs OpenAI's SDK")

TEXT = "Hello there. This is the second sentence. And here is the last one."
LAST = "And here is the last one."
DEMUXERS = {"mp3": "mp3", "opus": "ogg", "aac": "aac", "flac": "flac", "wav": "wav"}


class HeldLast(FakeEngine):
    """The fake engine, except that a segment holding ``LAST`` waits until ``release`` is set:
    a reply cannot be synthesized to its end before the client has seen audio."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.release = asyncio.Event()
        self.last_done = False

    async def synthesize(self, text: str, **kwargs: Any):  # type: ignore[override]
        if LAST in text:
            await self.release.wait()
        async for chunk in super().synthesize(text, **kwargs):
            yield chunk
        if LAST in text:
            self.last_done = True


@pytest.fixture
async def client(fake_server: Server) -> AsyncIterator[Any]:
    async with openai.AsyncOpenAI(base_url=fake_server.url + "/v1", api_key="unused", max_retries=0) as c:
        yield c


async def _sse(
    http: aiohttp.ClientSession, url: str, body: dict[str, Any]
) -> tuple[aiohttp.ClientResponse, list[dict[str, Any]]]:
    async with http.post(url + "/v1/audio/speech", json={"stream_format": "sse", **body}) as r:
        text = await r.text()
    lines = [line for line in text.split("\n") if line]
    assert all(line.startswith("data: ") for line in lines), lines[:3]  # OpenAI's bare data lines
    return r, [json.loads(line[6:]) for line in lines]


def _audio(events: list[dict[str, Any]]) -> bytes:
    return b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")


async def test_the_sdk_sees_audio_before_the_last_sentence_is_synthesized(start_server) -> None:
    engine = HeldLast(fake_settings())
    server = await start_server(fake_settings(), engine=engine)
    received = b""
    async with openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0) as c:

        async def speak() -> None:
            nonlocal received
            async with c.audio.speech.with_streaming_response.create(
                model="tts-1", voice="tone_a", input=TEXT, response_format="pcm"
            ) as response:
                assert response.headers["transfer-encoding"] == "chunked"
                async for chunk in response.iter_bytes():
                    if not received:
                        assert not engine.last_done  # the reply is still being made
                        engine.release.set()  # only now may its last sentence be synthesized
                    received += chunk

        await asyncio.wait_for(speak(), 30)  # a batch reply would never reach its first byte
    assert engine.last_done
    assert len(received) == sum(
        round(fake_duration_s(s) * 24000) * 2 for s in ("Hello there.", "This is the second sentence.", LAST)
    )


async def test_streamed_by_default_whole_with_stream_false(client: Any) -> None:
    async with client.audio.speech.with_streaming_response.create(
        model="tts-1", voice="tone_a", input=TEXT
    ) as response:
        assert response.headers["content-type"] == "audio/mpeg"
        streamed = b"".join([chunk async for chunk in response.iter_bytes()])
    whole = (
        await client.audio.speech.with_raw_response.create(
            model="tts-1", voice="tone_a", input=TEXT, extra_body={"stream": False}
        )
    ).content
    first = parse_header(whole)
    assert first is not None and info_tag(whole[: first.length]) == "Info"  # duration, gapless trim
    assert parse_header(streamed) is not None and info_tag(streamed[: first.length]) is None
    assert whole[first.length :] == streamed  # the same frames, the Info frame in front


@pytest.mark.parametrize("fmt", ["mp3", "pcm", "wav", "opus", "aac", "flac", "ulaw"])
async def test_sse_deltas_decode_to_the_same_audio_as_the_whole_file(
    fake_server: Server, http: aiohttp.ClientSession, fmt: str
) -> None:
    r, events = await _sse(http, fake_server.url, {"input": TEXT, "response_format": fmt})
    assert r.status == 200 and r.headers["Content-Type"] == "text/event-stream"
    assert [e["type"] for e in events[:-1]] == ["speech.audio.delta"] * (len(events) - 1)
    assert events[-1] == {
        "type": "speech.audio.done",
        "usage": {"input_tokens": len(TEXT), "output_tokens": 0, "total_tokens": len(TEXT)},
    }
    async with http.post(
        fake_server.url + "/v1/audio/speech", json={"input": TEXT, "response_format": fmt, "stream": False}
    ) as w:
        whole = await w.read()
    audio = _audio(events)
    if fmt == "mp3":
        assert all(is_whole_frames(base64.b64decode(e["audio"])) for e in events[:-1])
        assert whole.endswith(audio) and len(whole) - len(audio) == parse_header(whole).length  # type: ignore[union-attr]
    elif fmt == "pcm":
        assert audio == whole
    elif fmt == "ulaw":  # resampled to 8 kHz: soxr's last bit differs with the chunking
        a, b = (np.frombuffer(g711.decode("ulaw", x), "<i2").astype(float) for x in (audio, whole))
        assert len(a) == len(b) and np.sqrt(np.mean((a - b) ** 2)) < 0.01 * np.sqrt(np.mean(b**2))
    else:
        a, b = decode_audio(audio, DEMUXERS[fmt]), decode_audio(whole, DEMUXERS[fmt])
        assert abs(a.duration_s - b.duration_s) < 0.03 and a.duration_s > 2.0, (a.duration_s, b.duration_s)
        assert np.abs(a.samples).max() > 0.1


async def test_sse_error_before_the_first_event_is_the_json_error(
    fake_server: Server, http: aiohttp.ClientSession
) -> None:
    async with http.post(
        fake_server.url + "/v1/audio/speech", json={"input": "Hi.", "voice": "nobody", "stream_format": "sse"}
    ) as r:
        assert r.status == 400 and r.headers["Content-Type"].startswith("application/json")
        assert (await r.json())["error"]["code"] == "unknown_voice"


async def test_an_engine_failure_after_the_first_event_is_an_error_event(
    start_server, http: aiohttp.ClientSession
) -> None:
    server = await start_server(fake_settings(fake_fail_after=3, fake_chunk_ms=40))
    r, events = await _sse(http, server.url, {"input": TEXT, "response_format": "pcm"})
    assert r.status == 200 and events[0]["type"] == "speech.audio.delta"
    assert events[-1] == {"type": "error", "error": {"code": "engine_error", "message": "fake engine failure injected"}}
    async with http.post(server.url + "/v1/audio/speech", json={"input": TEXT}) as r:
        assert r.status == 200  # chunked audio: the status was sent, the transfer is cut short
        with pytest.raises(aiohttp.ClientPayloadError):
            await r.read()
    async with http.get(server.url + "/healthz") as r:
        assert r.status == 200


async def test_an_engine_failure_before_any_audio_keeps_the_json_shape(
    start_server, http: aiohttp.ClientSession
) -> None:
    server = await start_server(fake_settings(fake_fail_after=0))
    for extra in ({}, {"stream_format": "sse"}):
        async with http.post(server.url + "/v1/audio/speech", json={"input": "Hello.", **extra}) as r:
            assert r.status == 502 and (await r.json())["error"]["code"] == "engine_error"
