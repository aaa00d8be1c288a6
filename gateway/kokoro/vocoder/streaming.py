"""``StreamingVocoder``: build the split models and per-voice statistics, then stream a segment.

Built once from the shipped model bytes (already hash-checked by the caller): the graph is cut
in memory (nothing is written but the optional statistics cache), three sessions are made
(encoder, exact vocoder that can also report its statistics, frozen vocoder), and each voice's
statistics are loaded from the cache or calibrated.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..floatgraph.runtime import make_session
from ..onnx_sessions import SharedWeights
from ..parts import load_vocab
from . import calibrate, chunked
from .chunked import FRAME, FRAME_S, ChunkRunner, Encoded, Policy, encode_segment, fade, voiced_span
from .modes import DEFAULT, VocoderMode, check_mode
from .names import Statistic
from .pacing import Pacer, WindowCosts, behind, first_size, next_size

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BuildReport:
    """Where ``build`` spent its time, in seconds."""

    split_s: float  # parse and cut the graph
    sessions_s: float  # three onnxruntime sessions
    calibrate_s: float  # 0 when the statistics came from the cache
    warmup_s: float  # first-use costs, and the cost of the small chunk shapes measured
    cached: bool

    @property
    def total_s(self) -> float:
        return self.split_s + self.sessions_s + self.calibrate_s + self.warmup_s


class StreamingVocoder:
    """Encoder once per segment, then the vocoder in chunks; every method blocks."""

    def __init__(
        self,
        encoder: Any,
        exact: Any,
        frozen: Any,
        stats: Mapping[str, Mapping[str, np.ndarray]],
        statistics: Sequence[Statistic],
        policy: Policy = Policy(),
    ) -> None:
        self._encoder, self._exact, self._frozen = encoder, exact, frozen
        self._stats = {v: dict(s) for v, s in stats.items()}
        self.statistics = tuple(statistics)
        self.policy = policy
        self.costs = WindowCosts()  # frozen chunks: seeded by warm_up(), refined by every chunk
        self.exact_costs = WindowCosts()  # exact calls (whole segments, or the rest of one)
        self.report: BuildReport | None = None
        # what add_voice() needs to calibrate a voice later (set by build())
        self._digest = ""
        self._cache_dir: Path | None = None
        self._vocab: Mapping[str, int] = {}
        self._sentences: Sequence[str] = calibrate.SENTENCES
        self.stop = threading.Event()  # set it to end a calibration in progress (Stopped)
        self.weights: SharedWeights | None = None  # buffers the sessions read (kept alive here)

    @classmethod
    def build(
        cls,
        model_bytes: bytes,
        voices: Mapping[str, np.ndarray],
        *,
        threads: int = 2,
        cache_dir: Path | None = None,
        vocab: Mapping[str, int] | None = None,
        policy: Policy = Policy(),
        calibration: Sequence[str] = calibrate.SENTENCES,
        stop: threading.Event | None = None,
        sha256: str | None = None,
        provider: str = "cpu",
        weights: SharedWeights | None = None,
    ) -> StreamingVocoder:
        """Split ``model_bytes`` (the whole Kokoro ONNX model), make sessions, get statistics.

        ``voices``: voice id to style pack ([510, 1, 256] or [510, 256]), calibrated now (others
        later: ``add_voice``). ``cache_dir``: statistics cached per model SHA-256, voice and
        ``calibration`` sentences (Kokoro phonemes). ``stop`` (set: the calibration ends with
        ``calibrate.Stopped``). ``sha256``: the model's hash if the caller checked it. ``provider``:
        ``cpu`` or ``cuda`` (``floatgraph.runtime``). ``weights``: the whole model session's
        shared weights (else the three share their own; CPU only).
        """
        import onnx

        from .split import split

        if not voices:
            raise ValueError("build needs at least one voice to calibrate and warm up with")
        t0 = time.perf_counter()
        whole = onnx.load_from_string(model_bytes)
        if weights is None and provider == "cpu":
            weights = SharedWeights(whole)
        parts = split(whole)
        del whole
        t1 = time.perf_counter()
        encoder = make_session(parts.encoder, threads, provider, weights)
        exact = make_session(parts.probe, threads, provider, weights)  # also the exact vocoder
        frozen = make_session(parts.frozen, threads, provider, weights)
        t2 = time.perf_counter()
        self = cls(encoder, exact, frozen, {}, parts.statistics, policy)
        self.weights = weights
        del parts
        self._digest, self._cache_dir = calibrate.model_digest(model_bytes, sha256), cache_dir
        self._vocab, self._sentences = vocab or load_vocab(), tuple(calibration)
        if stop is not None:
            self.stop = stop
        calibrate_s = sum(self.add_voice(v, pack) for v, pack in voices.items())
        t3 = time.perf_counter()
        self.warm_up()
        cached = calibrate_s == 0.0
        self.report = BuildReport(t1 - t0, t2 - t1, calibrate_s, time.perf_counter() - t3, cached)
        log.info(
            "streaming vocoder built in %.1f s (split %.1f, sessions %.1f, calibration %.1f%s, warm-up %.1f)",
            self.report.total_s,
            t1 - t0,
            t2 - t1,
            calibrate_s,
            " from the cache" if cached else "",
            self.report.warmup_s,
        )
        return self

    def add_voice(self, voice: str, pack: np.ndarray) -> float:
        """Load ``voice``'s statistics from the cache, else calibrate (and cache) them: the
        seconds spent calibrating (0.0 when cached or known; about 10 s a voice on two cores)."""
        if voice in self._stats:
            return 0.0
        cache = self._cache_dir
        path = calibrate.cache_path(cache, self._digest, voice, self._sentences) if cache else None
        if path is not None and (stats := calibrate.load_cached(path, self.statistics)) is not None:
            self._stats[voice] = stats
            return 0.0

        def encode(tokens: list[int], style: np.ndarray, speed: float) -> tuple[np.ndarray, ...]:
            enc = encode_segment(self._encoder, tokens, style, speed)
            return enc.features, enc.f0, enc.energy

        packs = {voice: np.asarray(pack, np.float32).reshape(-1, 256)}
        calibrated, elapsed = calibrate.timed_calibrate(
            encode, self._exact, self.statistics, packs, self._vocab, self._sentences, self.stop
        )
        if path is not None:
            calibrate.save_cached(path, calibrated[voice])
        self._stats[voice] = calibrated[voice]  # one assignment: readers see all of it or nothing
        return max(elapsed, 1e-9)

    def with_policy(self, policy: Policy) -> StreamingVocoder:
        """The same sessions, statistics and measured costs under another policy."""
        other = StreamingVocoder(self._encoder, self._exact, self._frozen, self._stats, self.statistics, policy)
        other.costs, other.exact_costs, other.report = self.costs, self.exact_costs, self.report
        other._digest, other._cache_dir = self._digest, self._cache_dir
        other._vocab, other._sentences, other.stop = self._vocab, self._sentences, self.stop
        other.weights = self.weights
        return other

    @property
    def voices(self) -> tuple[str, ...]:
        return tuple(self._stats)

    def warm_up(self) -> None:
        """Pay first-use costs and measure the smallest chunk shapes once each: points on the
        one cost line (``CostModel``), so the opening chunk's narrower left context needs no
        calls of its own (three more were 40% of a cached build, on the path to ready)."""
        voice = next(iter(self._stats))
        p = self.policy
        frames = 2 * p.context + max(p.sizes[:3])
        enc = Encoded(
            np.zeros((1, 512, frames), np.float32),
            np.zeros((1, 2 * frames), np.float32),
            np.full((1, 2 * frames), -9.0, np.float32),
        )
        runner = self._runner(enc, np.zeros((1, 256), np.float32), voice)
        runner.run(p.context, p.context + p.sizes[0], exact=False, left=p.open_left)  # pays for allocations
        for size in p.sizes[:3]:
            t0 = time.perf_counter()
            _, window = runner.run(p.context, p.context + size, exact=False)
            self.costs.observe(window, time.perf_counter() - t0)

    def encode(self, tokens: list[int], style: np.ndarray, speed: float) -> Encoded:
        return encode_segment(self._encoder, tokens, style, speed)

    def span(self, enc: Encoded) -> tuple[int, int]:
        """The frames [start, stop) of ``enc`` that ``stream_encoded`` yields (the silence
        trimmed): its audio is ``(stop - start) * FRAME`` samples from sample ``start * FRAME``
        of the whole model's, where word times (``enc.durations``) count from."""
        return voiced_span(enc.energy, self.policy.lead, self.policy.tail)

    def _runner(self, enc: Encoded, style: np.ndarray, voice: str) -> ChunkRunner:
        if voice not in self._stats:
            raise ValueError(f"no calibrated statistics for voice {voice!r}")
        return ChunkRunner(
            self._frozen,
            self._exact,
            enc,
            np.asarray(style, np.float32).reshape(1, 256),
            self._stats[voice],
            self.policy,
        )

    def synthesize_chunks(
        self,
        tokens: list[int],
        style: np.ndarray,
        speed: float,
        voice: str,
        *,
        mode: str = DEFAULT,
        frozen_frames: int | None = None,
        buffered_s: float = 0.0,
        waiting: bool = False,
    ) -> Iterator[np.ndarray]:
        """Float32 audio chunks for one segment (``tokens`` without the pad ids).

        A generator: each ``next()`` blocks for one model call (the first also runs the encoder),
        so a caller drives it from an executor a chunk at a time. ``frozen_frames`` (frozen-first
        only, for tests and benches) fixes how many frames go frozen before the exact hand-over.
        ``buffered_s``: the audio the listener has and has not heard; in ``frozen-first``, a
        segment whose exact call is predicted to finish within that goes exact in one call.
        ``waiting``: their player holds it but waits for its preroll: the opening chunk is the
        smallest that pays, and the chunks after it count that audio as ahead (docs/STREAMING_VOCODER.md).
        """
        check_mode(mode)
        enc = self.encode(tokens, style, speed)
        yield from self.stream_encoded(
            enc, style, voice, mode=mode, frozen_frames=frozen_frames, buffered_s=buffered_s, waiting=waiting
        )

    def stream_encoded(
        self,
        enc: Encoded,
        style: np.ndarray,
        voice: str,
        *,
        mode: str = DEFAULT,
        frozen_frames: int | None = None,
        buffered_s: float = 0.0,
        waiting: bool = False,
    ) -> Iterator[np.ndarray]:
        """``synthesize_chunks`` from the encoder's output (for tools that alter it)."""
        check_mode(mode)
        p = self.policy
        start, stop = self.span(enc)
        runner = self._runner(enc, style, voice)
        if stop <= start:
            return
        in_time = (
            mode == VocoderMode.FROZEN_FIRST
            and frozen_frames is None
            and not waiting  # (the core chose to stream for a player that waits: ``Listener.mode_for``)
            and buffered_s >= p.safety * self.predict_exact(enc.frames)
        )
        if mode == VocoderMode.EXACT or stop - start <= p.exact_below or in_time:
            yield from self._exact_audio(runner, 0, start, stop)  # the whole model's statistics
            return
        hand_over = mode == VocoderMode.FROZEN_FIRST
        yield from self._stream(runner, start, stop, hand_over, frozen_frames, buffered_s, waiting)

    def _stream(
        self,
        runner: ChunkRunner,
        start: int,
        stop: int,
        hand_over: bool,
        frozen_frames: int | None,
        buffered_s: float = 0.0,
        waiting: bool = False,
    ) -> Iterator[np.ndarray]:
        """Frozen chunks, each cross-faded into the next over ``join_fade`` samples (held back
        until the next chunk exists); with ``hand_over``, the exact rest once it will be in time.
        """
        p = self.policy
        pacer = Pacer(self.costs, buffered_s)
        pos, size, index = start, 0, 0
        held = np.zeros(0, np.float32)
        while pos < stop:
            if index:
                size = next_size(p, pacer, size, index)
                cost = pacer.costs.predict(stop - pos + 2 * p.context)
                if not hand_over and behind(p, cost, pacer.ahead_s(), stop - pos, frozen_frames):
                    # frozen: the rest in one call (``Policy.batch_rest``), as large as memory allows
                    size = min(stop - pos, max(p.sizes))
            else:  # the smallest that pays for the next; larger if a playing listener's buffer allows
                size = first_size(p, self.costs)
                if pacer.first is not None and not waiting:
                    size = max(size, next_size(p, pacer, 0, 0))
            end = min(stop, pos + size)
            if stop - end < p.min_chunk + p.crossfade:
                end = stop
            rest_window = runner.enc.frames - max(0, end - p.crossfade - p.context)
            last = hand_over and end < stop and self._switch(pacer, pos, end, (start, stop), rest_window, frozen_frames)
            t0 = time.perf_counter()
            left = p.open_left if index == 0 else None  # the opening chunk starts in silence
            audio, window = runner.run(pos, end, exact=False, lead=len(held), left=left)
            audio[: len(held)] = fade(held, audio[: len(held)])
            keep = p.crossfade * FRAME if last else (p.join_fade if end < stop else 0)
            pacer.observe(window, time.perf_counter() - t0, len(audio) - keep)
            yield audio[: len(audio) - keep]
            held = audio[len(audio) - keep :]
            if last:
                yield from self._exact_audio(runner, end - p.crossfade, end - p.crossfade, stop, held)
                return
            pos, index = end, index + 1

    def _exact_audio(
        self, runner: ChunkRunner, begin: int, start: int, stop: int, held: np.ndarray | None = None
    ) -> Iterator[np.ndarray]:
        """Exact audio for frames [start, stop), computed from ``begin`` (``exact_windows``), in
        pieces as the windows are done; ``held`` is faded into its start."""
        pos, t0 = begin * FRAME, time.perf_counter()
        for audio, window in chunked.exact_windows(runner, begin, stop):
            self.exact_costs.observe(window, time.perf_counter() - t0)
            if held is not None and pos == begin * FRAME:
                audio[: len(held)] = fade(held, audio[: len(held)])
            piece = audio[max(0, start * FRAME - pos) :]
            pos += len(audio)
            if piece.size:
                yield piece
            t0 = time.perf_counter()

    def render(self, tokens: list[int], style: np.ndarray, speed: float) -> tuple[np.ndarray, np.ndarray]:
        """``chunked.render`` with this vocoder's sessions and policy."""
        return chunked.render((self._encoder, self._frozen, self._exact), tokens, style, speed, self.policy)

    def _switch(
        self, pacer: Pacer, pos: int, end: int, span: tuple[int, int], rest_window: int, frozen_frames: int | None
    ) -> bool:
        """Should [pos, end) be the last frozen chunk: will the exact rest (a window of
        ``rest_window`` frames, to the segment's end) then be ready in time, or is a stall
        certain whatever comes next (``pacing.behind``)? ``span``: the segment's [start, stop)."""
        p = self.policy
        if frozen_frames is not None:
            return end - span[0] >= frozen_frames
        chunk_s = (end - pos) * FRAME_S
        done_in = pacer.costs.predict(end - pos + 2 * p.context)
        # audio in hand, beyond what has played, once this chunk is done (playback starts
        # with the first chunk)
        ahead = chunk_s if pacer.first is None else pacer.ahead_s() - done_in + chunk_s
        rest, frames = self.predict_exact(rest_window), span[1] - end
        last = ahead >= p.safety * rest  # the exact rest in time
        if not last:  # or a stall certain if even one frozen call over the rest (its cheapest form) ends late
            last = behind(p, pacer.costs.predict(frames + 2 * p.context), ahead, frames, frozen_frames)
        if last and log.isEnabledFor(logging.DEBUG):  # a hand-over is when a stream's lump comes
            what = "exact rest after frame %d of [%d, %d): %.2f s in hand, the rest's %d frames forecast %.2f s"
            log.debug(what, end, *span, ahead, rest_window, rest)
        return last

    def predict_exact(self, window: int) -> float:
        """Seconds for one exact call over ``window`` frames: learned from exact calls once
        there were some, else from the frozen chunks (about the same cost per frame)."""
        return (self.exact_costs if self.exact_costs.seen else self.costs).predict(window)
