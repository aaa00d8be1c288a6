"""``convert-weights``: hexgrad's ``KModel`` with the real Kokoro-82M weights, read back out of
the shipped ONNX model, speaks as the ONNX graph does.

The reference is the fp32 graph (the int8 weights dequantized, ``gateway.kokoro.floatgraph``), whose
weights the torch model now holds exactly. Two differences are the model's own and stay:
the vocoder's harmonic source adds random noise in torch (the export has none), and the
export's inverse STFT (a transposed convolution over a window sum) is 1.5 times torch's
``istft``, so the torch model is 3.5 dB quieter. Distances are taken with that gain undone,
against the model's own chaos floor (2.6-3.5 dB frame LSD, README).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gateway.config import load_settings

torch = pytest.importorskip("torch", reason="the kokoro engine needs the torch extra: pip install -e '.[torch]'")
pytest.importorskip("kokoro", reason="the kokoro engine needs the torch extra: pip install -e '.[torch]'")

ROOT = Path(__file__).resolve().parent.parent
PHONEMES = "ðə tɹˈAn tə ðə ˈɛɹpˌɔɹt lˈivz fɹʌm ðə sˈɛkənd plˈætfˌɔɹm."
ISTFT_GAIN = 1.5  # the export's inverse STFT over torch.istft, on the same spectra


@pytest.fixture(autouse=True)
def hub_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


@pytest.fixture(scope="module")
def kokoro_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One conversion for the module, through the command line as a user runs it."""
    out = tmp_path_factory.mktemp("kokoro-82m")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "run_gateway.py"), "convert-weights", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["SOURCE.json", "config.json", "kokoro-v1_0.pth"]
    return out


@pytest.mark.slow  # converts and loads the real Kokoro-82M weights on torch
def test_every_kmodel_parameter_comes_from_the_graph(kokoro_dir: Path) -> None:
    from gateway.kokoro.convert_weights import kmodel
    from gateway.kokoro.floatgraph.torch_weights import CONFIG, MODULES
    from gateway.kokoro.parts import load_vocab

    saved = torch.load(kokoro_dir / "kokoro-v1_0.pth", map_location="cpu", weights_only=True)
    assert sorted(saved) == sorted(MODULES)
    torch.manual_seed(0)
    fresh = kmodel({**CONFIG, "vocab": load_vocab()}).state_dict()
    got = {f"{part}.{name}": value for part, sd in saved.items() for name, value in sd.items()}
    assert got.keys() == fresh.keys() and len(got) == 688
    same = sorted(k for k in got if got[k].shape == fresh[k].shape and torch.equal(got[k], fresh[k]))
    # only what the graph does not hold (torch_weights.UNUSED) may equal its initial value: the
    # instance norms' affine part is identity, which is what the export computes (it folded the
    # multiply by one and the add of zero away), and the pooler's bias is zero (never used)
    unexpected = [k for k in same if not k.endswith((".norm.weight", ".norm.bias")) and k != "bert.pooler.bias"]
    assert same and not unexpected, unexpected[:5]
    assert all(torch.isfinite(v).all() for v in got.values())


@pytest.mark.slow  # converts and loads the real Kokoro-82M weights on torch
def test_torch_speaks_as_the_onnx_graph_on_fixed_phonemes(kokoro_dir: Path) -> None:
    from bench.measure import align, distance
    from gateway.engines.kokoro import TorchKokoro, find_model_files
    from gateway.kokoro.onnx_model import KokoroModel
    from gateway.kokoro.parts import load_voice_packs

    packs = load_voice_packs()
    onnx_model = KokoroModel(2, "espeak", packs, precision="fp32")
    reference = onnx_model.infer(onnx_model.tokens(PHONEMES), "af_heart", 1.0)
    torch_model = TorchKokoro(find_model_files(kokoro_dir), "cpu", "espeak", packs.packs)
    torch.manual_seed(0)
    rendered = torch_model.render(torch_model.tokens(PHONEMES), "af_heart", 1.0)
    # the same durations from the same duration predictor
    assert rendered.durations.tolist() == reference.durations.tolist()
    assert rendered.start == reference.start and rendered.audio.size == reference.audio.size
    d = distance(reference.audio, align(reference.audio, rendered.audio * ISTFT_GAIN))
    assert d.lsd_db <= 3.5 and d.timbre_db < 1.0 and abs(d.loudness_db) < 1.0, d


@pytest.mark.slow
async def test_kokoro_engine_with_converted_weights_is_intelligible(kokoro_dir: Path) -> None:
    from bench import wer
    from gateway.engines.kokoro import KokoroEngine

    from .test_intelligibility import SENTENCES

    logging.getLogger("faster_whisper").setLevel(logging.WARNING)
    settings = load_settings(
        env={}, overrides={"engine": "kokoro", "kokoro_dir": str(kokoro_dir), "kokoro_device": "cpu"}
    )
    engine = KokoroEngine(settings)
    await engine.start()
    total, heard = wer.WerResult(0, 0), []
    try:
        assert engine.default_voice == "af_heart"
        for text in SENTENCES:
            pcm = b"".join([c async for c in engine.synthesize(text, voice="af_heart", speed=1.0)])
            transcript = wer.transcribe(np.frombuffer(pcm, "<i2").astype(np.float32) / 32768.0, engine.sample_rate)
            heard.append(transcript)
            total += wer.score(text, transcript)
    finally:
        await engine.aclose()
    assert total.words >= 35
    assert total.wer <= 0.03, f"WER {total.wer:.1%}; Whisper heard: {heard}"
