"""Memory bounded by length: a long piece's vocoder runs in windows of at most
``Policy.max_window`` frames, close to the whole call's audio (the same when it fits in one),
and the engine hands a long call's activations back when that call is done. (How much memory
that saves, and what it costs, is a benchmark's figure: ``bench engine --parts memory``.)"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from bench.measure import distance, worst_join_ratio
from bench.memory import reset_peak, rss_mb
from gateway.kokoro.onnx_model import load_model_bytes, with_durations
from gateway.kokoro.onnx_sessions import SharedWeights, make_session, release_freed_memory
from gateway.kokoro.parts import load_vocab, load_voice_packs
from gateway.kokoro.vocoder.chunked import ChunkRunner, Policy, encode_segment, exact_windows
from gateway.kokoro.vocoder.split import split
from gateway.kokoro.vocoder.streaming import StreamingVocoder
from gateway.metrics import rss_bytes

pytestmark = pytest.mark.slow
# "The weather will be sunny in the morning, with light rain after lunch. Please turn left at
# the second light and park behind the blue van." (misaki)
LONG = (
    "ðə wˈɛðəɹ wɪl bi sˈʌni ɪn ðə mˈɔɹnɪŋ, wɪð lˈIt ɹˈAn ˈæftəɹ lˈʌnʧ. "
    "plˈiz tˈɜɹn lˈɛft æt ðə sˈɛkənd lˈIt ænd pˈɑɹk bəhˈInd ðə blˈu vˈæn."
)
WINDOW = 120  # frames (3 s): the test's piece needs three windows


@pytest.fixture(scope="module")
def sessions() -> Iterator[dict[str, Any]]:
    import onnx

    blob = load_model_bytes()
    whole = with_durations(onnx.load_from_string(blob))
    weights = SharedWeights(whole)
    parts = split(onnx.load_from_string(blob))
    yield {
        "whole": make_session(whole, 2, weights),
        "encoder": make_session(parts.encoder, 2, weights),
        "exact": make_session(parts.probe, 2, weights),
        "frozen": make_session(parts.frozen, 2, weights),
        "statistics": parts.statistics,
    }


def vocoder(s: dict[str, Any], max_window: int) -> StreamingVocoder:
    """Exact rendering needs no calibrated voice: no statistics."""
    return StreamingVocoder(s["encoder"], s["exact"], s["frozen"], {}, s["statistics"], Policy(max_window=max_window))


def test_a_long_piece_renders_in_bounded_windows_close_to_the_whole_call(sessions: dict[str, Any]) -> None:
    vocab = load_vocab()
    tokens = [vocab[c] for c in LONG if c in vocab]
    packs = load_voice_packs()  # a real voice: a random style's audio is far from speech
    style = packs.packs[packs.default].reshape(-1, 256)[len(tokens) - 1].reshape(1, 256)
    feeds = {"tokens": np.array([[0, *tokens, 0]], np.int64), "style": style, "speed": np.array([1.0], np.float32)}
    whole, durations = sessions["whole"].run(None, feeds)
    whole = whole.reshape(-1)
    assert Policy(max_window=WINDOW).bounds(len(tokens), 1.0)  # the engine would render it so

    # the windows the vocoder runs: each within the bound, the audio contiguous
    enc = encode_segment(sessions["encoder"], tokens, style, 1.0)
    assert enc.frames > 2 * WINDOW
    runner = ChunkRunner(sessions["frozen"], sessions["exact"], enc, style, {}, Policy(max_window=WINDOW))
    windows = list(exact_windows(runner, 0, enc.frames))
    assert len(windows) >= 3 and all(frames <= WINDOW for _, frames in windows)
    cuts = np.cumsum([len(a) for a, _ in windows])[:-1].tolist()

    audio, frames_per_token = vocoder(sessions, WINDOW).render(tokens, style, 1.0)
    assert np.array_equal(audio, np.concatenate([a for a, _ in windows]))
    # the same durations and length as the whole call, and the same sound within the model's chaos
    assert np.array_equal(frames_per_token, np.asarray(durations).ravel()) and len(audio) == len(whole)
    d = distance(whole, audio)
    assert d.timbre_db < 1.0 and abs(d.loudness_db) < 0.5, d
    assert worst_join_ratio(audio, cuts) < 1.5  # no click where windows meet
    # a piece that fits in one window is the whole call, sample for sample
    unbounded, _ = vocoder(sessions, 0).render(tokens, style, 1.0)
    assert np.array_equal(unbounded, whole)


@pytest.mark.asyncio
async def test_the_engine_hands_a_long_calls_memory_back_when_it_is_done() -> None:
    from gateway.config import Settings
    from gateway.engines.embedded import RELEASE_GROWTH

    from .conftest import embedded_engine

    text = "The weather will be sunny in the morning, with light rain after lunch and a cool evening."
    async with embedded_engine(Settings(embedded_vocoder="off")) as engine:
        engine.idle_release_s = 3600.0  # only the hand-back after growth can act

        async def speak() -> bytes:
            releases = engine.work["memory_releases_after_growth"]
            pcm = b"".join([c async for c in engine.synthesize(text, voice=engine.default_voice, speed=1.0)])
            async with asyncio.timeout(60):  # the hand-back after growth is done
                while engine.work["memory_releases_after_growth"] == releases:
                    await asyncio.sleep(0.05)
            return pcm

        first = await speak()  # the first long call also sizes what lasts (buffers, caches)
        assert len(first) > 2 * 24000 * 4  # over 4 s of audio: well over RELEASE_GROWTH of activations
        gc.collect()  # what the test itself left: the engine's RSS alone from here
        release_freed_memory()
        settled = rss_bytes()
        reset_peak()
        again = await speak()
        peak, after = rss_mb(key="VmHWM") * 2**20, rss_bytes()
        assert again == first and engine.work["memory_releases"] == 0
        assert peak - settled > RELEASE_GROWTH  # the call's activations, held by the arena ...
        assert after - settled < RELEASE_GROWTH // 2  # ... handed back once it is done
