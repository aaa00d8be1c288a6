"""Embedded engine speed and memory: real-time factor by thread count, time to first audio,
where the time goes while streaming (``engine_paths``) and where the memory goes (``memory``).

Side by side in one run:

* RTF = compute seconds / seconds of (trimmed) audio, for ``intra_op_num_threads`` 1 and 2,
  over the same sentences, after a warm-up.
* Time from request to the first sentence's audio, for a short first segment ("Sure,") and
  a normal first sentence, plus whether the rest of the reply is ready before the short
  segment has finished playing (the condition for the short-first-segment trick to pay off).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import time
from dataclasses import dataclass

from gateway.config import Settings
from gateway.engines.embedded import EmbeddedEngine

SENTENCES = (
    "The weather will be sunny in the morning with light rain after lunch.",
    "Please turn left at the second light and park behind the blue van.",
    "Our new office is on the fifth floor of the tall building near the station.",
)
SHORT_FIRST = "Sure,"
NORMAL_FIRST = "Sure, I can help you book a flight to Chicago for next Tuesday morning."
REST = "I can help you book a flight to Chicago for next Tuesday morning."


@dataclass(frozen=True, slots=True)
class Timing:
    first_s: float  # request -> first PCM chunk
    total_s: float  # request -> last chunk
    audio_s: float


async def timed(engine: EmbeddedEngine, text: str, voice: str) -> Timing:
    t0 = time.perf_counter()
    first, samples = 0.0, 0
    async for chunk in engine.synthesize(text, voice=voice, speed=1.0):
        if not samples:
            first = time.perf_counter() - t0
        samples += len(chunk) // 2
    return Timing(first, time.perf_counter() - t0, samples / engine.sample_rate)


async def measure(threads: int, voice: str, repeats: int, precision: str = "int8") -> dict[str, float]:
    engine = EmbeddedEngine(Settings(embedded_threads=threads, embedded_precision=precision))
    await engine.start()
    try:
        voice = voice or engine.default_voice
        runs = [await timed(engine, s, voice) for _ in range(repeats) for s in SENTENCES]
        short = [await timed(engine, SHORT_FIRST, voice) for _ in range(repeats)]
        normal = [await timed(engine, NORMAL_FIRST, voice) for _ in range(repeats)]
        rest = [await timed(engine, REST, voice) for _ in range(repeats)]
    finally:
        await engine.aclose()
    report = engine.load_report
    return {
        "threads": threads,
        "load_s": report.total_s if report else float("nan"),
        "rtf": sum(r.total_s for r in runs) / sum(r.audio_s for r in runs),
        "short_first_s": statistics.median(r.first_s for r in short),
        "short_audio_s": statistics.median(r.audio_s for r in short),
        "normal_first_s": statistics.median(r.first_s for r in normal),
        "normal_audio_s": statistics.median(r.audio_s for r in normal),
        "rest_total_s": statistics.median(r.total_s for r in rest),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench engine", description=__doc__)
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    parser.add_argument("--voice", default="")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--precisions",
        default="int8",
        help="threads: embedded_precision values to compare, e.g. int8,int8-static (docs/STATIC_INT8.md)",
    )
    parser.add_argument(
        "--path-reps",
        type=int,
        default=3,
        help="paths: repetitions of the side-by-side profile (the spread of the ratios)",
    )
    parser.add_argument(
        "--no-service",
        action="store_true",
        help="paths: skip the in-service run (a real gateway streaming the paragraph)",
    )
    parser.add_argument(
        "--parts",
        default="threads,paths,sim,memory",
        help="which reports: threads (RTF by thread count, first audio), paths (where "
        "the time goes: bare model vs the gateway's paths vs in service), sim (the "
        "vocoder's pacing on a simulated engine at several speeds, no model), memory "
        "(RSS per part and the gateway's total)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    wanted = set(args.parts.split(","))
    if "threads" in wanted:
        print(threads_report(args))
    if "paths" in wanted:
        from .engine_paths import run as paths_report

        print(paths_report(args.voice, args.path_reps, not args.no_service))
    if "sim" in wanted:
        from .pacing_sim import run as sim_report

        print(sim_report())
    if "memory" in wanted:
        from .memory import run as memory_report

        print(memory_report())
    print(
        f"load average (1 min) at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores "
        "(above ~1, other work inflates every time figure; ratios are side by side in one run)"
    )
    return 0


def threads_report(args: argparse.Namespace) -> str:
    runs = [
        (p, asyncio.run(measure(int(t), args.voice, args.repeats, p)))
        for p in args.precisions.split(",")
        for t in args.threads.split(",")
    ]
    rows = [r for _, r in runs]
    base = rows[0]["rtf"]
    lines = [
        f"{'precision':>11} {'threads':>7} {'load s':>7} {'RTF':>6} {'vs first':>8} "
        f"{'first audio: short':>19} {'normal':>7} {'ratio':>6} {'rest ready':>11}",
    ]
    for precision, r in runs:
        # the short segment pays off only if the rest is computed while it plays
        rest_gap = r["rest_total_s"] - r["short_audio_s"]
        lines.append(
            f"{precision:>11} {r['threads']:>7} {r['load_s']:>7.2f} {r['rtf']:>6.3f} {r['rtf'] / base:>7.2f}x "
            f"{r['short_first_s']:>18.3f}s {r['normal_first_s']:>6.3f}s "
            f"{r['normal_first_s'] / r['short_first_s']:>5.2f}x "
            f"{'yes' if rest_gap <= 0 else f'+{rest_gap:.2f}s late':>11}"
        )
    lines.append(
        f"short = {SHORT_FIRST!r} ({rows[-1]['short_audio_s']:.2f} s audio); normal = the whole "
        f"first sentence ({rows[-1]['normal_audio_s']:.2f} s audio); rest ready = the rest of "
        "the sentence computed before the short segment finished playing"
    )
    return "\n".join(lines)
