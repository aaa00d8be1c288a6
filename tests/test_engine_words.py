"""Word timestamps from the engines that need no model: the fake engine's tones, and the
container engine reading the model container's ``words`` events from a stand-in container (a
real aiohttp server on loopback that speaks the container's protocol and sends them).

The real Kokoro engines' word times are in test_embedded_words.py and test_kokoro_engine.py.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from aiohttp import WSMsgType, web

from gateway.config import load_settings
from gateway.engines.container import ContainerEngine
from gateway.engines.fake import GAP_S, WORD_S, FakeEngine, fake_duration_s
from gateway.kokoro.timestamps import WordTimes, words_of
from gateway.web.container import STREAM_PATH

from .conftest import fake_settings, free_port

RATE = 24000


async def collect(engine: Any, text: str, **kw: Any) -> tuple[list[WordTimes], bytes, list[str]]:
    """The WordTimes, the PCM, and the order they came in (``words`` / ``audio``)."""
    times, pcm, order = [], b"", []
    async for item in engine.synthesize(text, **kw):
        if isinstance(item, WordTimes):
            times.append(item)
            order.append("words")
        else:
            pcm += item
            order.append("audio")
    return times, pcm, order


def check_spans(times: WordTimes, samples: int) -> None:
    """Monotonic, inside the audio, none empty."""
    ends = 0
    for w in times.words:
        assert ends <= w.start < w.end <= samples, (w, samples)
        ends = w.end


# -- the fake engine ---------------------------------------------------------------------------
@pytest.mark.parametrize("speed", [0.8, 1.0, 1.3])
async def test_fake_words_are_its_tones_in_order(speed: float) -> None:
    engine = FakeEngine(fake_settings())
    assert engine.capabilities.timestamps
    text = "Sure, the train leaves at nine... tonight!"
    times, pcm, order = await collect(engine, text, voice="tone_a", speed=speed, timestamps=True)
    assert order[0] == "words" and order.count("words") == 1
    word_n, gap_n = round(WORD_S / speed * RATE), round(GAP_S / speed * RATE)
    assert len(pcm) // 2 == len(text.split()) * (word_n + gap_n)
    assert abs(len(pcm) // 2 / RATE - fake_duration_s(text, speed)) < 0.001
    [spans] = times
    assert [w.word for w in spans.words] == words_of(text)
    check_spans(spans, len(pcm) // 2)
    audio = np.abs(np.frombuffer(pcm, "<i2").astype(np.int32))
    step = word_n + gap_n
    for k, w in enumerate(spans.words):
        assert w.start == k * step and w.end - w.start == word_n
        assert audio[w.start : w.end].max() > 3000  # the tone is there
        assert audio[w.end : (k + 1) * step].max() == 0  # and the gap after it is silent


async def test_fake_pause_shows_up_in_the_times() -> None:
    plain = FakeEngine(fake_settings())
    paused = FakeEngine(fake_settings(fake_pause_ms=400))
    text = "one two three. four"
    [a], pcm_a, _ = await collect(plain, text, voice="tone_b", speed=1.0, timestamps=True)
    [b], pcm_b, _ = await collect(paused, text, voice="tone_b", speed=1.0, timestamps=True)
    pause = round(0.4 * RATE)
    assert len(pcm_b) // 2 - len(pcm_a) // 2 == pause == round(fake_duration_s(text, 1.0, 400) * RATE) - len(pcm_a) // 2
    assert (b.words[0].start, b.words[0].end) == (a.words[0].start, a.words[0].end)
    for x, y in zip(a.words[1:], b.words[1:]):
        assert (y.start - x.start, y.end - x.end) == (pause, pause)
    audio = np.frombuffer(pcm_b, "<i2")
    assert not audio[b.words[0].end : b.words[1].start].any()  # the pause is silence


async def test_fake_without_timestamps_yields_bytes_only() -> None:
    items = [x async for x in FakeEngine(fake_settings()).synthesize("a b c", voice="tone_a", speed=1.0)]
    assert items and all(isinstance(x, bytes) for x in items)


# -- the container engine, against a stand-in container -----------------------------------------
class StandIn:
    """A model container's HTTP face: ``/ping``, ``/v1/voices`` (with or without ``timestamps``)
    and the stream socket, which answers each segment with ``ready``, a ``words`` event per
    sentence before its PCM (times in ms from the segment's first sample), then ``done``."""

    def __init__(self, timestamps: bool | None) -> None:
        self.timestamps = timestamps
        self.fake = FakeEngine(fake_settings())
        self.starts: list[dict[str, Any]] = []

    async def ping(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def voices(self, request: web.Request) -> web.Response:
        body: dict[str, Any] = {
            "engine": "standin",
            "default": "tone_a",
            "voices": [{"id": "tone_a", "language": "en-US", "gender": "neutral"}],
        }
        if self.timestamps is not None:
            body["timestamps"] = self.timestamps
        return web.json_response(body)

    async def stream(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        text = ""
        async for msg in ws:
            if msg.type != WSMsgType.TEXT:
                continue
            event = json.loads(msg.data)
            if event["type"] == "start":
                self.starts.append(event)
            elif event["type"] == "text":
                text += event["text"]
            elif event["type"] == "end":
                await ws.send_json({"type": "ready", "sample_rate": RATE})
                at = 0
                for index, sentence in enumerate(s for s in text.split(". ") if s):
                    pcm, words = self.fake.render_timed(sentence, "tone_a", 1.0)
                    wire = words.shifted(at).to_ms(0, RATE)
                    await ws.send_json({"type": "words", "sentence": index, "words": wire})
                    await ws.send_bytes(pcm.tobytes())
                    at += pcm.size
                await ws.send_json({"type": "done"})
                text = ""
        return ws


@contextlib.asynccontextmanager
async def stand_in(timestamps: bool | None) -> AsyncIterator[tuple[StandIn, str]]:
    """The stand-in on a loopback port: (it, its stream URL)."""
    it = StandIn(timestamps)
    app = web.Application()
    app.router.add_get("/ping", it.ping)
    app.router.add_get("/v1/voices", it.voices)
    app.router.add_get(STREAM_PATH, it.stream)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield it, f"ws://127.0.0.1:{port}{STREAM_PATH}"
    finally:
        await runner.cleanup()


async def container_engine(url: str) -> ContainerEngine:
    engine = ContainerEngine(load_settings(env={}, overrides={"engine": "container", "container_url": url}))
    await engine.start()
    return engine


async def test_container_words_events_become_word_times_before_their_audio() -> None:
    text = "Sure thing. The train leaves at nine tonight"
    async with stand_in(True) as (it, url):
        engine = await container_engine(url)
        try:
            assert engine.capabilities.timestamps
            times, pcm, order = await collect(engine, text, voice="tone_a", speed=1.0, timestamps=True)
            assert order == ["words", "audio", "words", "audio"]
            assert "timestamps" not in it.starts[0]  # no protocol flag: the container always sends them
            assert it.starts[0]["first_clause"] is False  # one segment: not to be cut again (issue 22, finding 4)
            first = it.fake.render_timed("Sure thing", "tone_a", 1.0)
            second = it.fake.render_timed("The train leaves at nine tonight", "tone_a", 1.0)
            assert len(pcm) // 2 == first[0].size + second[0].size
            assert [w.word for t in times for w in t.words] == words_of(text)
            # ms on the wire, samples here: within half a ms of the stand-in's own spans
            expected = [*first[1].words, *second[1].shifted(first[0].size).words]
            got = [w for t in times for w in t.words]
            assert all(
                abs(g.start - e.start) <= RATE // 2000 and abs(g.end - e.end) <= RATE // 2000
                for g, e in zip(got, expected, strict=True)
            )
            check_spans(WordTimes(tuple(got)), len(pcm) // 2)
            # not asked: the events are dropped, the audio is the same
            plain, pcm_again, order = await collect(engine, text, voice="tone_a", speed=1.0)
            assert plain == [] and pcm_again == pcm and set(order) == {"audio"}
        finally:
            await engine.aclose()


@pytest.mark.parametrize("declared", [None, False])
async def test_container_without_timestamps_declares_none(declared: bool | None) -> None:
    async with stand_in(declared) as (_, url):
        engine = await container_engine(url)
        try:
            assert engine.capabilities.timestamps is False
        finally:
            await engine.aclose()
