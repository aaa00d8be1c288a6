"""Errors that quote a client's value quote a short prefix of it, never the whole value: a
100 kB voice name is not echoed back 100 kB long (nor into the logs that record errors)."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from gateway.core.options import check_vocoder
from gateway.engines.base import Capabilities
from gateway.errors import BadRequest, quoted
from tests.conftest import Server

BIG = "x" * 100_000
LIMIT = 400  # a message's own words plus one quoted prefix


def test_quoted_cuts_long_values_and_marks_the_cut() -> None:
    assert quoted("af_heart") == "'af_heart'"
    cut = quoted(BIG)
    assert cut.startswith("'xxx") and cut.endswith("…") and len(cut) == 81
    with pytest.raises(BadRequest) as caught:  # the fake engine has no modes to name one of
        check_vocoder(Capabilities(vocoder_modes=("exact", "frozen")), "embedded", BIG)
    assert len(caught.value.message) < LIMIT and "xxx" in caught.value.message


@pytest.mark.parametrize(
    "option", ["voice", "format", "envelope", "chunking", "cache", "sample_rate", "speed", "bitrate"]
)
async def test_stream_options_quote_a_prefix(fake_server: Server, http: aiohttp.ClientSession, option: str) -> None:
    body: dict[str, Any] = {"text": "Hello there.", option: BIG}
    async with http.post(fake_server.url + "/v1/stream/sse", json=body) as resp:
        assert resp.status == 400
        error = (await resp.json())["error"]
    assert len(error["message"]) < LIMIT and "xxx" in error["message"], error


@pytest.mark.parametrize("field", ["voice", "model", "response_format", "speed", "stream_format"])
async def test_openai_speech_quotes_a_prefix(fake_server: Server, http: aiohttp.ClientSession, field: str) -> None:
    body: dict[str, Any] = {"model": "tts-1", "input": "Hello there.", "voice": "alloy", field: BIG}
    async with http.post(fake_server.url + "/v1/audio/speech", json=body) as resp:
        assert resp.status == 400
        error = (await resp.json())["error"]
    assert len(error["message"]) < LIMIT and "xxx" in error["message"], error


async def test_a_blend_and_a_message_type_quote_a_prefix(fake_server: Server, http: aiohttp.ClientSession) -> None:
    for voice in ("tone_a+" + BIG, BIG + "+tone_a", "tone_a+tone_b(" + "9" * 50_000 + ")"):
        async with http.post(fake_server.url + "/v1/stream/sse", json={"text": "Hi.", "voice": voice}) as resp:
            message = (await resp.json())["error"]["message"]
        assert resp.status == 400 and len(message) < LIMIT, message
    async with http.ws_connect(fake_server.ws_url) as ws:
        await ws.send_json({"type": "y" * 60_000})
        event = await ws.receive_json()
    assert event["type"] == "error" and len(event["message"]) < LIMIT and "yyy" in event["message"], event


async def test_a_refused_origin_is_quoted_short(fake_server: Server, http: aiohttp.ClientSession) -> None:
    origin = "http://" + "o" * 7000 + ".example"
    async with http.get(fake_server.url + "/v1/stream/sse", params={"text": "Hi."}, headers={"Origin": origin}) as resp:
        assert resp.status == 403
        message = (await resp.json())["error"]["message"]
    assert len(message) < LIMIT and "ooo" in message, message
