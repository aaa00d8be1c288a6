"""The streaming vocoder's pacing on a simulated engine: what a policy costs at any machine speed.

``StreamingVocoder``'s own pacing code (``_stream``, ``pacing.py``) runs against a stand-in
``ChunkRunner`` whose calls take no real time: each advances a virtual clock by a cost line
(``fixed_ms`` plus ``rtf`` x 25 ms a generator frame), so the same segments can be replayed at
the speed of a quiet machine and of a loaded one, deterministically. Per policy and speed:
generator frames and calls against one exact call over the segment (the whole model's vocoder
work), the time to the first chunk, and the stalls of a real-time player that starts at it;
then the segments as one reply (``reply``): the engine's busy time and the earliest gapless start.
No model runs; the real bench (``engine_profile``) measures the same on the real engine.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from gateway.kokoro.vocoder import Policy, StreamingVocoder, pacing, streaming
from gateway.kokoro.vocoder.chunked import FRAME, FRAME_S, SAMPLE_RATE

SPANS = (80, 120, 160)  # segments of 2, 3 and 4 s of audio
LEAD, PAD = 4, 12  # frames of model padding before the span, and in all


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


@dataclass(frozen=True, slots=True)
class Frames:
    frames: int


class SimRunner:
    """``ChunkRunner``'s windows and outputs, its calls' cost charged to ``clock``."""

    def __init__(self, frames: int, policy: Policy, clock: Clock, fixed_s: float, per_frame_s: float) -> None:
        self.enc, self.policy, self.clock = Frames(frames), policy, clock
        self.fixed_s, self.per_frame_s = fixed_s, per_frame_s
        self.windows: list[int] = []

    def run(
        self,
        start: int,
        stop: int,
        *,
        exact: bool,
        to_end: bool = False,
        lead: int = 0,
        left: int | None = None,
        whole_front: bool = True,  # (the exact front's cost is not simulated)
    ) -> tuple[np.ndarray, int]:
        ctx = self.policy.context
        lo = max(0, start - max(ctx if left is None else left, 1 if lead else 0))
        hi = self.enc.frames if to_end else min(self.enc.frames, stop + ctx)
        self.clock.now += self.fixed_s + self.per_frame_s * (hi - lo)
        self.windows.append(hi - lo)
        return np.zeros((stop - start) * FRAME + lead, np.float32), hi - lo


@dataclass(frozen=True, slots=True)
class Outcome:
    frames: int  # generator frames computed, summed over the segments
    calls: int
    first_s: float  # median time to the first chunk
    stall_s: float  # total wait of a real-time player started at each segment's first chunk


@contextlib.contextmanager
def simulated_engine(
    policy: Policy, rtf: float, fixed_ms: float
) -> Iterator[tuple[Clock, StreamingVocoder, Callable[[int], SimRunner]]]:
    """A streaming vocoder on a simulated clock (patched into the vocoder's modules until the
    block ends), its costs already observed: (the clock, the vocoder, a runner for a span)."""
    clock = Clock()
    saved = streaming.time, pacing.time
    streaming.time = pacing.time = types.SimpleNamespace(perf_counter=clock.perf_counter)  # type: ignore[assignment]
    try:
        vocoder = StreamingVocoder(None, None, None, {}, (), policy)
        per_frame = rtf * FRAME_S
        for window in (14, 16, 20, 24, 12, 18):  # what warm_up() measures
            vocoder.costs.observe(window, fixed_ms / 1000 + per_frame * window)
        yield clock, vocoder, lambda span: SimRunner(span + PAD, policy, clock, fixed_ms / 1000, per_frame)
    finally:
        streaming.time, pacing.time = saved


def simulate(policy: Policy, rtf: float, fixed_ms: float = 10.0) -> Outcome:
    with simulated_engine(policy, rtf, fixed_ms) as (clock, vocoder, runner_for):
        frames = calls = 0
        firsts, stall = [], 0.0
        for span in SPANS:
            runner = runner_for(span)
            t0 = clock.now
            arrivals = [(clock.now - t0, len(a)) for a in vocoder._stream(runner, LEAD, LEAD + span, True, None)]  # type: ignore[arg-type]
            frames, calls = frames + sum(runner.windows), calls + len(runner.windows)
            firsts.append(arrivals[0][0])
            stall += player_stall(arrivals)
        return Outcome(frames, calls, float(np.median(firsts)), stall)


def player_stall(arrivals: list[tuple[float, int]]) -> float:
    """Seconds a player that starts at the first chunk waits for later ones."""
    clock, stall = arrivals[0][0], 0.0
    for when, samples in arrivals:
        if when > clock:
            stall, clock = stall + when - clock, when
        clock += samples / SAMPLE_RATE
    return stall


def report(previous: Policy, current: Policy, rtfs: tuple[float, ...] = (0.3, 0.45, 0.6, 0.7, 0.9, 1.2, 2.0)) -> str:
    exact = sum(span + PAD for span in SPANS)  # one exact call per segment, padding included
    lines = [
        "pacing on a simulated engine (10 ms a call + RTF x 25 ms a generator frame; segments of "
        f"{', '.join(f'{s * FRAME_S:.0f}' for s in SPANS)} s, every one streamed; frames = generator "
        "frames vs one exact call per segment):",
        f"{'RTF':>5} {'policy':<9} {'frames':>7} {'vs exact':>8} {'calls':>6} {'first ms':>9} {'stalls s':>9}",
    ]
    for rtf in rtfs:
        for name, policy in (("previous", previous), ("current", current)):
            o = simulate(policy, rtf)
            lines.append(
                f"{rtf:>5.2f} {name:<9} {o.frames:>7} {o.frames / exact:>7.2f}x {o.calls:>6} "
                f"{o.first_s * 1000:>9.0f} {o.stall_s:>9.2f}"
            )
    return "\n".join(lines)


def run(policy: Policy | None = None) -> str:
    from .engine_profile import previous_policy

    current = policy or Policy(exact_below=0)
    previous = previous_policy(current)
    return report(previous, current) + "\n" + reply_report(previous, current)


def reply(policy: Policy, rtf: float, fixed_ms: float = 10.0) -> tuple[float, float]:
    """One reply of ``SPANS`` in order, as the core streams it: each segment is told the audio
    the listener holds and has not heard (``buffered_s``, from a player that starts at the first
    payload). Returns the engine's busy seconds and the oracle start: the earliest start after
    the request that plays the whole reply without a stall (max of arrival minus audio before)."""
    with simulated_engine(policy, rtf, fixed_ms) as (clock, vocoder, runner_for):
        first: float | None = None
        sent = oracle = 0.0
        for span in SPANS:
            buffered = 0.0 if first is None else max(0.0, sent - (clock.now - first))
            runner = runner_for(span)
            for audio in vocoder._stream(runner, LEAD, LEAD + span, True, None, buffered):  # type: ignore[arg-type]
                first = clock.now if first is None else first
                oracle = max(oracle, clock.now - sent)
                sent += len(audio) / SAMPLE_RATE
        return clock.now, oracle


def reply_report(
    previous: Policy,
    current: Policy,
    rtfs: tuple[float, ...] = (0.45, 0.9, 1.2, 1.7),
    fixed: tuple[float, ...] = (10.0, 190.0),
) -> str:
    lines = [
        "one reply of the same segments in order, as the core streams it (buffered_s from the audio sent): "
        f"engine busy s and the oracle start s (earliest gapless start), {sum(SPANS) * FRAME_S:.0f} s of audio; "
        "a call's fixed cost 10 ms (quiet) and 190 ms (fitted under load 10):",
        f"{'fixed':>5} {'RTF':>5} {'busy previous':>14} {'busy now':>9} {'start previous':>15} {'start now':>10}",
    ]
    for ms in fixed:
        for rtf in rtfs:
            (busy0, start0), (busy1, start1) = reply(previous, rtf, ms), reply(current, rtf, ms)
            lines.append(f"{ms:>5.0f} {rtf:>5.2f} {busy0:>14.2f} {busy1:>9.2f} {start0:>15.2f} {start1:>10.2f}")
    return "\n".join(lines)
