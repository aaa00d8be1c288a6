"""Streaming inside a segment on the embedded engine: the vocoder in chunks, wired in.

The engine builds the streaming vocoder in the background after start-up; these tests wait
for it, then compare the modes on the real model: chunks come early and join smoothly, the
voice stays the exact model's within the measured shift, a listener who already holds audio
gets one exact call, and closing a stream mid-segment stops its chunks.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import pytest_asyncio

from bench.measure import distance, worst_join_ratio
from gateway.config import Settings
from gateway.core.options import parse_options
from gateway.engines.embedded import EmbeddedEngine
from gateway.errors import BadRequest

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]
RATE = 24000
SENTENCE = "The weather will be sunny in the morning, with light rain after lunch."


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engine(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[EmbeddedEngine]:
    # an empty statistics cache: the default voice is calibrated here, as on a new machine,
    # and another voice's first use takes the whole-model path while it is calibrated
    cache: Path = tmp_path_factory.mktemp("vocoder-cache")
    eng = EmbeddedEngine(Settings(embedded_vocoder_cache=str(cache)))  # the default: frozen-first
    await eng.start()
    assert eng.vocoder_status["state"] in ("building", "ready")  # readiness does not wait for it
    assert await eng.wait_vocoder(), eng.vocoder_status
    yield eng
    await eng.aclose()


async def chunks_of(eng: EmbeddedEngine, text: str = SENTENCE, **kw: object) -> list[np.ndarray]:
    voice = str(kw.pop("voice", eng.default_voice))
    return [
        np.frombuffer(c, "<i2").astype(np.float32) / 32768.0
        async for c in eng.synthesize(text, voice=voice, speed=1.0, **kw)
    ]  # type: ignore[arg-type]


async def test_a_waiting_listener_gets_the_segment_in_growing_chunks(engine: EmbeddedEngine) -> None:
    status = engine.vocoder_status
    assert status["state"] == "ready" and engine.default_voice in status["voices"]
    assert status["build_s"] is not None and status["build_s"] > 0
    exact = await chunks_of(engine, vocoder="exact")
    streamed = await chunks_of(engine)  # the default mode, nothing buffered: the listener waits
    # growing chunks, or (an engine slower than real time: Policy.batch_rest) the first chunk
    # and then the rest in one call
    assert len(exact) == 1 and len(streamed) >= 2
    sizes = [len(c) / RATE for c in streamed]
    assert sizes[0] <= 0.45 < sum(sizes), sizes  # the first chunk is a small part of the sentence
    whole, joined = exact[0], np.concatenate(streamed)
    # the same sentence: the two paths trim silence a frame apart at most
    assert abs(len(joined) - len(whole)) / RATE < 0.06
    d = distance(whole, joined)
    # frozen-first measured 0.6-0.8 dB timbre on jm_kumo; on af_heart (the default since the
    # native voices) 0.97-1.23 dB over bench quality's sentences and 1.57 dB on this one once,
    # under load (the chunking follows the measured speed); a broken join gives 4 dB or more
    assert d.timbre_db < 2.0 and abs(d.loudness_db) < 1.5, d.row()
    cuts = np.cumsum([len(c) for c in streamed])[:-1].tolist()
    assert worst_join_ratio(joined, cuts) < 1.0  # no step at a join larger than the signal's own


async def test_frozen_mode_streams_every_chunk_and_joins_without_clicks(engine: EmbeddedEngine) -> None:
    frozen = await chunks_of(engine, vocoder="frozen")
    assert len(frozen) >= 2  # two where the engine is slower than real time (Policy.batch_rest)
    joined = np.concatenate(frozen)
    cuts = np.cumsum([len(c) for c in frozen])[:-1].tolist()
    assert worst_join_ratio(joined, cuts) < 1.0
    assert 0.15 * len(SENTENCE.split()) < len(joined) / RATE < 0.6 * len(SENTENCE.split())


async def test_a_listener_with_audio_in_hand_gets_one_exact_call(engine: EmbeddedEngine) -> None:
    # a minute still to play: the exact vocoder has time for the whole segment (ten seconds
    # were not enough on a 2-core machine under load 10, where the segment's exact call is
    # predicted at 7-9 s and must fit 1.5 times over)
    calm = await chunks_of(engine, buffered_s=60.0)
    waiting = await chunks_of(engine, buffered_s=0.0)
    assert len(calm) == 1 and len(waiting) >= 2
    assert abs(len(calm[0]) - sum(len(c) for c in waiting)) / RATE < 0.06


async def test_the_vocoder_paces_for_what_a_playing_listener_holds_after_the_encoder(
    engine: EmbeddedEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the listener's buffer came with the call; a playing player's drains through the G2P and
    # the encoder's pass (here the G2P takes 0.4 s more): the chunks are sized to what is left
    # (sized to the whole, Play both's first chunk after "Hello!" came 0.73 s later, with 0.64 s
    # held). A player waiting for its preroll has all of it still.
    model, vocoder = engine._model, engine.host.vocoder
    assert model is not None and vocoder is not None
    g2p, stream = model.phonemes_words, vocoder.stream_encoded
    told: list[float] = []

    def slow_g2p(*a: Any, **kw: Any) -> Any:
        time.sleep(0.4)
        return g2p(*a, **kw)

    def recorded(*a: Any, **kw: Any) -> Any:
        told.append(kw["buffered_s"])
        return stream(*a, **kw)

    monkeypatch.setattr(model, "phonemes_words", slow_g2p)
    monkeypatch.setattr(vocoder, "stream_encoded", recorded)
    playing = await chunks_of(engine, buffered_s=2.0)
    waiting = await chunks_of(engine, buffered_s=2.0, waiting=True)
    assert told[0] <= 1.6 and told[1] == 2.0, told
    assert playing and waiting


async def test_a_short_segment_goes_exact_in_one_call(engine: EmbeddedEngine) -> None:
    # under embedded_vocoder_exact_below_s (2 s) of audio the frozen voice drifts most, and
    # the whole segment is quick anyway: one exact call, whatever streaming mode was asked
    for mode in ("frozen-first", "frozen"):
        short = await chunks_of(engine, "Sure!", vocoder=mode)
        assert len(short) == 1 and 0.2 < len(short[0]) / RATE < 2.0


async def test_closing_mid_segment_starts_no_more_chunks(engine: EmbeddedEngine) -> None:
    before = engine.work["calls"]
    agen = engine.synthesize(SENTENCE, voice=engine.default_voice, speed=1.0, vocoder="frozen")
    first = await anext(agen)
    assert 0 < len(first) / 2 / RATE <= 0.45
    await agen.aclose()
    closed = engine.work["calls"]
    # a short reply through the same one-worker inference pool: whatever the closed stream had
    # left queued runs before it; then the same reply again, alone, for its own count of calls
    await chunks_of(engine, "Sure!", vocoder="frozen")
    drained = engine.work["calls"]
    await chunks_of(engine, "Sure!", vocoder="frozen")
    assert closed - before == 1
    assert drained - closed == engine.work["calls"] - drained  # nothing of the closed stream ran


async def test_bad_mode_is_a_bad_request(engine: EmbeddedEngine) -> None:
    with pytest.raises(BadRequest) as err:  # checked against the engine's declared modes
        parse_options({"vocoder": "fast"}, Settings(), engine)
    assert err.value.code == "invalid_option" and "frozen-first" in err.value.message


async def test_another_voice_streams_once_calibrated(engine: EmbeddedEngine) -> None:
    voice = "jf_nezumi"
    assert voice not in engine.vocoder_status["voices"]  # the cache starts empty
    # first use: the whole model now, calibration in the background
    assert len(await chunks_of(engine, voice=voice)) == 1
    assert await engine.wait_vocoder(voice)
    assert voice in engine.vocoder_status["voices"]
    assert len(await chunks_of(engine, voice=voice)) >= 2  # streams (two: Policy.batch_rest)
