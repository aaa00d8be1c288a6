"""Word timestamps on both channels and a barge-in that knows what was heard (issue 16).

The fake engine's times are known from its construction: every word is 180 ms of tone then
60 ms of silence (``fake_pause_ms`` adds silence after a segment's first word), so each
expected time below is written out, not taken from the gateway.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from bench.client import sse_stream, ws_stream
from gateway.engines.fake import FakeEngine
from gateway.kokoro.timestamps import WordTimes, words_of

from .conftest import Server, fake_settings

TEXT = "One two three. Four five six."
# (word, start_ms, end_ms) on the reply's PCM timeline: 240 ms a word, segment 2 after 720 ms
TIMES = [
    ("One", 0, 180),
    ("two", 240, 420),
    ("three", 480, 660),
    ("Four", 720, 900),
    ("five", 960, 1140),
    ("six", 1200, 1380),
]
MP3_LEAD_MS = 1105 / 24  # LAME's and the decoder's delay: heard before the first sample


def flat(result: Any) -> list[tuple[str, int, int]]:
    return [(w["word"], w["start_ms"], w["end_ms"]) for e in result.of("words") for w in e["words"]]


def words_before_audio(result: Any) -> None:
    """Each sentence's `words` event comes before its first audio payload."""
    seen: set[int] = set()
    for _, kind, body in result.events:
        if kind == "words":
            seen.add(body["sentence"])
        elif kind == "audio" and "sentence" in body:
            assert body["sentence"] in seen, f"audio of sentence {body['sentence']} before its words"


@pytest.mark.parametrize("channel", ["ws", "sse"])
async def test_words_cover_the_text_in_order_with_the_engines_times(
    fake_server: Server, http: aiohttp.ClientSession, channel: str
) -> None:
    options = {"format": "pcm", "envelope": "msgpack"} if channel == "ws" else {"format": "pcm"}
    if channel == "ws":
        r = await ws_stream(http, fake_server.ws_url, text=TEXT, options=options)
    else:
        r = await sse_stream(http, fake_server.url + "/v1/stream/sse", text=TEXT, **options)
    assert r.done is not None
    assert flat(r) == TIMES
    assert [e["sentence"] for e in r.of("words")] == [0, 1]
    words_before_audio(r)
    assert TIMES[-1][2] <= r.done["audio_ms"]  # inside the audio


async def test_mp3_times_include_the_encoders_lead_in(fake_server: Server, http: aiohttp.ClientSession) -> None:
    r = await ws_stream(http, fake_server.ws_url, text=TEXT, options={"format": "mp3", "envelope": "msgpack"})
    assert [(w, s, e) for w, s, e in flat(r)] == [
        (w, round(s + MP3_LEAD_MS), round(e + MP3_LEAD_MS)) for w, s, e in TIMES
    ]


async def test_a_known_silence_shows_up_in_the_times(start_server, http: aiohttp.ClientSession) -> None:
    settings = dataclasses.replace(fake_settings(), fake_pause_ms=300.0)
    server = await start_server(settings)
    r = await ws_stream(http, server.ws_url, text=TEXT, options={"format": "pcm"})
    got = flat(r)
    # the pause follows each segment's first word: "two" and "three" move by 300 ms, the second
    # segment by 300 ms more (its own pause comes after "Four")
    assert got == [
        ("One", 0, 180),
        ("two", 540, 720),
        ("three", 780, 960),
        ("Four", 1020, 1200),
        ("five", 1560, 1740),
        ("six", 1800, 1980),
    ]


async def one_reply_then_cancel(ws: aiohttp.ClientWebSocketResponse, played_ms: float | None) -> dict[str, Any]:
    """Send TEXT (no `end`: the reply stays open), take all its audio, then barge in."""
    await ws.send_json({"type": "text", "text": TEXT})
    await ws.send_json({"type": "flush"})
    audio, expected = 0, round(1.44 * 24000) * 2  # 6 words x 240 ms of PCM
    async with asyncio.timeout(20):
        while audio < expected:
            msg = await ws.receive()
            if msg.type == aiohttp.WSMsgType.BINARY:
                audio += len(msg.data)
            elif msg.type != aiohttp.WSMsgType.TEXT:
                raise AssertionError(f"socket ended: {msg}")
        await ws.send_json({"type": "cancel", **({} if played_ms is None else {"played_ms": played_ms})})
        while True:
            msg = await ws.receive()
            if msg.type == aiohttp.WSMsgType.TEXT and (body := msg.json())["type"] == "cancelled":
                return body


@pytest.mark.parametrize(
    "played_ms,heard",
    [
        (0, ""),  # before any word started
        (100, "One"),  # inside the first word
        (450, "One two"),  # in the gap after "two": "three" starts at 480
        (500, "One two three."),  # inside "three": the word with its own punctuation
        (800, "One two three. Four"),  # into the second segment
        (60_000, TEXT),  # after the end: everything
        (None, TEXT),  # no position: what was sent (all of it here)
    ],
)
async def test_cancel_with_played_ms_answers_what_was_heard(
    fake_server: Server, http: aiohttp.ClientSession, played_ms: float | None, heard: str
) -> None:
    async with http.ws_connect(fake_server.ws_url) as ws:
        await ws.send_json({"type": "start", "format": "pcm"})
        body = await one_reply_then_cancel(ws, played_ms)
        assert (body["played_ms"], body["heard_text"]) == (played_ms, heard)
        # the socket goes on: the next reply starts afresh and is heard from its own start
        again = await one_reply_then_cancel(ws, 100)
        assert again["heard_text"] == "One"


@pytest.mark.parametrize("played", ["soon", -5, True])
async def test_a_bad_played_ms_is_a_clear_error(
    fake_server: Server, http: aiohttp.ClientSession, played: object
) -> None:
    async with http.ws_connect(fake_server.ws_url) as ws:
        await ws.send_json({"type": "start", "format": "pcm"})
        await ws.send_json({"type": "cancel", "played_ms": played})
        async with asyncio.timeout(10):
            while (msg := await ws.receive()).type == aiohttp.WSMsgType.TEXT and msg.json()["type"] == "ready":
                pass
        assert msg.type == aiohttp.WSMsgType.TEXT and msg.json()["type"] == "error", msg
        assert msg.json()["code"] == "invalid_message"


async def test_words_come_through_the_model_container_with_the_same_times(http: aiohttp.ClientSession) -> None:
    """A GPU deployment gives the same events: gateway (container engine) -> the model
    container's own app (here on the fake engine) -> words on the gateway's channels."""
    from bench.servers import serve_app, serve_gateway
    from gateway.engines.fake import FakeEngine
    from gateway.web.container import STREAM_PATH, make_container_app

    settings = fake_settings()
    async with serve_app(make_container_app(settings, FakeEngine(settings))) as container:
        ws_url = container.replace("http://", "ws://") + STREAM_PATH
        # the gateway stops first: it holds sockets to the container, whose clean-up would wait
        async with serve_gateway(fake_settings(engine="container", container_url=ws_url)) as (url, _):
            async with http.get(url + "/v1/voices") as r:
                assert (await r.json())["timestamps"] is True
            for fmt, lead in (("pcm", 0.0), ("mp3", MP3_LEAD_MS)):
                r = await ws_stream(
                    http,
                    url.replace("http://", "ws://") + "/v1/stream/ws",
                    text=TEXT,
                    options={"format": fmt, "envelope": "msgpack"},
                )
                assert r.done is not None, r.events
                assert flat(r) == [(w, round(s + lead), round(e + lead)) for w, s, e in TIMES]
                words_before_audio(r)


def spoken(text: str, lead_ms: float = 0.0) -> list[tuple[str, int, int]]:
    """The fake engine's times for ``text`` as one stretch of audio: 240 ms a word."""
    return [(w, round(k * 240 + lead_ms), round(k * 240 + 180 + lead_ms)) for k, w in enumerate(words_of(text))]


async def test_container_path_times_each_word_once(http: aiohttp.ClientSession) -> None:
    """Issue 22, finding 4: a segment with a clause mark ("One two three, four five six.", the
    reply's second sentence, so the gateway sends it whole) came back from the model container
    cut in two, with two ``words`` events, and the pipeline added the first part's audio to the
    second part's times again: "four" landed past the end of the audio."""
    from bench.servers import serve_app, serve_gateway
    from gateway.web.container import STREAM_PATH, make_container_app

    text = "Yes. One two three, four five six."
    settings = fake_settings()
    async with serve_app(make_container_app(settings, FakeEngine(settings))) as container:
        ws_url = container.replace("http://", "ws://") + STREAM_PATH
        async with serve_gateway(fake_settings(engine="container", container_url=ws_url)) as (url, _):
            for fmt, lead in (("pcm", 0.0), ("mp3", MP3_LEAD_MS)):
                r = await ws_stream(
                    http,
                    url.replace("http://", "ws://") + "/v1/stream/ws",
                    text=text,
                    options={"format": fmt, "envelope": "msgpack"},
                )
                assert r.done is not None, r.events
                assert [e["text"] for e in r.of("sentence")] == ["Yes.", "One two three, four five six."]
                assert [e["sentence"] for e in r.of("words")] == [0, 1]  # the container did not re-cut
                assert flat(r) == spoken(text, lead)
                assert flat(r)[-1][2] <= r.done["audio_ms"] + lead


class TwoPieceEngine(FakeEngine):
    """The fake engine, but each segment comes as two model calls (as the embedded engine's do
    past 510 phonemes): two ``WordTimes``, each on the segment's timeline, before its own audio."""

    async def synthesize(
        self,
        text: str,
        *,
        voice: str,
        speed: float,
        vocoder: str | None = None,
        buffered_s: float = 0.0,
        waiting: bool = False,
        timestamps: bool = False,
    ) -> AsyncIterator[bytes | WordTimes]:
        words, at = text.split(), 0
        for part in (words[: len(words) // 2], words[len(words) // 2 :]):
            pcm, times = self.render_timed(" ".join(part), voice, speed)
            if timestamps and pcm.size:
                yield times.shifted(at)
            yield pcm.tobytes()
            at += pcm.size


async def test_two_word_times_in_one_segment_live_and_from_the_cache(start_server, http: aiohttp.ClientSession) -> None:
    """Issue 22, finding 4: an engine that gives one segment's words in two pieces (the embedded
    engine past 510 phonemes) had the second piece's times offset twice; from the synthesis
    cache (all pieces' words before the audio) they were right. Both must agree."""
    settings = fake_settings()
    server = await start_server(settings, TwoPieceEngine(settings))
    text = "One two three four five six."
    for attempt in ("live", "cache"):
        r = await ws_stream(http, server.ws_url, text=text, options={"format": "pcm", "envelope": "msgpack"})
        assert r.done is not None, (attempt, r.events)
        assert [e["sentence"] for e in r.of("words")] == [0, 0]
        assert flat(r) == spoken(text), attempt
    async with http.get(server.url + "/metrics") as resp:
        assert 'tts_synthesis_cache_total{outcome="hit"} 1.0' in await resp.text()  # the second came from it
