"""Kokoro's vocoder in growing chunks: the first audio of a sentence in about a tenth of a second.

A whole-model call renders the entire sentence before returning anything (about 0.4 s per
second of audio on two cores). Here the encoder runs once per segment, then the vocoder runs
on windows of a few frames: the generator computes ``context`` frames each side of the chunk,
the cheap decoder front ``front_context`` more, and both are dropped; that is enough for the
convolutions to agree with an unchunked run.

Modes (all yield float32 mono audio at 24 kHz, the leading and trailing silence trimmed from
the encoder's energy curve, so no compute goes into the silence the model pads with):

* ``exact``: one call of the exact vocoder: the whole model's audio, no streaming.
* ``frozen``: every chunk through the frozen vocoder (statistics calibrated per voice). The
  chunks join exactly, but the voice's colour moves a little from the exact model's.
* ``frozen-first``: frozen chunks only until the audio already produced covers the time the
  exact vocoder needs for the rest of the sentence; then one exact call for the rest, joined
  with a short cross-fade. Streams as early as ``frozen``; most of the sentence is exact.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .names import CROP, DURATIONS, ENERGY, F0, FEATURES, HARMONICS, PHASE_OFFSET

SAMPLE_RATE = 24000
FRAME = 600  # samples per feature frame (40 frames a second); F0 and energy have two per frame
FRAME_S = FRAME / SAMPLE_RATE
SOURCE_UPSAMPLE = 300  # samples per F0 frame in the harmonic source
VOICED_ENERGY = -1.0  # encoder energy above this is sound (it sits near -5..-10 in the padding)


@dataclass(frozen=True, slots=True)
class Encoded:
    """The encoder's output for one segment: what the vocoder needs besides style."""

    features: np.ndarray  # [1, 512, T]
    f0: np.ndarray  # [1, 2T], Hz
    energy: np.ndarray  # [1, 2T]
    durations: np.ndarray | None = None  # [N + 2] frames per token, pads included (sum T)

    @property
    def frames(self) -> int:
        return int(self.features.shape[2])

    def window(self, start: int, stop: int) -> dict[str, np.ndarray]:
        return {
            FEATURES: self.features[:, :, start:stop],
            F0: self.f0[:, 2 * start : 2 * stop],
            ENERGY: self.energy[:, 2 * start : 2 * stop],
        }


@dataclass(frozen=True, slots=True)
class Policy:
    """How a sentence is cut: chunk sizes in frames, context, cross-fades, when to go exact."""

    # chunk shapes; the first opens. The large ones run only once the lead covers them: each
    # chunk pays 2 x ``context`` frames and a call's fixed cost, so fewer, larger ones cost less
    # (at most 64: a frozen call's activations are 2.7 MB a generator frame, 3x an exact one's,
    # so 96 held 270 MB at once; ``max_window``)
    sizes: tuple[int, ...] = (6, 8, 12, 16, 24, 32, 48, 64)
    adaptive: bool = True  # pick each next size by measured speed (else: in order, last repeats)
    # once the first chunk is out, the rest of the segment in one call when the engine is
    # predicted too slow for any chunking to keep a real-time player fed (a stall is certain):
    # the least engine time (no context, one call's fixed cost), though the player's wait then
    # comes in one longer piece (docs/STREAMING_VOCODER.md); frozen-first's call is its exact rest
    batch_rest: bool = True
    context: int = 4  # generator frames computed and dropped each side of a chunk
    # left context of a segment's opening chunk, which starts in the model's lead silence:
    # there 2 frames come as close to a wide window as 4 (measured: tests/test_vocoder.py),
    # and the first chunk costs ~15% less
    open_left: int = 2
    front_context: int = 12  # decoder-front frames beyond those (wider receptive field, cheap)
    crossfade: int = 2  # frames over which frozen hands over to exact
    join_fade: int = 240  # samples (10 ms) of cross-fade at every frozen join: no step there
    lead: int = 1  # frames kept before the first voiced one
    tail: int = 6  # frames kept after the last voiced one (150 ms: a pause between sentences)
    min_chunk: int = 4  # a remainder shorter than this joins the chunk before it
    margin: float = 1.25  # a chunk must be predicted to finish this many times over in time
    max_first: int = 16  # the opening chunk's largest size, however loaded the machine
    safety: float = 1.5  # the same for the exact rest of frozen-first (one long call)
    # spans this short (frames) go exact in one call, even when streaming: frozen statistics,
    # pooled over sentences, are far from a short exclamation's own (its padding dominates)
    exact_below: int = 0
    # the most generator frames one exact call computes (0: no limit): a call's activations are
    # about 0.9 MB a frame (35 MB a second of audio) and onnxruntime's arena holds them, so a
    # 510-token segment in one call took 880 MB; longer spans go in windows of this many frames,
    # each with its own statistics, joined by ``crossfade`` (``exact_windows``). 300 (7.5 s):
    # most sentences stay one call, the same audio as the whole model (windows of 200 measured
    # 6.4 dB from the whole call against the model's own 5.2 dB floor on a 26 s piece)
    max_window: int = 300

    def bounds(self, tokens: int, speed: float) -> bool:
        """Might one whole-model call on ``tokens`` exceed ``max_window`` frames (about 2.2-2.4
        a token at speed 1, the pads included)? Then ``render`` it instead."""
        return bool(self.max_window) and tokens * 2.5 / speed > self.max_window


def phase_offset(f0: np.ndarray, start: int) -> np.ndarray:
    """The harmonic source's accumulated phase before F0 frame ``start``, as the graph sums it.

    Per F0 frame the source advances by frac(f0 * h / 24000) cycles per sample for harmonic h
    (computed in float32, as in the graph). The sum is taken in float64 and reduced modulo one
    cycle of the 300-sample frame, so a long sentence loses no precision.
    """
    harmonics = np.arange(1, HARMONICS + 1, dtype=np.float32)
    rad = f0[0, :start, None].astype(np.float32) * harmonics / np.float32(SAMPLE_RATE)
    rad = (rad - np.floor(rad)).astype(np.float64)
    cycles = rad.sum(axis=0) * SOURCE_UPSAMPLE
    phase: np.ndarray = ((cycles % 1.0) / SOURCE_UPSAMPLE).astype(np.float32).reshape(1, 1, HARMONICS)
    return phase


def voiced_span(energy: np.ndarray, lead: int, tail: int) -> tuple[int, int]:
    """Feature frames [start, stop) from ``lead`` before the first sound to ``tail`` after the last."""
    frames = energy.shape[1] // 2
    loud = np.flatnonzero(energy[0, : 2 * frames].reshape(frames, 2).max(axis=1) > VOICED_ENERGY)
    if loud.size == 0:
        return 0, 0
    return max(0, int(loud[0]) - lead), min(frames, int(loud[-1]) + 1 + tail)


def fade(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Raised-cosine cross-fade from ``a`` to ``b`` (same length)."""
    w = 0.5 - 0.5 * np.cos(np.linspace(0.0, np.pi, len(a), dtype=np.float32))
    return a * (1 - w) + b * w


class ChunkRunner:
    """Runs the frozen and exact vocoders on windows of one encoded segment."""

    def __init__(
        self, frozen: Any, exact: Any, enc: Encoded, style: np.ndarray, stats: Mapping[str, np.ndarray], policy: Policy
    ) -> None:
        self.frozen, self.exact, self.enc = frozen, exact, enc
        self.style, self.stats, self.policy = style, stats, policy

    def run(
        self,
        start: int,
        stop: int,
        *,
        exact: bool,
        to_end: bool = False,
        lead: int = 0,
        left: int | None = None,
        whole_front: bool = True,
    ) -> tuple[np.ndarray, int]:
        """Audio for frames [start, stop), with ``lead`` samples before them (at most a frame),
        and the generator window's length in frames.

        The exact vocoder's front sees the whole segment (its statistics are then the whole
        model's), or with ``whole_front`` False the window and ``front_context``. ``left``
        overrides the generator's context before ``start``. ``to_end`` extends the generator's
        window to the segment's end: exact statistics that include the trailing silence, as the
        whole sentence's do, sound closer.
        """
        frames, ctx = self.enc.frames, self.policy.context
        if lead > FRAME or (lead and start < 1):
            raise ValueError("lead must fit in the frame before start")
        lo = max(0, start - max(ctx if left is None else left, 1 if lead else 0))
        hi = frames if to_end else min(frames, stop + ctx)
        if exact and whole_front:
            front_lo, front_hi = 0, frames
        else:
            front_lo = max(0, lo - self.policy.front_context)
            front_hi = min(frames, hi + self.policy.front_context)
        feeds = self.enc.window(front_lo, front_hi)
        feeds["style"] = self.style
        feeds[CROP] = np.array([2 * (lo - front_lo), 2 * (hi - front_lo)], np.int64)
        if exact:
            audio = self.exact.run(["audio"], feeds)[0]
        else:
            feeds[PHASE_OFFSET] = phase_offset(self.enc.f0, 2 * lo)
            feeds.update(self.stats)
            audio = self.frozen.run(None, feeds)[0]
        audio = np.asarray(audio, np.float32).reshape(-1)
        # copies: onnxruntime's outputs are views of its arena (``KokoroModel.infer``)
        return audio[(start - lo) * FRAME - lead : (stop - lo) * FRAME].copy(), hi - lo


def exact_windows(runner: ChunkRunner, begin: int, stop: int) -> Iterator[tuple[np.ndarray, int]]:
    """Exact audio for frames [``begin``, ``stop``) and each call's generator window in frames:
    ``runner.run(begin, stop, exact=True, to_end=True)`` when its window fits in
    ``policy.max_window``, else consecutive calls that each do. A window's statistics are its
    own (its front's too, over ``front_context`` more), which moves the sound less than frozen
    ones do (docs/BENCHMARKS.md, memory); windows overlap by ``crossfade`` frames, faded across."""
    p, frames = runner.policy, runner.enc.frames
    step = max(p.max_window - 2 * p.context - p.crossfade, p.min_chunk)
    pos, held = begin, np.zeros(0, np.float32)
    while True:
        first = pos - len(held) // FRAME
        to_end = not p.max_window or frames - max(0, first - p.context) <= p.max_window
        last = to_end or pos + step >= stop
        end = stop if last else pos + step
        # the front over the window (and ``front_context``), not the whole segment each time:
        # over a 26 s segment it cost 16% of a 200-frame window's time per window
        audio, window = runner.run(first, end, exact=True, to_end=to_end, whole_front=to_end and pos == begin)
        audio[: len(held)] = fade(held, audio[: len(held)])
        if last:
            yield audio, window
            return
        keep = p.crossfade * FRAME
        yield audio[: len(audio) - keep], window
        pos, held = end, audio[len(audio) - keep :]


def render(
    sessions: tuple[Any, Any, Any], tokens: list[int], style: np.ndarray, speed: float, policy: Policy
) -> tuple[np.ndarray, np.ndarray]:
    """What the whole model returns for one piece (its audio over all frames, and the frames
    per token), from the ``sessions`` (encoder, frozen and exact vocoder): the exact vocoder in
    windows of at most ``policy.max_window`` frames, so the same audio when the piece fits in
    one, bounded memory when it does not (``exact_windows``)."""
    encoder, frozen, exact = sessions
    style = np.asarray(style, np.float32).reshape(1, 256)
    enc = encode_segment(encoder, tokens, style, speed)
    runner = ChunkRunner(frozen, exact, enc, style, {}, policy)
    audio = np.concatenate([a for a, _ in exact_windows(runner, 0, enc.frames)])
    return audio, enc.durations if enc.durations is not None else np.zeros(0, np.int64)


def encode_segment(session: Any, tokens: list[int], style: np.ndarray, speed: float) -> Encoded:
    features, f0, energy, durations = session.run(
        [FEATURES, F0, ENERGY, DURATIONS],
        {
            "tokens": np.array([[0, *tokens, 0]], dtype=np.int64),
            "style": np.asarray(style, np.float32).reshape(1, 256),
            "speed": np.array([speed], dtype=np.float32),
        },
    )
    return Encoded(
        np.array(features, np.float32),
        np.array(f0, np.float32),
        np.array(energy, np.float32),
        np.asarray(durations).ravel().astype(np.int64),
    )
