"""Word timestamps on the real embedded engine (Kokoro-82M int8 ONNX), from the duration
predictor: on the whole model (``vocoder=exact``, and every voice not calibrated for streaming)
and the streaming vocoder (``frozen-first``), for American, British and Spanish (espeak, no
word boundaries from the G2P) voices at three speeds, and a text over 510 phonemes.

Checks: the words are the text's, in order; times are monotonic and inside the audio; a word
starts where the audio is loud soon after, not in silence; and the two vocoder paths, whose
trimmed audio starts at different samples, put the first word at the same place relative to
where the speech starts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import numpy as np
import pytest
import pytest_asyncio

from gateway.config import Settings
from gateway.engines.embedded import EmbeddedEngine
from gateway.kokoro.timestamps import WordTimes, words_of

from .conftest import embedded_engine
from .test_embedded import LONG, SENTENCE

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]
RATE = 24000


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engine() -> AsyncIterator[EmbeddedEngine]:
    async with embedded_engine(Settings()) as eng:  # frozen-first; vocoder=exact is the whole model
        assert await eng.wait_vocoder(eng.default_voice), eng.vocoder_status
        yield eng


async def spoken(
    eng: EmbeddedEngine, text: str, voice: str, speed: float, vocoder: str
) -> tuple[list[WordTimes], np.ndarray, list[int]]:
    """The WordTimes, the audio, and for each WordTimes the samples yielded before it."""
    times, chunks, before, samples = [], [], [], 0
    async for item in eng.synthesize(text, voice=voice, speed=speed, vocoder=vocoder, timestamps=True):
        if isinstance(item, WordTimes):
            times.append(item)
            before.append(samples)
        else:
            chunks.append(np.frombuffer(item, "<i2").astype(np.float32) / 32768.0)
            samples += len(chunks[-1])
    assert chunks, "no audio"
    return times, np.concatenate(chunks), before


def check(times: list[WordTimes], audio: np.ndarray, before: list[int], text: str) -> None:
    assert [w.word for t in times for w in t.words] == words_of(text)
    last = 0
    for t, start in zip(times, before):
        assert t.words and t.words[0].start >= start  # each piece's words after the audio before it
        for w in t.words:
            assert last <= w.start < w.end <= len(audio), w
            # speech within 100 ms of where each word starts
            assert np.abs(audio[w.start : w.start + RATE // 10]).max() > 0.02, w
            last = w.end
    words = [w for t in times for w in t.words]
    # the first word starts near the first sound (the trim kept 20-25 ms before it), and the
    # last ends near the last (within the 150 ms of tail kept and the final phoneme's frames)
    onset = int(np.flatnonzero(np.abs(audio) > 0.02)[0])
    assert abs(words[0].start - onset) < 0.1 * RATE, (words[0], onset)
    assert len(audio) - words[-1].end < 0.4 * RATE


@pytest.mark.parametrize(
    "voice, speed, text",
    [
        ("am_michael", 0.8, "Please turn left at the second light and park behind the blue van."),
        ("bf_emma", 1.3, "The schedule says the tomato harvest starts on Tuesday."),
        ("ef_dora", 1.0, "Hola, buenos días. ¿Cómo estás hoy?"),
    ],
)
async def test_words_on_the_whole_model(engine: EmbeddedEngine, voice: str, speed: float, text: str) -> None:
    times, audio, before = await spoken(engine, text, voice, speed, "exact")
    check(times, audio, before, text)
    assert all(t.exact == (voice != "ef_dora") for t in times)  # espeak: aligned by guess_tokens


async def test_the_two_vocoder_paths_agree(engine: EmbeddedEngine) -> None:
    voice = engine.default_voice
    exact, audio_x, before_x = await spoken(engine, SENTENCE, voice, 1.0, "exact")
    streamed, audio_s, before_s = await spoken(engine, SENTENCE, voice, 1.0, "frozen-first")
    check(exact, audio_x, before_x, SENTENCE)
    check(streamed, audio_s, before_s, SENTENCE)
    # the trims differ (RMS of the audio vs the encoder's energy); measured from the first
    # sound of each, every word is within a frame or two in both
    onset_x = int(np.flatnonzero(np.abs(audio_x) > 0.02)[0])
    onset_s = int(np.flatnonzero(np.abs(audio_s) > 0.02)[0])
    for a, b in zip(exact[0].words, streamed[0].words, strict=True):
        assert abs((a.start - onset_x) - (b.start - onset_s)) <= 1200, (a, b)


async def test_over_510_phonemes_one_word_times_per_piece(engine: EmbeddedEngine) -> None:
    times, audio, before = await spoken(engine, LONG, engine.default_voice, 1.3, "exact")
    assert len(times) >= 2 and before[1] > 0
    check(times, audio, before, LONG)
