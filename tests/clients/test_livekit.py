"""LiveKit Agents' OpenAI TTS (``livekit-plugins-openai``), unchanged but for ``base_url``:
its default model (``gpt-4o-mini-tts``, which asks for OpenAI's SSE events) and ``tts-1``
(raw audio, MP3 and PCM). Each decodes the whole reply and hears its first frame while the
reply's last segment is still held back by the fake engine's gate."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from livekit.plugins import openai as lk_openai

from .conftest import Gate, Gateway
from .replies import RATE, expected_samples, reply

MP3_SLACK = 1152 * 2  # the decoder's view of the encoder's delay and padding: about two frames
MARKER = RATE // 100  # LiveKit ends a segment whose last frame came out whole with 10 ms of silence


async def speak(tts: lk_openai.TTS, text: str, gate: Gate) -> tuple[int, set[int]]:
    """Samples the client decoded, and at which rates."""
    samples, rates = 0, set()
    opener = asyncio.create_task(gate.open_if_starved())
    try:
        async with tts.synthesize(text) as stream:
            async for event in stream:
                gate.first_audio()
                samples += event.frame.samples_per_channel
                rates.add(event.frame.sample_rate)
    finally:
        opener.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await opener
        await tts.aclose()
    return samples, rates


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({}, id="default-model-sse"),
        pytest.param({"model": "tts-1"}, id="tts-1-mp3"),
        pytest.param({"model": "tts-1", "response_format": "pcm"}, id="tts-1-pcm"),
    ],
)
async def test_livekit_openai_tts_streams_the_whole_reply(gateway: Gateway, gate: Gate, options: dict) -> None:
    text = reply("livekit " + "-".join(f"{k}={v}" for k, v in options.items()))
    tts = lk_openai.TTS(base_url=gateway.url + "/v1", api_key="unused", **options)
    samples, rates = await speak(tts, text, gate)
    assert gate.shut_at_first_audio is True, "first audio came only after the last segment was synthesized"
    assert rates == {RATE}
    expected = expected_samples(text)
    if options.get("response_format") == "pcm":
        assert expected <= samples <= expected + MARKER, (samples, expected)
    else:
        assert expected <= samples <= expected + MARKER + MP3_SLACK, (samples, expected)
