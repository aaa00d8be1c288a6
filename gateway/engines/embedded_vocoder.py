"""The embedded engine's streaming vocoder (docs/STREAMING_VOCODER.md), built in the background.

From the moment the model is loaded (beside the engine's first call), one thread of its own
splits the model into encoder and vocoder and calibrates the default voice (cached per voice);
other voices are calibrated on first use. Until a voice is ready its segments use the whole
model, so the engine's start never waits for it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..kokoro.floatgraph import graph_bytes
from ..kokoro.onnx_model import KokoroModel, load_model_bytes, shipped_sha256
from ..kokoro.onnx_sessions import release_freed_memory
from ..kokoro.vocoder import Policy, StreamingVocoder, default_cache_dir
from ..kokoro.vocoder.calibrate import Stopped
from ..kokoro.vocoder.chunked import FRAME_S

log = logging.getLogger(__name__)


class VocoderHost:
    """The ``StreamingVocoder`` of one embedded engine: its build, calibrations and state."""

    def __init__(self, mode: str, exact_below_s: float, threads: int, cache_dir: str, batch_rest: bool = True) -> None:
        self.mode, self.exact_below_s, self.threads = mode, exact_below_s, threads
        self.batch_rest = batch_rest
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.vocoder: StreamingVocoder | None = None
        self.state = "off" if mode == "off" else "waiting for start"
        self.build_s: float | None = None
        self._tasks: dict[str, asyncio.Future[Any]] = {}  # "" = the build; else a voice
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._stop = threading.Event()
        self._model: KokoroModel | None = None

    @property
    def status(self) -> dict[str, Any]:
        """For /readyz: the configured mode, the build's state, the voices it can stream."""
        vocoder = self.vocoder
        return {
            "mode": self.mode,
            "state": self.state,
            "build_s": self.build_s,
            "exact_below_s": self.exact_below_s,
            "batch_rest": self.batch_rest,
            "voices": sorted(vocoder.voices) if vocoder is not None else [],
        }

    def start(self, model: KokoroModel, voice: str) -> None:
        """Build in the background for ``model``, calibrating ``voice`` first."""
        if self.mode == "off":
            return
        self._model = model
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="kokoro-vocoder")
        self.state = "building"
        self._tasks[""] = self._in_pool("", self._build, model, voice)

    async def aclose(self) -> None:
        pool, self._pool, self.vocoder, self._model = self._pool, None, None, None
        self._stop.set()  # a calibration in progress ends at its next sentence
        if pool is not None:
            await asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)

    async def wait(self, voice: str = "") -> bool:
        """Wait until the vocoder (and ``voice``, if given) can stream; False if it cannot."""
        if self.mode == "off":
            return False
        if build := self._tasks.get(""):
            await asyncio.wait([build])  # its failure is logged and kept in status
        if self.vocoder is None:
            return False
        if voice and self.streamer(voice) is None and (task := self._tasks.get(voice)):
            await asyncio.wait([task])
        return self.vocoder is not None and (not voice or voice in self.vocoder.voices)

    def streamer(self, voice: str) -> StreamingVocoder | None:
        """The vocoder if it can stream ``voice`` now, else None (and ``voice`` is calibrated
        in the background, so that a later request can)."""
        vocoder, model = self.vocoder, self._model
        if vocoder is None or model is None:
            return None
        if voice in vocoder.voices:
            return vocoder
        if voice not in self._tasks and self._pool is not None:
            log.info(
                "preparing the streaming vocoder for %s in the background (cached "
                "statistics, or a calibration of about 12 s)",
                voice,
            )
            self._tasks[voice] = self._in_pool(voice, vocoder.add_voice, voice, model.style(voice))
        return None

    def _in_pool(self, key: str, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """Run a build step on the vocoder's own thread; failures are logged, never raised."""
        assert self._pool is not None
        future = asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

        def done(f: asyncio.Future[Any]) -> None:
            if key:
                self._tasks.pop(key, None)
            if f.cancelled() or isinstance(exc := f.exception(), Stopped) or exc is None:
                return
            what = "build" if not key else f"calibration of {key}"
            log.error("streaming vocoder %s failed: %s; that voice uses the whole model", what, exc)
            if not key:
                self.state = f"failed: {exc}"

        future.add_done_callback(done)
        return future

    def _build(self, model: KokoroModel, voice: str) -> None:
        t0 = time.perf_counter()
        # the graph the engine runs (int8 as shipped, a float one, or int8-static), cut by the same names
        graph, sha256 = graph_bytes(model.precision, load_model_bytes, shipped_sha256(), calibration=model.calibration)
        policy = Policy(exact_below=round(self.exact_below_s / FRAME_S), batch_rest=self.batch_rest)
        vocoder = StreamingVocoder.build(
            graph,
            {voice: model.style(voice)},
            threads=self.threads,
            vocab=model.vocab,
            stop=self._stop,
            policy=policy,
            sha256=sha256,  # graph_bytes() checked the bytes against it
            cache_dir=self.cache_dir or default_cache_dir(),
            provider=model.provider,
            weights=model.weights,
        )
        del graph
        release_freed_memory()  # the parsed and cut graphs (a few hundred MB, freed by now)
        self.build_s = round(time.perf_counter() - t0, 2)
        if self._model is model:  # not closed meanwhile
            self.vocoder, self.state = vocoder, "ready"
            # its encoder and exact vocoder are the whole model, sample for sample: that
            # session's own weights (56 MB) go, and the engine's calls pass this vocoder
            model.drop_whole()
            release_freed_memory()
