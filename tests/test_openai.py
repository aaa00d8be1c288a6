"""OpenAI compatibility on the real embedded model: OpenAI's SDK, voice names and formats,
the whole MP3's Info frame (``stream: false``), and streaming (the default); plus
``/v1/voices`` with all 54 voices."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator

import aiohttp
import mutagen.mp3
import numpy as np
import pytest
import pytest_asyncio

from gateway.audio.decode import decode_audio
from gateway.audio.mp3 import count_frames, info_tag, is_whole_frames

from .conftest import embedded_gateway

openai = pytest.importorskip("openai", reason="the test extra installs OpenAI's SDK")

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]
RATE = 24000
TEXT = "Your order shipped this morning."
REPLY = (
    "Thanks for waiting, I have checked your account and everything looks fine now. "
    "Your order shipped this morning from our warehouse in Ohio. "
    "It should arrive on Thursday, and the tracking number is in your inbox. "
    "Is there anything else I can help you with today?"
)
# OpenAI's response_format -> the demuxer that reads it back
DEMUXERS = {"mp3": "mp3", "opus": "ogg", "aac": "aac", "flac": "flac", "wav": "wav"}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def url() -> AsyncIterator[str]:
    async with embedded_gateway() as (base, _):
        yield base


@pytest_asyncio.fixture(loop_scope="module")
async def client(url: str) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) as c:
        yield c


async def test_voices_lists_all_54_with_their_languages(url: str) -> None:
    async with aiohttp.ClientSession() as http, http.get(url + "/v1/voices") as r:
        body = await r.json()
    assert body["default"] == "af_heart" and body["store"]["name"] == "kokoro-js 1.2.1"
    voices = {v["id"]: v for v in body["voices"]}
    assert len(voices) == 54 and voices["af_heart"]["default"] is True
    heart = {"name": "Heart", "language": "en-US", "gender": "female", "grade": "A"}
    assert voices["af_heart"].items() >= heart.items()
    assert {v["language"] for v in voices.values()} == {
        "en-US",
        "en-GB",
        "es",
        "fr-FR",
        "hi",
        "it",
        "ja",
        "pt-BR",
        "zh",
    }
    assert voices["zm_yunxi"]["gender"] == "male" and voices["zm_yunxi"]["grade"] is None
    assert "accent" in voices["jm_kumo"]["description"]


@pytest.mark.parametrize("fmt", ["mp3", "opus", "aac", "flac", "wav", "pcm"])
async def test_openai_sdk_with_openai_voice_names_and_every_format(client: openai.AsyncOpenAI, fmt: str) -> None:
    response = await client.audio.speech.with_raw_response.create(
        model="tts-1", voice="alloy", input=TEXT, response_format=fmt
    )
    assert response.headers["x-voice"] == "af_alloy"
    audio = response.content
    if fmt == "pcm":
        decoded = decode_audio(audio, "pcm")
    else:
        decoded = decode_audio(audio, DEMUXERS[fmt])  # PyAV (ffmpeg) reads each one back
    assert 1.0 < decoded.duration_s < 4.0, decoded.duration_s
    assert np.abs(decoded.samples).max() > 0.05  # speech, not silence
    if fmt == "opus":
        assert audio[:4] == b"OggS" and response.headers["content-type"] == "audio/ogg"


async def test_every_openai_voice_name_and_model_is_accepted(client: openai.AsyncOpenAI) -> None:
    for model, voice in (("tts-1-hd", "coral"), ("gpt-4o-mini-tts", "shimmer"), ("kokoro", "onyx")):
        response = await client.audio.speech.with_raw_response.create(
            model=model, voice=voice, input="Hi.", response_format="pcm", instructions="Speak cheerfully."
        )  # accepted, and ignored
        assert len(response.content) > RATE // 4
    with pytest.raises(openai.BadRequestError) as err:
        await client.audio.speech.create(model="tts-1", voice="af_bella+af_nobody", input="Hi.")
    assert "af_heart" in str(err.value)  # the valid ids are named


async def test_speed_is_clamped_to_what_the_engine_can_do(client: openai.AsyncOpenAI) -> None:
    lengths = {}
    for speed in (1.0, 4.0):
        response = await client.audio.speech.with_raw_response.create(
            model="tts-1", voice="nova", input=TEXT, response_format="pcm", speed=speed
        )
        lengths[speed] = len(response.content)
        assert response.headers["x-speed-applied"] == ("1" if speed == 1.0 else "2")
    assert lengths[4.0] < 0.7 * lengths[1.0]


async def test_batch_mp3_has_an_info_frame_mutagen_reads_to_the_sample(client: openai.AsyncOpenAI) -> None:
    text = "Your order shipped this morning. It should arrive on Thursday."
    # both whole files: a streamed reply is cut for its first audio (first clause, vocoder mode by
    # the live rate), so its length may differ from the whole file's by a segment's silences
    pcm = (
        await client.audio.speech.with_raw_response.create(
            model="tts-1", voice="alloy", input=text, response_format="pcm", extra_body={"stream": False}
        )
    ).content
    mp3 = (
        await client.audio.speech.with_raw_response.create(  # whole: streamed has no Info frame
            model="tts-1", voice="alloy", input=text, response_format="mp3", extra_body={"stream": False}
        )
    ).content
    first_frame = mp3[:192]
    assert info_tag(first_frame) == "Info" and b"LAME3.100" in first_frame
    info = mutagen.mp3.MP3(io.BytesIO(mp3)).info
    seconds = len(pcm) / 2 / RATE
    assert abs(info.length - seconds) <= 576 / RATE, (info.length, seconds)  # within one frame
    assert info.bitrate_mode == mutagen.mp3.BitrateMode.CBR and info.sample_rate == RATE
    assert int.from_bytes(first_frame[21:25], "big") == count_frames(mp3) - 1  # audio frames
    # a gapless decoder drops the encoder delay and padding the frame gives
    assert abs(decode_audio(mp3, "mp3").samples.size - len(pcm) // 2) <= 1


async def test_stream_true_on_the_real_model_sends_the_whole_reply_chunked(url: str) -> None:
    """That the first audio comes before the last sentence is synthesized is an event order,
    proven on the fake engine's gate (test_fake_engine.py, test_openai_stream.py), not a ratio of
    arrival times here (a timed assertion flakes on a shared machine)."""
    async with aiohttp.ClientSession() as http:
        async with http.post(
            url + "/v1/audio/speech",
            json={"model": "tts-1", "voice": "alloy", "input": REPLY, "response_format": "mp3", "stream": True},
        ) as r:
            assert r.status == 200 and r.headers["Transfer-Encoding"] == "chunked"
            audio = await r.read()
    assert is_whole_frames(audio)
    samples = decode_audio(audio, "mp3").samples
    assert len(samples) / RATE > 6.0  # the whole reply came


@pytest.mark.parametrize("fmt", ["opus", "aac", "flac", "wav", "pcm"])
async def test_stream_true_in_every_format_decodes(client: openai.AsyncOpenAI, fmt: str) -> None:
    response = await client.audio.speech.with_raw_response.create(
        model="tts-1",
        voice="fable",
        input="One moment. Let me check that for you.",
        response_format=fmt,
        extra_body={"stream": True},
    )
    decoded = decode_audio(response.content, DEMUXERS.get(fmt, "pcm"))
    assert decoded.duration_s > 1.0 and np.abs(decoded.samples).max() > 0.05
