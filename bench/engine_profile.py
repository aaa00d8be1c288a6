"""Where each millisecond of a streamed segment goes: every model call of the engine's ``exact``
and ``frozen-first`` paths, timed, on a paragraph's real segments, side by side in one run.

Every session the engine calls is wrapped in ``Timed`` (a pass-through that records the call's
kind, its generator window in frames and its seconds), so the table splits each path's wall time
into G2P, the encoder, frozen chunks (how many, their windows, the frames computed as context
and dropped), the exact call (whole model, or frozen-first's exact rest) and what is left (the
executor hops, PCM conversion, the event loop). ``frozen-first`` runs with an empty listener
buffer, so every segment streams (the worst case); paths alternate segment by segment and the
order flips every repetition, so load from other processes falls on all alike.

The ``frozen-first`` rows run under three pacing policies in the same run: ``previous`` (the
policy before issue 24: chunks of at most 48 frames, no ``batch_rest``), ``no batch_rest`` (the
current sizes, up to 96 frames, without ``batch_rest``) and the current default, so that each of
issue 24's two changes and their first audio are measured side by side. ``window_costs``
compares the same window's calls across the policies (a line fitted over each policy's own
windows is a poor guide: its fixed part swings with the few large windows).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from gateway.engines.embedded import EmbeddedEngine
from gateway.kokoro.vocoder import Policy, StreamingVocoder
from gateway.kokoro.vocoder.names import CROP

RATE = 24000
FRAME = 600


@dataclass(frozen=True, slots=True)
class Call:
    kind: str  # encoder, frozen, exact (the exact vocoder), whole (the whole model)
    window: int  # generator frames computed (encoder: tokens)
    seconds: float


@dataclass(slots=True)
class Timed:
    """A session that records every ``run`` into ``log`` (a pass-through, not a stand-in)."""

    session: Any
    kind: str
    log: list[Call]

    def run(self, names: Any, feeds: dict[str, np.ndarray], *args: Any) -> Any:
        t0 = time.perf_counter()
        out = self.session.run(names, feeds, *args)
        seconds = time.perf_counter() - t0
        if CROP in feeds:
            lo, hi = (int(v) for v in feeds[CROP])
            window = (hi - lo) // 2
        elif self.kind == "whole":
            window = int(np.asarray(out[0]).size) // FRAME
        else:
            window = int(feeds["tokens"].shape[1]) - 2
        self.log.append(Call(self.kind, window, seconds))
        return out


@dataclass(slots=True)
class Run:
    """One path over one segment."""

    path: str
    wall_s: float  # request -> last chunk
    first_s: float  # request -> first chunk
    audio_s: float
    calls: list[Call] = field(default_factory=list)

    def seconds(self, kind: str) -> float:
        return sum(c.seconds for c in self.calls if c.kind == kind)


def instrument(engine: EmbeddedEngine, log: list[Call]) -> None:
    """Wrap every session the engine's paths call (once)."""
    model = engine.model
    if model.session is not None:  # dropped once the vocoder is built (unless a bench made it again)
        if not isinstance(model.session, Timed):
            model.session = Timed(model.session, "whole", log)
        model.session.log = log  # a later measure() records into its own log
    vocoder = engine.vocoder
    for attr, kind in (("_encoder", "encoder"), ("_exact", "exact"), ("_frozen", "frozen")):
        if not isinstance(getattr(vocoder, attr), Timed):
            setattr(vocoder, attr, Timed(getattr(vocoder, attr), kind, log))
        getattr(vocoder, attr).log = log


def previous_policy(policy: Policy) -> Policy:
    """The pacing before issue 24, for the side-by-side rows."""
    return replace(policy, sizes=(6, 8, 12, 16, 24, 32, 48), batch_rest=False)


async def one(engine: EmbeddedEngine, text: str, voice: str, mode: str, log: list[Call]) -> Run:
    log.clear()
    t0 = time.perf_counter()
    first, samples = 0.0, 0
    async for chunk in engine.synthesize(text, voice=voice, speed=1.0, vocoder=mode, buffered_s=0.0):
        if isinstance(chunk, bytes):
            first = first or time.perf_counter() - t0
            samples += len(chunk) // 2
    return Run(mode, time.perf_counter() - t0, first, samples / RATE, list(log))


async def measure(
    engine: EmbeddedEngine, segs: list[str], voice: str, reps: int, offset: int = 0
) -> list[dict[str, list[Run]]]:
    """``reps`` repetitions of every path over ``segs``; one dict path -> runs per repetition.
    The paths' order flips every repetition (``offset``: the index of the first one)."""
    log: list[Call] = []
    instrument(engine, log)
    vocoder: StreamingVocoder = engine.host.vocoder
    policies = {"frozen-first": vocoder, "frozen-first previous": vocoder.with_policy(previous_policy(vocoder.policy))}
    policies["frozen-first no batch_rest"] = vocoder.with_policy(replace(vocoder.policy, batch_rest=False))
    paths = ["exact", "frozen-first previous", "frozen-first no batch_rest", "frozen-first"]
    out = []
    for rep in range(reps):
        runs: dict[str, list[Run]] = {p: [] for p in paths}
        for seg in segs:
            for path in paths if (rep + offset) % 2 == 0 else paths[::-1]:
                engine.host.vocoder = policies.get(path, vocoder)
                run = await one(engine, seg, voice, path.split()[0], log)
                runs[path].append(replace(run, path=path))
        engine.host.vocoder = vocoder
        out.append(runs)
    return out


def breakdown(runs: Iterable[Run], g2p_s: float) -> dict[str, float]:
    """Milliseconds per part over a path's segments, and the frozen chunks' shape."""
    runs = list(runs)
    frozen = [c for r in runs for c in r.calls if c.kind == "frozen"]
    wall = sum(r.wall_s for r in runs)
    calls = {k: sum(r.seconds(k) for r in runs) for k in ("encoder", "frozen", "exact", "whole")}
    return {
        "wall": wall * 1000,
        "audio": sum(r.audio_s for r in runs),
        "g2p": g2p_s * 1000,
        **{k: v * 1000 for k, v in calls.items()},
        "other": (wall - g2p_s - sum(calls.values())) * 1000,
        "chunks": len(frozen),
        "window": sum(c.window for c in frozen),
        "model_calls": sum(len(r.calls) for r in runs),
    }


def fit(calls: list[Call]) -> tuple[float, float]:
    """Fixed ms per call and ms per frame of the frozen calls (least squares)."""
    xs = np.array([c.window for c in calls], float)
    ys = np.array([c.seconds * 1000 for c in calls])
    if len(calls) < 3 or np.ptp(xs) == 0:
        return float("nan"), float("nan")
    slope, fixed = np.polyfit(xs, ys, 1)
    return float(fixed), float(slope)


def report(reps: list[dict[str, list[Run]]], g2p_s: float, segs: list[str]) -> str:
    lines = [
        f"{'rep':>3} {'path':<22} {'wall ms':>8} {'RTF':>6} {'vs exact':>8} {'G2P':>5} {'encoder':>8} "
        f"{'frozen':>7} {'exact':>6} {'whole':>6} {'other':>6} {'chunks':>6} {'extra fr':>8}"
    ]
    ratios: dict[str, list[float]] = {}
    for i, runs in enumerate(reps):
        base = breakdown(runs["exact"], g2p_s)
        for path, path_runs in runs.items():
            b = breakdown(path_runs, g2p_s)
            rtf = b["wall"] / 1000 / b["audio"]
            ratio = rtf / (base["wall"] / 1000 / base["audio"])
            ratios.setdefault(path, []).append(ratio)
            # generator frames computed beyond the audio delivered: chunks' context, padding
            frames = sum(c.window for r in path_runs for c in r.calls if c.kind != "encoder")
            ctx = frames - b["audio"] * RATE / FRAME
            lines.append(
                f"{i + 1:>3} {path:<22} {b['wall']:>8.0f} {rtf:>6.3f} {ratio:>7.2f}x {b['g2p']:>5.0f} "
                f"{b['encoder']:>8.0f} {b['frozen']:>7.0f} {b['exact']:>6.0f} {b['whole']:>6.0f} "
                f"{b['other']:>6.0f} {b['chunks']:>6} {ctx:>8.0f}"
            )
    lines.append(
        "ratio to exact per repetition: "
        + "; ".join(
            f"{p} {', '.join(f'{r:.2f}' for r in rs)} (median {statistics.median(rs):.2f})" for p, rs in ratios.items()
        )
    )
    lines += first_audio(reps, segs)
    lines += call_costs(reps)
    return "\n".join(lines)


def first_audio(reps: list[dict[str, list[Run]]], segs: list[str]) -> list[str]:
    """First chunk of each streamed segment, per path (median over repetitions), and windows."""
    streamed = [i for i, r in enumerate(reps[0]["frozen-first"]) if any(c.kind == "frozen" for c in r.calls)]
    out = [
        "first audio of the streamed segments (median over segments and repetitions): "
        + ", ".join(
            f"{path} {statistics.median(runs[path][i].first_s for runs in reps for i in streamed) * 1000:.0f} ms"
            for path in reps[0]
        )
        if streamed
        else "no segment streamed"
    ]
    out.append(
        "per segment: first audio (ms, median over repetitions) and the vocoder windows (frames) "
        "of the last repetition:"
    )
    for i, seg in enumerate(segs):
        cells = []
        for path in reps[0]:
            firsts = [runs[path][i].first_s * 1000 for runs in reps]
            windows = [c.window for c in reps[-1][path][i].calls if c.kind in ("frozen", "exact")]
            cells.append(f"{path} {statistics.median(firsts):.0f} {windows}")
        out.append(f"  {seg[:34]!r:<37} " + " | ".join(cells))
    return out


def call_costs(reps: list[dict[str, list[Run]]]) -> list[str]:
    out = []
    for path in reps[0]:
        frozen = [c for runs in reps for r in runs[path] for c in r.calls if c.kind == "frozen"]
        if frozen:
            fixed, per = fit(frozen)
            line = (
                f"fitted {fixed:.0f} ms fixed + {per:.1f} ms a frame"
                if fixed == fixed
                else f"one window size, {statistics.median(c.seconds for c in frozen) * 1000:.0f} ms median"
            )
            out.append(f"frozen calls of {path}: {len(frozen)}, {line}")
    return out + window_costs(reps)


def window_costs(reps: list[dict[str, list[Run]]]) -> list[str]:
    """Median ms of the vocoder calls per window (frames), per path: the same window costs the
    same under either policy unless something per call (a cold shape, the other calls between)
    differs; a line fitted over different windows can differ in its fixed part without that
    (a call's cost per frame falls a little as its window grows)."""
    out = ["vocoder calls per window, median ms (count) per path; frozen, then exact:"]
    for kind in ("frozen", "exact"):
        costs: dict[str, dict[int, list[float]]] = {}
        for path in reps[0]:
            for c in (c for runs in reps for r in runs[path] for c in r.calls if c.kind == kind):
                costs.setdefault(path, {}).setdefault(c.window, []).append(c.seconds * 1000)
        for path, by_window in costs.items():
            cells = [f"{w}: {statistics.median(ms):.0f} ({len(ms)})" for w, ms in sorted(by_window.items())]
            total = sum(sum(ms) for ms in by_window.values()) / len(reps)
            out.append(f"  {kind} {path}: {total:.0f} ms a repetition; " + ", ".join(cells))
    return out


async def run(engine: EmbeddedEngine, segs: list[str], voice: str, reps: int = 3) -> str:
    t0 = time.perf_counter()
    for seg in segs:
        await engine.phonemes(seg, voice)
    g2p_s = time.perf_counter() - t0
    return report(await measure(engine, segs, voice, reps), g2p_s, segs)
