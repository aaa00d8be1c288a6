"""The gateway's own latency: first audio on the wire minus the engine's own first audio.

For each engine (a zero-delay fake, and the embedded model), interleaved after a warm-up:
the engine alone (``engine.synthesize`` called directly, in this process, on the same engine
instance the gateway uses) and one reply on each channel, all on the same single-segment
sentences. Overhead = the channel's time to the first audio byte (client-measured) minus the
engine's time to its first audio; the target is under 5 ms at the median.

The gateway's engine is wrapped to note, on the same clock as the client, when the core
calls it and when its first audio comes back, which splits the client's time into input
(request -> engine called), engine, and output (first audio -> first byte at the client:
encoding, packetizing, queueing, sending). A second WebSocket gateway on the same engine
hands the encoder the first ``--split-ms`` of the first chunk on its own. That was the prototype
of a core change the stream core has made since (commit a2accbb: the first 100 ms of a reply is
encoded and sent first), so ``ws`` and ``ws_split`` should now agree; the row checks that.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from gateway.engines import create_engine
from gateway.engines.base import Engine
from gateway.kokoro.timestamps import WordTimes
from gateway.text.segmenter import split_text

from .common import (
    RESULTS_DIR,
    Probe,
    Target,
    bench_settings,
    gateway,
    measure,
    recorded,
    run_published,
    summarize,
    table,
)
from .remote import RemoteClient

SENTENCES = (
    "Your table is booked for seven.",
    "The train leaves from platform six at eight fifteen.",
    "Your package was delivered this afternoon and left at the front desk.",
    "Today will be sunny and warm.",
    "I found three flights that match what you asked for.",
)
TARGET_MS = 5.0


class TimedEngine:
    """Delegates to ``inner``; notes when each call starts and when its first audio returns.

    With ``split_ms`` it replays the core's own first-chunk split (a2accbb) here: the first ``split_ms`` of a
    call's first chunk is handed over on its own, and the event loop gets a turn before the
    rest and before each call starts, so the channel can send the first payload before the
    core encodes the rest of the segment or starts the next one (the core runs from one
    engine chunk to the next without yielding when the engine does not suspend).
    """

    def __init__(self, inner: Engine, split_ms: float = 0.0) -> None:
        self.inner = inner
        self.split_bytes = int(inner.sample_rate * split_ms / 1000) * 2
        self.calls: list[dict[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

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
    ) -> AsyncIterator[bytes | WordTimes]:
        if self.split_bytes:
            await asyncio.sleep(0)  # let the channel send what the last segment emitted
        call = {"t_call": time.perf_counter(), "t_first": None, "first_samples": 0}
        self.calls.append(call)
        inner = self.inner.synthesize(
            text,
            voice=voice,
            speed=speed,
            vocoder=vocoder,
            buffered_s=buffered_s,
            waiting=waiting,
            timestamps=timestamps,
        )
        async with contextlib.aclosing(inner) as chunks:
            async for pcm in chunks:
                if isinstance(pcm, WordTimes):
                    yield pcm
                    continue
                if call["t_first"] is None:
                    call.update(t_first=time.perf_counter(), first_samples=len(pcm) // 2)
                    if self.split_bytes:
                        head = pcm[: self.split_bytes] if len(pcm) > 2 * self.split_bytes else pcm
                        yield head
                        await asyncio.sleep(0)  # the first payload leaves before the rest is encoded
                        pcm = pcm[len(head) :]
                if pcm:
                    yield pcm


def engine_probe(engine: Engine) -> Probe:
    async def probe(http: aiohttp.ClientSession, text: str) -> dict[str, Any]:
        t0, first = time.perf_counter(), None
        async for _ in engine.synthesize(text, voice=engine.default_voice, speed=1.0):
            first = first or time.perf_counter()  # the rest is consumed too: no work left behind
        if first is None:
            raise RuntimeError(f"the engine produced no audio for {text!r}")
        return {"ttfb_ms": (first - t0) * 1000, "total_ms": (time.perf_counter() - t0) * 1000}

    return probe


def channel_probe(t: Target, timed: TimedEngine, channel: str, client: RemoteClient) -> Probe:
    async def probe(http: aiohttp.ClientSession, text: str) -> dict[str, Any]:
        n = len(timed.calls)
        r = await client.run(channel, t.sse_url if channel == "sse" else t.ws_url, text)
        if r.ttfb_ms is None or len(timed.calls) <= n:
            raise RuntimeError(f"{channel} gave no audio: {r.error}")
        call, arrival = timed.calls[n], r.payload_times[0]
        return {
            "ttfb_ms": r.ttfb_ms,
            "total_ms": (r.payload_times[-1] - r.t0) * 1000,
            "input_ms": (call["t_call"] - r.t0) * 1000,
            "engine_ms": (call["t_first"] - call["t_call"]) * 1000,
            "output_ms": (arrival - call["t_first"]) * 1000,
            "first_samples": call["first_samples"],
        }

    return probe


def overheads(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per channel, two estimates of the gateway's own time to first audio.

    ``overhead_ms``: the channel's median minus the engine-alone median (the definition; its
    noise is the engine's own run-to-run spread). ``in_run_ms``: the median over runs of the
    same run's input + output parts, i.e. first byte minus the engine's first audio inside
    that run, which the engine's spread does not touch.
    """
    alone = {(r["rep"], r["reply"]): r["ttfb_ms"] for r in runs if r["channel"] == "engine"}
    engine_median = statistics.median(alone.values())
    out: dict[str, Any] = {}
    for ch in dict.fromkeys(r["channel"] for r in runs if r["channel"] != "engine"):
        mine = [r for r in runs if r["channel"] == ch]
        in_run = sorted(r["input_ms"] + r["output_ms"] for r in mine)

        def med(key: str, mine: list[dict[str, Any]] = mine) -> float:
            return round(statistics.median(r[key] for r in mine), 2)

        out[ch] = {
            "overhead_ms": round(statistics.median(r["ttfb_ms"] for r in mine) - engine_median, 2),
            "in_run_ms": round(statistics.median(in_run), 2),
            "in_run_p90_ms": round(in_run[min(len(in_run) - 1, int(0.9 * len(in_run)))], 2),
            "input_ms": med("input_ms"),
            "engine_in_gateway_ms": med("engine_ms"),
            "output_ms": med("output_ms"),
            "first_chunk_s": round(statistics.median(r["first_samples"] for r in mine) / 24000, 2),
        }
        out[ch]["target_met"] = out[ch]["in_run_ms"] < TARGET_MS
    return out


async def run_engine(http: aiohttp.ClientSession, name: str, args: argparse.Namespace) -> dict[str, Any]:
    extra = {"fake_rtf": 0.0, "fake_first_delay_ms": 0.0} if name == "fake" else {}
    settings = bench_settings(name, args.set, **extra)
    texts = [s for s in SENTENCES if split_text(s, first_clause_words=settings.first_clause_words) == [s]]
    inner = create_engine(settings)
    timed, split = TimedEngine(inner), TimedEngine(inner, split_ms=args.split_ms)
    async with (
        gateway(settings, name, timed) as t,
        gateway(settings, name, split) as t_split,
        RemoteClient.start() as client,
    ):
        probes = {
            "engine": engine_probe(inner),
            "ws": channel_probe(t, timed, "ws", client),
            "sse": channel_probe(t, timed, "sse", client),
        }
        if args.split_ms:
            probes["ws_split"] = channel_probe(t_split, split, "ws", client)
        runs = await measure(http, probes, texts, args.reps, "Warming up.", name)
    result = summarize(runs, baseline="engine")
    result.update(overhead=overheads(runs), engine_rtf=settings.fake_rtf if name == "fake" else None)
    return result


def render(out: dict[str, Any]) -> str:
    rows = []
    for name, res in out["engines"].items():
        engine_med = res["channels"]["engine"]["ttfb"].median
        for ch, o in res["overhead"].items():
            rows.append(
                [
                    name,
                    ch,
                    res["channels"][ch]["ttfb"].n,
                    res["channels"][ch]["ttfb"].median,
                    engine_med,
                    f"{o['overhead_ms']:.2f}",
                    f"{o['in_run_ms']:.2f}",
                    f"{o['in_run_p90_ms']:.2f}",
                    f"{o['input_ms']:.2f}",
                    f"{o['engine_in_gateway_ms']:.2f}",
                    f"{o['output_ms']:.2f}",
                    o["first_chunk_s"],
                    "yes" if o["target_met"] else "NO",
                ]
            )
    headers = [
        "engine",
        "channel",
        "n",
        "first audio ms",
        "engine alone",
        "difference",
        "in-run",
        "in-run p90",
        "input",
        "engine in gw",
        "output",
        "1st chunk s",
        f"< {TARGET_MS:g} ms",
    ]
    return "\n".join(
        [
            table(headers, rows),
            "medians, ms. difference = first audio on the wire - engine alone; in-run = input + output of the same run "
            "(request -> engine called, engine's first audio -> first byte at the client); ws_split = the engine's "
            "first chunk's first 100 ms encoded and sent on its own, with a loop turn after it and before each "
            "segment (the core does the same since a2accbb, so ws and ws_split should agree)",
        ]
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="run_gateway.py bench overhead", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--engines", default="fake,embedded", help="comma-separated (default: %(default)s)")
    p.add_argument("--reps", type=int, default=5, help="repetitions of the sentences (default: %(default)s)")
    p.add_argument("--split-ms", type=float, default=100.0, help="prototype split of the first chunk; 0 = off")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="gateway setting override")
    p.add_argument("--out", type=Path, default=RESULTS_DIR, help="output folder (default: %(default)s)")
    p.add_argument("--no-plots", action="store_true")
    args = p.parse_args(argv)
    args.engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    if args.reps < 1 or not args.engines:
        p.error("--reps must be >= 1 and --engines non-empty")
    return args


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {
        "bench": "overhead",
        "target_ms": TARGET_MS,
        "reps": args.reps,
        "sentences": SENTENCES,
        "split_ms": args.split_ms,
        "engines": {},
    }
    with recorded(out):
        async with aiohttp.ClientSession() as http:
            for name in args.engines:
                out["engines"][name] = await run_engine(http, name, args)
    return out


def main(argv: list[str]) -> int:
    run_published(parse_args(argv), bench, render, plot_title="engine alone vs first audio byte on each channel")
    return 0
