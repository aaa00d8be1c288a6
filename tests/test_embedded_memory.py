"""The embedded engine's memory work changes no sample: shared weights, one shared arena, the
serialized model dropped, memory handed back when idle; and the parts loaded on first use load
then and work. (How much memory it saves is a benchmark's figure: ``bench engine``.)"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from gateway.kokoro.g2p import Phonemizer
from gateway.kokoro.onnx_model import load_model_bytes, with_durations
from gateway.kokoro.onnx_sessions import SharedWeights, make_session, release_freed_memory
from gateway.kokoro.parts import load_vocab
from gateway.kokoro.vocoder.names import CROP, ENERGY, F0, FEATURES
from gateway.kokoro.vocoder.split import split

pytestmark = pytest.mark.slow
# "The weather will be sunny in the morning, with light rain after lunch." (misaki)
WEATHER = "ðə wˈɛðəɹ wɪl bi sˈʌni ɪn ðə mˈɔɹnɪŋ, wɪð lˈIt ɹˈAn ˈæftəɹ lˈʌnʧ."


def plain(model: Any) -> Any:
    """A session as onnxruntime makes it by default: its own weights, its own arena."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    return ort.InferenceSession(model.SerializeToString(), sess_options=opts, providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def feeds() -> dict[str, np.ndarray]:
    vocab = load_vocab()
    ids = [vocab[c] for c in WEATHER if c in vocab]
    style = np.random.default_rng(0).normal(0, 0.1, (1, 256)).astype(np.float32)
    return {"tokens": np.array([[0, *ids, 0]], np.int64), "style": style, "speed": np.array([1.0], np.float32)}


def test_shared_sessions_give_the_same_samples_as_plain_ones(feeds: dict[str, np.ndarray]) -> None:
    import onnx

    blob = load_model_bytes()
    whole = with_durations(onnx.load_from_string(blob))
    weights = SharedWeights(whole)
    assert len(weights) > 50 and weights.nbytes > 50e6  # the ConvInteger weights are shared
    ours = make_session(whole, 2, weights)
    expected = plain(whole).run(["audio"], feeds)[0]
    assert np.allclose(ours.run(["audio"], feeds)[0], expected, atol=1e-5)
    # the vocoder's sessions, cut from the same model, read the same shared buffers
    parts = split(onnx.load_from_string(blob))
    encoder, exact = make_session(parts.encoder, 2, weights), make_session(parts.probe, 2, weights)
    features, f0, energy = encoder.run([FEATURES, F0, ENERGY], feeds)
    vocoder_feeds = {
        FEATURES: features,
        F0: f0,
        ENERGY: energy,
        "style": feeds["style"],
        CROP: np.array([0, f0.shape[1]], np.int64),
    }
    audio = exact.run(["audio"], vocoder_feeds)[0]
    assert np.allclose(audio, plain(parts.probe).run(["audio"], vocoder_feeds)[0], atol=1e-5)
    # the exact vocoder after the encoder is the whole model
    assert audio.size == expected.size and np.allclose(audio, expected, atol=1e-4)
    # handing the memory back (as the engine does when idle) changes nothing after it
    release_freed_memory()
    assert np.allclose(ours.run(["audio"], feeds)[0], expected, atol=1e-5)


def test_the_japanese_g2p_loads_with_the_first_japanese_text() -> None:
    pytest.importorskip("pyopenjtalk")
    g2p = Phonemizer("misaki")
    assert g2p.loaded == ("a",)
    assert "ð" in g2p("The weather is nice.", "j")  # English from a Japanese voice: misaki
    assert g2p.loaded == ("a",)
    phonemes = g2p("こんにちは、今日はいい天気ですね。", "j")
    assert "ɕ" in phonemes or "ʨ" in phonemes  # Japanese palatals, never in misaki's English
    assert g2p.loaded == ("a", "j")


def test_the_g2p_does_not_import_torch() -> None:
    pytest.importorskip("torch")  # installed with the test extras: spaCy's thinc would load it
    code = (
        "import sys; from gateway.kokoro.g2p import Phonemizer; g = Phonemizer('misaki'); "
        "print(g('I read it.', 'a'), 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    phonemes, imported = out.stdout.split()[:-1], out.stdout.split()[-1]
    assert phonemes and imported == "False"


@pytest.mark.asyncio
async def test_the_engine_speaks_the_same_after_handing_memory_back_when_idle() -> None:
    import asyncio

    from gateway.config import Settings

    from .conftest import embedded_engine

    async with embedded_engine(Settings(embedded_vocoder="off")) as engine:
        engine.idle_release_s = 0.05

        async def speak() -> bytes:
            return b"".join([c async for c in engine.synthesize("Hello there.", voice=engine.default_voice, speed=1.0)])

        first = await speak()
        async with asyncio.timeout(60):  # idle: the arena is shrunk and the C allocator trimmed
            while engine.work["memory_releases"] == 0:
                await asyncio.sleep(0.05)
        assert await speak() == first and len(first) > 24000


@pytest.mark.asyncio
async def test_the_engine_lets_the_whole_model_go_once_its_vocoder_is_built() -> None:
    """Its encoder and exact vocoder are the whole model, sample for sample, so the whole-model
    session (56 MB of its own) is dropped when the vocoder is ready, and every piece after that
    is rendered by the vocoder: the same audio and durations as the whole model's."""
    from gateway.config import Settings

    from .conftest import embedded_engine

    async with embedded_engine(Settings()) as engine:
        voice = engine.default_voice
        assert await engine.wait_vocoder(voice)
        model = engine.model
        assert model.session is None
        phonemes = model.phonemes("Sure, I can help with that.", voice)
        rendered = model.infer(phonemes, voice, 1.0, engine.vocoder)
        spoken = b"".join([c async for c in engine.synthesize("Hello there.", voice=voice, speed=1.0)])
        assert len(spoken) > 24000
        model.whole()  # made again, as the benchmarks that time the whole model do
        whole = model.infer(phonemes, voice, 1.0)
        assert rendered.audio.size > 24000 and np.array_equal(rendered.audio, whole.audio)
        assert np.array_equal(rendered.durations, whole.durations)
    with pytest.raises(RuntimeError, match="dropped"):
        model.drop_whole()
        model.infer(phonemes, voice, 1.0)
