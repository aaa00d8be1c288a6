"""Plain HTTP routes against a real gateway on loopback (fake engine)."""

from __future__ import annotations

import aiohttp
import pytest

from gateway.audio.decode import decode_mp3
from gateway.audio.mp3 import is_whole_frames
from gateway.engines.fake import fake_duration_s

from .conftest import Server, fake_settings


async def test_health_ready_voices_metrics(fake_server: Server, http: aiohttp.ClientSession) -> None:
    async with http.get(fake_server.url + "/healthz") as r:
        assert r.status == 200 and (await r.json())["status"] == "ok"
    async with http.get(fake_server.url + "/readyz") as r:
        body = await r.json()
        assert r.status == 200 and body["ready"] is True and body["engine"] == "fake"
        assert body["speed"] == {}  # nothing synthesized yet (no warm-up in the tests)
        assert body["cache"] == {"segments": 0, "bytes": 0, "limit_bytes": 64 << 20, "in_flight": 0}
    async with http.get(fake_server.url + "/v1/voices") as r:
        body = await r.json()
        assert body["default"] == "tone_a"
        assert {v["id"] for v in body["voices"]} == {"tone_a", "tone_b"}
    async with http.get(fake_server.url + "/metrics") as r:
        text = await r.text()
        assert r.status == 200 and "tts_sessions_total" in text


async def test_batch_speech_is_whole_frames_of_expected_length(
    fake_server: Server, http: aiohttp.ClientSession
) -> None:
    text = "Hello there. This is a batch request with two sentences."
    async with http.post(
        fake_server.url + "/v1/audio/speech", json={"model": "kokoro", "input": text, "stream": False}
    ) as r:
        assert r.status == 200
        assert r.headers["Content-Type"] == "audio/mpeg"
        audio = await r.read()
    assert is_whole_frames(audio)
    seconds = len(decode_mp3(audio)) / 24000
    expected = fake_duration_s("Hello there.") + fake_duration_s("This is a batch request with two sentences.")
    assert abs(seconds - expected) < 0.12, (seconds, expected)


@pytest.mark.parametrize(
    "fmt,ctype",
    [("wav", "audio/wav"), ("pcm", "audio/pcm"), ("opus", "audio/ogg"), ("aac", "audio/aac"), ("flac", "audio/flac")],
)
async def test_batch_other_formats(fake_server: Server, http: aiohttp.ClientSession, fmt: str, ctype: str) -> None:
    async with http.post(
        fake_server.url + "/v1/audio/speech", json={"input": "One two three.", "response_format": fmt, "stream": False}
    ) as r:
        assert r.status == 200, await r.text()
        assert r.headers["Content-Type"].startswith(ctype)
        audio = await r.read()
    if fmt == "pcm":
        assert len(audio) == round(fake_duration_s("One two three.") * 24000) * 2
    elif fmt == "wav":
        assert audio[:4] == b"RIFF" and audio[8:12] == b"WAVE"
    elif fmt == "opus":
        assert audio[:4] == b"OggS" and b"OpusHead" in audio[:64]  # Opus in Ogg, as OpenAI sends it
    elif fmt == "aac":
        assert audio[0] == 0xFF and audio[1] & 0xF6 == 0xF0  # an ADTS frame header
    else:
        assert audio[:4] == b"fLaC"


BAD_BATCH = [
    ({"input": ""}, 400, "empty_input"),
    ({"input": "   \n\t "}, 400, "empty_input"),
    ({"input": "x" * 5001}, 413, "too_large"),
    ({"input": "Hi.", "voice": "nobody"}, 400, "unknown_voice"),
    ({"input": "Hi.", "response_format": "webm"}, 400, "unknown_format"),
    # OpenAI's range is 0.25-4.0 (clamped to the engine's 0.5-2.0); outside it is an error
    ({"input": "Hi.", "speed": 0.2}, 400, "invalid_speed"),
    ({"input": "Hi.", "speed": 4.5}, 400, "invalid_speed"),
    ({"input": "Hi.", "model": "whisper-1"}, 400, "unknown_model"),
    ({"input": "Hi.", "instructions": 7}, 400, "invalid_option"),
    ({"input": "Hi.", "stream_format": "events"}, 400, "invalid_option"),
    ({"input": "Hi.", "stream_format": "sse", "stream": False}, 400, "invalid_option"),  # sse streams
    ({"input": "Hi.", "sample_rate": 11025}, 400, "invalid_option"),
    ({"input": "Hi.", "sample_rate": "fast"}, 400, "invalid_option"),
    ({"input": "Hi.", "sample_rate": True}, 400, "invalid_option"),
    ({"input": "Hi.", "sample_rate": 22050, "response_format": "opus"}, 400, "invalid_option"),
    ({"input": "Hi.", "sample_rate": 48000, "bitrate": 8}, 400, "invalid_option"),  # not MPEG-1
    ({"input": "Hi.", "stream": "maybe"}, 400, "invalid_option"),
    ({"input": "Hi.", "speed": "fast"}, 400, "invalid_option"),
    ({"input": 42}, 400, "empty_input"),
    # the fake engine cannot stream inside a sentence: asking it to is an error, not ignored
    ({"input": "Hi.", "vocoder": "frozen-first"}, 400, "invalid_option"),
]


@pytest.mark.parametrize("body,status,code", BAD_BATCH)
async def test_batch_bad_input(
    fake_server: Server, http: aiohttp.ClientSession, body: dict, status: int, code: str
) -> None:
    async with http.post(fake_server.url + "/v1/audio/speech", json=body) as r:
        assert r.status == status
        err = (await r.json())["error"]
        assert err["code"] == code and err["message"]
    async with http.get(fake_server.url + "/healthz") as r:  # the process keeps serving
        assert r.status == 200


async def test_batch_body_not_json(fake_server: Server, http: aiohttp.ClientSession) -> None:
    for data in (b"not json", b"[1, 2]", b"\xff\xfe"):
        async with http.post(fake_server.url + "/v1/audio/speech", data=data) as r:
            assert r.status == 400
            assert (await r.json())["error"]["code"] == "invalid_json"


async def test_unknown_route_and_method_are_json_errors(fake_server: Server, http: aiohttp.ClientSession) -> None:
    async with http.get(fake_server.url + "/v1/nothing") as r:
        assert r.status == 404 and (await r.json())["error"]["code"] == "not_found"
    async with http.get(fake_server.url + "/v1/audio/speech") as r:
        assert r.status == 405


async def test_engine_failure_is_a_json_error_and_next_request_works(start_server, http: aiohttp.ClientSession) -> None:
    server = await start_server(fake_settings(fake_fail_after=0))
    async with http.post(server.url + "/v1/audio/speech", json={"input": "Hello."}) as r:
        assert r.status == 502
        assert (await r.json())["error"]["code"] == "engine_error"
    async with http.get(server.url + "/healthz") as r:
        assert r.status == 200
