"""The torch engine: hexgrad's ``kokoro`` (``KModel``) with the real ``.pth`` weights, GPU or CPU.

The model is loaded from one local folder (setting ``kokoro_dir``): ``config.json`` and one
``.pth`` weights file. The voice packs come from the gateway's voice store (the 54 packs of
``kokoro-js``, as for the embedded engine; without it the five Japanese ones), and any
``voices/*.pt`` or ``*.pt`` in the folder are added (or replace a pack of the same name).
Nothing is fetched at run time: ``KModel`` is given both paths, and the G2P is the gateway's
own offline ``Phonemizer``, per voice language, instead of ``KPipeline`` (which would try hub
and spaCy downloads). Blends (``af_bella(2)+af_sky(1)``) mix packs as on the embedded engine.

Inference runs on ONE worker thread per engine (one engine per device), so calls on a device
are serialized and never block the event loop. torch and kokoro are imported only here.

With ``kokoro_max_batch`` above 1 (CUDA's default), pieces of different sessions run as one
padded forward pass (docs/GPU_BATCHING.md), each getting exactly the audio it would alone.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import json
import logging
import operator
import os
import time
import warnings
from collections.abc import AsyncGenerator, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from ..config import Settings, section
from ..errors import EngineError
from ..kokoro.g2p import ROUTES
from ..kokoro.parts import (
    MAX_TOKENS,
    SAMPLE_RATE,
    Blends,
    Rendered,
    Segment,
    choose_default,
    describe_voices,
    known_symbols,
    load_voice_packs,
    phonemize_words,
    split_phonemes,
)
from ..kokoro.timestamps import SegmentWords, WordTimes
from .base import EngineBase
from .batcher import MicroBatcher, batch_size

log = logging.getLogger(__name__)
T = TypeVar("T")

REPO_ID = "hexgrad/Kokoro-82M"  # only names the model family; passing it silences a warning
PREFERRED_WEIGHTS = "kokoro-v1_0.pth"
EXPECTED = (
    "config.json and one .pth weights file (such as kokoro-v1_0.pth); voice packs come from "
    "the voice store, and voices/*.pt or *.pt there (each a (510, 1, 256) tensor) are added"
)
INSTALL_HINT = "the kokoro engine needs torch and hexgrad's kokoro: pip install -e '.[torch]'"


@dataclass(frozen=True, slots=True)
class ModelFiles:
    folder: Path
    config: Path
    weights: Path
    voices: tuple[Path, ...]


def find_model_files(folder: str | os.PathLike[str]) -> ModelFiles:
    """Locate the model's files in ``folder``; ``EngineError`` naming what is expected if not."""
    if not str(folder):
        raise EngineError(f"set kokoro_dir (GATEWAY_KOKORO_DIR) to a folder holding {EXPECTED}", code="model_missing")
    root = Path(folder)
    if not root.is_dir():
        raise EngineError(f"kokoro_dir {root} is not a folder; it must hold {EXPECTED}", code="model_missing")
    config = root / "config.json"
    weights = sorted(root.glob("*.pth"))
    voices = tuple(sorted({*root.glob("voices/*.pt"), *root.glob("*.pt")}, key=lambda p: p.stem))
    missing = [what for what, ok in (("config.json", config.is_file()), (".pth weights", weights)) if not ok]
    if missing:
        raise EngineError(f"{root} lacks {', '.join(missing)}; it must hold {EXPECTED}", code="model_missing")
    if len(weights) > 1:
        preferred = [w for w in weights if w.name == PREFERRED_WEIGHTS]
        if not preferred:
            names = ", ".join(w.name for w in weights)
            raise EngineError(f"{root} holds several .pth files ({names}); keep one", code="model_missing")
        weights = preferred
    return ModelFiles(root, config, weights[0], voices)


@dataclass(frozen=True, slots=True)
class KokoroSettings:
    """``[kokoro]``: read by this engine alone (defaults: ``gateway.config.Settings``)."""

    dir: str  # config.json and the .pth weights
    device: str  # "" = cuda if available, else cpu
    g2p: str  # misaki or espeak
    max_batch: int  # pieces per forward pass; 0 = auto (CUDA 8, CPU 1 = no batching)
    batch_window_ms: float  # how long a piece may wait for others to join its batch


def pick_device(requested: str) -> str:
    import torch

    if requested:
        return requested
    return "cuda" if torch.cuda.is_available() else "cpu"


class TorchKokoro:
    """The loaded ``KModel``, its voice packs and the G2P; every method here blocks."""

    def __init__(
        self, files: ModelFiles, device: str, g2p_route: str = "misaki", packs: dict[str, np.ndarray] | None = None
    ) -> None:
        import torch
        from kokoro.model import KModel

        from ..kokoro.g2p import Phonemizer

        t0 = time.perf_counter()
        config = json.loads(files.config.read_text("utf-8"))
        with warnings.catch_warnings():
            # kokoro builds its LSTMs with dropout on one layer and uses the old weight_norm;
            # both warn on every load and neither matters for inference
            warnings.simplefilter("ignore", UserWarning)
            warnings.simplefilter("ignore", FutureWarning)
            model = KModel(repo_id=REPO_ID, config=config, model=str(files.weights))
        self.model = model.to(device).eval()
        self.device = device
        self.vocab: dict[str, int] = config["vocab"]
        self.voices = {k: torch.from_numpy(np.array(v, np.float32)) for k, v in (packs or {}).items()}
        self.voices.update({path.stem: self._load_voice(torch, path) for path in files.voices})
        self._blends = Blends(self.voices, lambda parts: functools.reduce(operator.add, (p * w for p, w in parts)))
        t1 = time.perf_counter()
        self.phonemize = Phonemizer(g2p_route)
        self.model_s, self.g2p_s = t1 - t0, time.perf_counter() - t1

    @staticmethod
    def _load_voice(torch: Any, path: Path) -> Any:
        pack = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(pack, torch.Tensor) or pack.shape[0] < MAX_TOKENS or pack.shape[-1] != 256:
            shape = tuple(pack.shape) if isinstance(pack, torch.Tensor) else type(pack).__name__
            raise EngineError(f"voice pack {path} is {shape}, expected (510, 1, 256)", code="model_missing")
        return pack.reshape(pack.shape[0], 1, 256).float()

    def tokens(self, phonemes: str) -> str:
        return known_symbols(phonemes, self.vocab)

    def style(self, voice: str) -> Any:
        """A voice's pack, or a blend's weighted mean."""
        return self._blends[voice]

    def infer(self, phonemes: str, voice: str, speed: float) -> np.ndarray:
        """Float32 audio at 24 kHz for at most ``MAX_TOKENS`` phoneme symbols."""
        return self.forward(phonemes, voice, speed)[0]

    def render(self, phonemes: str, voice: str, speed: float) -> Rendered:
        """``infer``'s audio with the silence trimmed, and the durations word times need."""
        return Rendered.trimmed(*self.forward(phonemes, voice, speed))

    def forward(self, phonemes: str, voice: str, speed: float) -> tuple[np.ndarray, np.ndarray]:
        """The audio and ``pred_dur``: frames (600 samples) per input token, the two pads
        ``KModel`` adds included; they sum to the audio's length."""
        import torch

        from .kokoro_batch import seeded

        if not phonemes:
            return np.zeros(0, np.float32), np.zeros(0, np.int64)
        style = self.style(voice)[len(phonemes) - 1]
        seeded()  # the source's random phases and noise: the same as in any batch
        with torch.inference_mode():
            output = self.model(phonemes, style, speed, return_output=True)
        out = output.audio.detach().float().cpu().numpy().ravel()
        if not np.isfinite(out).all():
            raise EngineError("the kokoro model produced non-finite audio", code="engine_error")
        durations = output.pred_dur.detach().cpu().numpy().ravel().astype(np.int64)
        return out, durations


class KokoroEngine(EngineBase):
    name = "kokoro"
    sample_rate = SAMPLE_RATE
    max_concurrency = 1  # one worker thread: calls on the device are serialized

    def __init__(self, settings: Settings) -> None:
        try:
            import kokoro  # noqa: F401  (fail at construction, not on the first request)
            import torch  # noqa: F401
        except ImportError as exc:
            raise ImportError(f"{INSTALL_HINT} ({exc})") from exc
        super().__init__()
        self.options = section(settings, "kokoro", KokoroSettings)
        if self.options.g2p not in ROUTES:
            raise ValueError(f"kokoro_g2p must be one of {', '.join(ROUTES)}")
        self.configured_default = settings.default_voice
        self._model: TorchKokoro | None = None
        self.packs = load_voice_packs(settings.voice_store)
        self._folder_voices: list[str] = []  # packs in kokoro_dir, added to (or replacing) the store's
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self.device = pick_device(self.options.device)
        self.max_batch = batch_size(self.options.max_batch, self.device)
        self.max_concurrency = self.max_batch  # so admission lets a batch's worth in at once
        self._batcher: MicroBatcher[Segment, Rendered] | None = None
        self._g2p: concurrent.futures.ThreadPoolExecutor | None = None  # batching: G2P beside the device

    @property
    def ready(self) -> bool:
        return self._model is not None

    @property
    def voice_store(self) -> dict[str, Any]:
        """Which voice packs are in use (the store, or the Japanese fallback), and the folder's."""
        return {**self.packs.store, "voices": len(self.voices), "from_kokoro_dir": self._folder_voices}

    async def start(self) -> None:
        if self._model is not None:
            return
        files = find_model_files(self.options.dir)
        executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="kokoro-torch")
        loop = asyncio.get_running_loop()
        try:
            model = await loop.run_in_executor(
                executor, TorchKokoro, files, self.device, self.options.g2p, self.packs.packs
            )
        except EngineError:
            executor.shutdown(wait=False)
            raise
        except Exception as exc:  # bad weights, a config that does not match, CUDA errors
            executor.shutdown(wait=False)
            raise EngineError(f"kokoro engine failed to load from {files.folder}: {exc}", code="engine_load") from exc
        self._executor, self._model = executor, model
        if self.max_batch > 1:
            from .kokoro_batch import render_batch

            self._batcher = MicroBatcher(
                lambda segments: render_batch(model, segments),
                executor,
                max_batch=self.max_batch,
                window_s=self.options.batch_window_ms / 1000,
                name=self.name,
            )
            self._g2p = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="kokoro-g2p")
        self._folder_voices = [path.stem for path in files.voices]
        default = choose_default(tuple(model.voices), self.configured_default)
        self.declare(voices=describe_voices(model.voices, default), default_voice=default, blends=True, timestamps=True)
        t0 = time.perf_counter()
        async for _ in self.synthesize("Hi.", voice=default, speed=1.0):
            pass
        log.info(
            "kokoro engine ready on %s: %d voices, model %.2f s, G2P %.2f s, warm-up %.2f s",
            self.device,
            len(self.voices),
            model.model_s,
            model.g2p_s,
            time.perf_counter() - t0,
        )

    @property
    def batching(self) -> dict[str, Any]:
        """Micro-batching: its size, pieces waiting, forward passes and the pieces they held."""
        batcher = self._batcher
        return {
            "max_batch": self.max_batch,
            **({"waiting": batcher.waiting, **asdict(batcher.stats)} if batcher else {}),
        }

    async def aclose(self) -> None:
        if self._batcher is not None:
            await self._batcher.aclose()
        executors, self._executor, self._g2p, self._model, self._batcher = (
            (self._executor, self._g2p),
            None,
            None,
            None,
            None,
        )
        for executor in filter(None, executors):
            await asyncio.to_thread(executor.shutdown, wait=True, cancel_futures=True)

    async def synthesize(
        self,
        text: str,
        *,
        voice: str,
        speed: float,
        vocoder: str | None = None,
        buffered_s: float = 0.0,
        waiting: bool = False,
        timestamps: bool = False,
    ) -> AsyncGenerator[bytes | WordTimes, None]:
        """Yield s16le PCM per piece of at most ``MAX_TOKENS`` phonemes, each once it is done;
        with ``timestamps``, each piece's ``WordTimes`` (from ``pred_dur``) before its audio.

        Closing the generator early starts no further inference for this text; a call
        already running finishes on the worker thread and its audio is dropped.
        """
        model = self.require(self._model)
        with self._batcher.arrival() if self._batcher else contextlib.nullcontext():  # a batch waits for it
            phonemes, tokens, exact = await self._run(
                lambda: phonemize_words(model.phonemize, model.vocab, text, voice), "G2P", self._g2p
            )
        pieces = split_phonemes(phonemes)
        words = SegmentWords(tokens, phonemes, pieces, exact) if timestamps else None
        for index, piece in enumerate(pieces):
            out = await self._render(model, piece, voice, speed)
            for item in out.items(words, index):
                yield item

    async def _render(self, model: TorchKokoro, piece: str, voice: str, speed: float) -> Rendered:
        """One piece alone, or in the next batch with other sessions' pieces."""
        if self._batcher is not None:
            return await self._batcher.submit(Segment(piece, voice, speed))
        return await self._run(lambda: model.render(piece, voice, speed), "inference")

    async def _run(self, fn: Callable[[], T], what: str, executor: concurrent.futures.Executor | None = None) -> T:
        return await self.outcome(self.submit(self.require(executor or self._executor), fn), what)
