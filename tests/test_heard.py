"""What a listener heard of a reply (``heard_text`` of ``cancelled``): issue 22, findings 9 and 10,
through the WebSocket on the fake engine, and ``Transcript`` under generated word times.

The fake engine's times are known from its construction: 180 ms of tone a word, then 60 ms of
silence. The engines below change only which segments make audio, and when.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.heard import Transcript
from gateway.engines.fake import FakeEngine
from gateway.kokoro.timestamps import WordTimes, words_of

from .conftest import fake_settings

WORD_BYTES = round(0.24 * 24000) * 2  # one fake word of s16 PCM, its gap included


class AsciiEngine(FakeEngine):
    """Makes no audio for a segment with letters outside ASCII, as a Kokoro voice makes none
    for a script its G2P cannot read (the pipeline counts such segments as skipped)."""

    async def synthesize(self, text: str, **kw: Any) -> AsyncIterator[bytes | WordTimes]:
        if text.isascii():
            async for item in super().synthesize(text, **kw):
                yield item


class HeldEngine(FakeEngine):
    """Gives each segment's first half (its words, then its audio) and holds the second half
    until the reply is cancelled: a long segment cut into model calls, the second still running."""

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
        words = text.split()
        pcm, times = self.render_timed(" ".join(words[: len(words) // 2]), voice, speed)
        if timestamps:
            yield times
        yield pcm.tobytes()
        await asyncio.Event().wait()


async def send_then_cancel(
    ws: aiohttp.ClientWebSocketResponse, pieces: list[str], audio_bytes: int, played_ms: float | None
) -> dict[str, Any]:
    """Each piece as its own segment (``text`` then ``flush``); once ``audio_bytes`` of audio
    came, ``cancel``: the ``cancelled`` event."""
    await ws.send_json({"type": "start", "format": "pcm"})
    for piece in pieces:
        await ws.send_json({"type": "text", "text": piece})
        await ws.send_json({"type": "flush"})
    got = 0
    async with asyncio.timeout(20):
        while got < audio_bytes:
            msg = await ws.receive()
            assert msg.type in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT), msg
            if msg.type == aiohttp.WSMsgType.BINARY:
                got += len(msg.data)
            else:
                assert msg.json()["type"] != "error", msg.json()
        await ws.send_json({"type": "cancel", **({} if played_ms is None else {"played_ms": played_ms})})
        while True:
            msg = await ws.receive()
            if msg.type == aiohttp.WSMsgType.TEXT and (body := msg.json())["type"] == "cancelled":
                return body


async def test_a_segment_without_audio_does_not_hide_the_ones_after_it(start_server, http) -> None:
    """Issue 22, finding 9: ``heard_text`` stopped at a segment that made no audio and dropped
    every segment after it, although they were played."""
    settings = fake_settings()
    server = await start_server(settings, AsciiEngine(settings))
    async with http.ws_connect(server.ws_url) as ws:
        body = await send_then_cancel(ws, ["One two.", "שלום עולם.", "Four five."], 4 * WORD_BYTES, 60_000)
    assert body["heard_text"] == "One two. Four five."


async def test_heard_text_never_runs_past_the_words_known(start_server, http) -> None:
    """Issue 22, finding 10: when only the first model call's words of a segment were known (the
    second still synthesizing) and all of them were played, ``heard_text`` gave the whole
    segment, text that was never even sent."""
    settings = fake_settings()
    server = await start_server(settings, HeldEngine(settings))
    for played in (60_000, None):
        async with http.ws_connect(server.ws_url) as ws:
            body = await send_then_cancel(ws, ["One two three four."], 2 * WORD_BYTES, played)
        assert body["heard_text"] == "One two", played


# -- Transcript under generated word times ---------------------------------------------------
WORDS = st.lists(st.sampled_from(["one", "two,", "three.", "four", "five!", "six"]), min_size=1, max_size=5)


@st.composite
def replies(draw: st.DrawFn) -> tuple[Transcript, list[str]]:
    """A transcript of up to four segments: some with no audio, some with words known only in
    part (not complete), the last maybe still unfinished; returns it and the texts that had audio."""
    transcript, spoken, at = Transcript(), [], 0.0
    for index in range(draw(st.integers(1, 4))):
        words = draw(WORDS)
        text = " ".join(words)
        transcript.segment(index, text)
        if not draw(st.booleans()) and index:  # made no audio
            transcript.complete(index)
            continue
        transcript.started(index, at)
        spoken.append(text)
        known = draw(st.integers(0, len(words)))  # words whose times came so far
        times = sorted(draw(st.lists(st.floats(0, 2000), min_size=known, max_size=known)))
        transcript.words(
            index, [{"word": w.strip(",.!"), "start_ms": at + t, "end_ms": at + t} for w, t in zip(words, times)]
        )
        at += (times[-1] if times else 0.0) + draw(st.floats(0, 500))
        transcript.sent(at)
        if known < len(words):  # the rest is still to come: nothing after it has started
            break
        transcript.complete(index)
    return transcript, spoken


@settings(max_examples=200, deadline=None)
@given(reply=replies(), played=st.lists(st.one_of(st.none(), st.floats(0, 10_000)), min_size=2, max_size=4))
def test_heard_text_is_a_prefix_of_what_was_spoken_and_grows_with_played_ms(reply, played) -> None:
    """Issue 22, findings 9 and 10 (and its item 5): for any word times and playback positions,
    the heard text is a prefix of the text of the segments that made audio, never reaching
    past the words known in a segment still in progress, and never shrinking as ``played_ms``
    grows."""
    transcript, spoken = reply
    whole = " ".join(spoken)
    known_words = sum(
        len(seg.words) if seg.words and not seg.complete else len(words_of(seg.text))
        for seg in transcript.segments.values()
        if seg.start_ms is not None
    )
    previous = ""
    for ms in sorted(p for p in played if p is not None):
        heard = transcript.heard(ms)
        assert whole.startswith(heard), (heard, whole)
        assert len(words_of(heard)) <= known_words
        assert heard.startswith(previous), (previous, heard)
        previous = heard
    assert whole.startswith(transcript.heard(None))
