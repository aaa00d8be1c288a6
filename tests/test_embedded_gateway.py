"""The whole gateway on the real embedded engine: batch and both channels carry real speech."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import aiohttp
import numpy as np
import pytest
import pytest_asyncio

from bench.client import sse_stream, ws_stream
from gateway.audio.decode import decode_mp3
from gateway.audio.mp3 import is_whole_frames
from gateway.web.state import GATEWAY

from .conftest import embedded_gateway

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]
RATE = 24000
REPLY = "Sure, I can help with that. Your order shipped this morning. It should arrive on Thursday."


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def url() -> AsyncIterator[str]:
    async with embedded_gateway() as (base, app):
        # streaming inside a segment is built after readiness; these tests use it
        assert await app[GATEWAY].engine.wait_vocoder()
        yield base


def assert_speech(samples: np.ndarray, words: int) -> None:
    seconds = len(samples) / RATE
    assert 0.15 * words <= seconds <= 0.6 * words, seconds
    n = RATE // 20  # 50 ms windows
    db = 20 * np.log10(np.sqrt(np.mean(samples[: len(samples) // n * n].reshape(-1, n) ** 2, axis=1)) + 1e-9)
    loud = db > db.max() - 20
    assert loud.sum() >= 8 and (db < db.max() - 30).sum() >= 2  # voiced and quiet stretches
    assert np.count_nonzero(np.diff(loud.astype(int)) == 1) >= 3  # energy rises and falls again
    assert -30 < db.max() < 0  # neither silence nor clipping


async def test_batch_speech_is_real_speech_in_whole_frames(url: str) -> None:
    text = "Hello there. The weather will be sunny in the morning, with light rain after lunch."
    async with aiohttp.ClientSession() as http:
        async with http.post(url + "/v1/audio/speech", json={"model": "kokoro", "input": text, "stream": False}) as r:
            assert r.status == 200, await r.text()
            audio = await r.read()
    assert is_whole_frames(audio)
    assert_speech(decode_mp3(audio), len(text.split()))


async def test_ws_token_stream_is_real_speech(url: str) -> None:
    tokens = re.findall(r"\s*\S{1,5}", REPLY)
    async with aiohttp.ClientSession() as http:
        result = await ws_stream(http, url.replace("http", "ws") + "/v1/stream/ws", tokens=tokens, timeout=180)
    assert result.done, result.events[-3:]
    assert [s["text"] for s in result.of("sentence")][-1] == "It should arrive on Thursday."
    assert all(is_whole_frames(p) for p in result.payloads)
    samples = decode_mp3(result.audio)
    # the decoder's output = what the engine made + the encoder's lag (under 2 frames)
    assert 0 <= len(samples) / RATE - result.done["audio_ms"] / 1000 < 0.1
    assert_speech(samples, len(REPLY.split()))
    # per-sentence streaming: the first audio leaves before the last sentence is synthesized
    first_audio = result.payload_times[0]
    last_sentence = max(t for t, kind, _ in result.events if kind == "sentence")
    assert first_audio < last_sentence or result.done["sentences"] == 1


async def test_sse_carries_the_same_speech(url: str) -> None:
    async with aiohttp.ClientSession() as http:
        result = await sse_stream(http, url + "/v1/stream/sse", text=REPLY, timeout=180)
    assert result.done and all(is_whole_frames(p) for p in result.payloads)
    assert_speech(decode_mp3(result.audio), len(REPLY.split()))
    overhead = result.done["wire_bytes"] / result.done["audio_bytes"] - 1
    assert 0.33 < overhead < 0.45


@pytest.mark.parametrize("mode", ["frozen-first", "exact"])
async def test_vocoder_modes_stream_whole_frames_of_the_expected_length(url: str, mode: str) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.get(url + "/readyz") as r:
            vocoder = (await r.json())["vocoder"]
        assert vocoder["mode"] == "frozen-first" and vocoder["state"] == "ready"
        result = await ws_stream(
            http, url.replace("http", "ws") + "/v1/stream/ws", text=REPLY, options={"vocoder": mode}, timeout=180
        )
    assert result.done, result.events[-3:]
    assert result.of("ready")[0]["vocoder"] == mode
    assert all(is_whole_frames(p) for p in result.payloads)
    samples = decode_mp3(result.audio)
    assert 0 <= len(samples) / RATE - result.done["audio_ms"] / 1000 < 0.1
    assert_speech(samples, len(REPLY.split()))


async def test_a_bad_vocoder_mode_is_refused_on_every_channel(url: str) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.post(url + "/v1/audio/speech", json={"input": "Hi.", "vocoder": "fast"}) as r:
            assert r.status == 400
            assert (await r.json())["error"]["code"] == "invalid_option"
        sse = await sse_stream(http, url + "/v1/stream/sse", text="Hi.", vocoder="fast")
        assert sse.error is not None and "vocoder" in sse.error["message"]
        ws = await ws_stream(http, url.replace("http", "ws") + "/v1/stream/ws", text="Hi.", options={"vocoder": "fast"})
        assert ws.error is not None and ws.error["code"] == "invalid_option" and ws.close_code is not None
