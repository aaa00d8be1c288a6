"""Gateway capacity: how many real-time streams one gateway process holds, and what stops it.

The gateway runs in a SUBPROCESS (so the client load does not share its event loop) with the
fake engine pacing audio at real time (``fake_rtf=1.0``; ``PacedFakeEngine`` by default, which
keeps to the clock where the stock one drifts); the clients run in one or more client processes.
Per concurrency level every session opens a WebSocket, asks for a reply long enough to outlast
the level, and measures each payload's lateness::

    lateness = arrival - (first arrival + audio duration received before it)

i.e. how far behind a listener who started playing at the first payload the stream has
fallen. A level holds when every session is still streaming at the end of the window, no
session failed and p99 lateness stays under the bound (50 ms). Gateway CPU is read from
/proc over the same window, so "streams per core" is measured, not guessed. With ``--profile``
py-spy samples the gateway during the window and the hottest functions are reported.

    python -m bench.capacity --format pcm --levels 100,250,500,1000,1500
    python -m bench.capacity --format mp3 --levels 50,100,200,400 --encoders --profile
    python -m bench.capacity --relay --levels 50,100,150   # gateway -> model container
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import logging
import multiprocessing
import os
import sys
import time
from collections.abc import AsyncIterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gateway.config import Settings
from gateway.engines.fake import FakeEngine
from gateway.errors import BadRequest
from gateway.kokoro.timestamps import WordTimes

from .capacity_clients import client_worker
from .meters import busy_fraction, cpu_times, encoder_speeds, py_spy_top, raise_fd_limit
from .procs import GatewayProcess

log = logging.getLogger(__name__)

PACED_FAKE = "bench.capacity:PacedFakeEngine"

SENTENCE = "The quick brown fox jumps over the lazy dog near the quiet river bank today."
WORD_S = 0.24  # the fake engine's audio per word (180 ms tone + 60 ms gap)


@dataclass(frozen=True, slots=True)
class Level:
    """One concurrency level's figures (lateness in ms, CPU in cores)."""

    concurrency: int
    format: str
    connected: int
    streaming_at_end: int
    errors: dict[str, int]
    payloads: int
    late_p50_ms: float
    late_p99_ms: float
    late_max_ms: float
    gateway_cores: float
    upstream_cores: float | None  # the model container's, in a relay run
    client_cores: float
    machine_busy: float  # 0..1 over all cores, every process on the machine
    gateway_runqueue: float  # share of the window the gateway's loop was runnable but not running
    streams_per_core: float
    cpu_us_per_payload: float  # gateway CPU per payload delivered: steady even when starved
    holds: bool
    hot: tuple[tuple[str, float], ...] = ()


def reply_text(seconds: float) -> str:
    """A reply whose fake audio lasts at least ``seconds``."""
    words = len(SENTENCE.split())
    return " ".join([SENTENCE] * (int(seconds / (WORD_S * words)) + 1))


class PacedFakeEngine(FakeEngine):
    """The fake engine, paced against the clock rather than by summed sleeps.

    ``FakeEngine`` sleeps chunk by chunk, so each sleep's overshoot adds up (about 2 ms per
    200 ms chunk here: 100 ms behind after ten seconds), which a lateness figure would blame on
    the gateway. This one releases chunk n at ``start + audio up to n x fake_rtf``.
    Run it with ``--engine bench.capacity:PacedFakeEngine``.
    """

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._rendered: dict[tuple[str, str, float], np.ndarray] = {}

    def render(self, text: str, voice: str, speed: float) -> np.ndarray:
        # every session says the same reply: rendering tones once keeps the engine's own CPU
        # out of a figure that is about the gateway
        key = (text, voice, speed)
        if key not in self._rendered:
            self._rendered[key] = super().render(text, voice, speed)
        return self._rendered[key]

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
        rtf = self.settings.fake_rtf
        if not rtf:  # paced below: no word times (optional per segment), as a proxy engine without them
            async for chunk in super().synthesize(text, voice=voice, speed=speed, timestamps=timestamps):
                yield chunk
            return
        if voice not in {v.id for v in self.voices}:
            raise BadRequest(f"unknown voice {voice!r}", code="unknown_voice")
        loop = asyncio.get_running_loop()
        started = loop.time()
        pcm = self.render(text, voice, speed)
        step = max(1, int(self.sample_rate * self.settings.fake_chunk_ms / 1000))
        for start in range(0, len(pcm), step):
            chunk = pcm[start : start + step]
            due = started + (start + len(chunk)) / self.sample_rate * rtf
            await asyncio.sleep(max(0.0, due - loop.time()))
            yield chunk.tobytes()


# -- the orchestrator ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Plan:
    fmt: str = "pcm"
    window_s: float = 15.0
    settle_s: float = 2.0
    ramp_per_s: float = 250.0
    client_procs: int = 1
    bound_ms: float = 50.0
    profile: bool = False
    engine: str = PACED_FAKE  # "fake" measures the stock engine, drift and all
    uvloop: bool = False  # run the gateway on uvloop
    relay: bool = False  # the engine runs in a model container; the gateway relays its audio
    workers: int = 1  # gateway processes on the port (its `workers` setting); CPU summed over them


async def run_level(
    gw: GatewayProcess, upstream: GatewayProcess | None, pool: ProcessPoolExecutor, n: int, plan: Plan
) -> Level:
    loop = asyncio.get_running_loop()
    ramp_s = max(1.0, n / plan.ramp_per_s)
    start_at = time.monotonic() + 0.5
    window = (start_at + ramp_s + plan.settle_s, start_at + ramp_s + plan.settle_s + plan.window_s)
    text = reply_text(window[1] - start_at + 5.0)
    shares = [n // plan.client_procs + (k < n % plan.client_procs) for k in range(plan.client_procs)]
    futures = [
        loop.run_in_executor(pool, client_worker, gw.ws_url, share, plan.fmt, text, start_at, ramp_s, window)
        for share in shares
        if share
    ]
    await asyncio.sleep(max(0.0, window[0] - time.monotonic()))
    meters = [p for p in (gw, upstream) if p is not None]
    cpu0, busy0, wait0 = [p.cpu_seconds() for p in meters], cpu_times(), gw.runqueue_seconds()
    spy = (
        asyncio.create_task(py_spy_top(gw.pid, plan.window_s - 1.0, subprocesses=plan.workers > 1))
        if plan.profile
        else None
    )
    await asyncio.sleep(max(0.0, window[1] - time.monotonic()))
    cores = [(p.cpu_seconds() - c) / plan.window_s for p, c in zip(meters, cpu0)]
    waiting = (gw.runqueue_seconds() - wait0) / plan.window_s
    busy = busy_fraction(busy0, cpu_times())
    parts = await asyncio.gather(*futures)
    late = np.array([x for p in parts for x in p["late"]]) * 1000
    errors: collections.Counter[str] = collections.Counter()
    for p in parts:
        errors.update(p["errors"])
    streaming = sum(p["streaming"] for p in parts)
    audio = sum(p["audio_s"] for p in parts)
    p50, p99, worst = np.percentile(late, [50, 99, 100]) if late.size else (float("nan"),) * 3
    return Level(
        concurrency=n,
        format=plan.fmt,
        connected=sum(p["connected"] for p in parts),
        streaming_at_end=streaming,
        errors=dict(errors),
        payloads=int(late.size),
        late_p50_ms=round(float(p50), 1),
        late_p99_ms=round(float(p99), 1),
        late_max_ms=round(float(worst), 1),
        gateway_cores=round(cores[0], 3),
        upstream_cores=round(cores[1], 3) if upstream else None,
        client_cores=round(sum(p["client_cpu_s"] for p in parts) / (window[1] - start_at), 3),
        machine_busy=round(busy, 3),
        gateway_runqueue=round(waiting, 3),
        # audio seconds delivered per gateway CPU second: real-time streams one core could carry,
        # a figure that holds even when the gateway was starved of CPU and fell behind
        streams_per_core=round(audio / (cores[0] * plan.window_s), 1) if cores[0] else 0.0,
        cpu_us_per_payload=round(cores[0] * plan.window_s / late.size * 1e6, 1) if late.size else 0.0,
        holds=bool(streaming == n and not errors and late.size and p99 < plan.bound_ms),
        hot=tuple(await spy) if spy else (),
    )


def gateway_settings(fmt: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Settings for a capacity gateway: real-time fake engine, no admission cap in the way."""
    return {
        "fake_rtf": "1.0",
        "default_format": fmt,
        "log_level": "WARNING",
        "max_active_sessions": "100000",
        "max_queued_sessions": "0",
        "max_sessions_per_client": "0",
        **(extra or {}),
    }


def relay_settings(url: str, sessions: int) -> dict[str, str]:
    """The gateway's container engine for a relay run. Every session says the same sentence
    over and over, so the container must synthesize each segment it is sent (``cache``): a
    shared or cached one arrives at once and the session ends long before the window does.
    The pool is sized to the sessions: it is the engine's ``max_concurrency``, which the
    real-time budget counts as the container's real-time streams (4 would refuse the 5th)."""
    return {"container_url": url, "container_cache": "false", "container_pool_size": str(max(4, sessions))}


async def sweep(
    levels: list[int], plan: Plan, *, settings: dict[str, str] | None = None, stop_on_break: bool = True
) -> list[Level]:
    """Run ``levels`` against one fresh gateway subprocess; stop after the first that breaks."""
    raise_fd_limit()
    results: list[Level] = []
    ctx = multiprocessing.get_context("spawn")  # never fork a process with a running event loop
    with ProcessPoolExecutor(plan.client_procs, mp_context=ctx) as pool:
        list(pool.map(raise_fd_limit, range(plan.client_procs)))  # warm the workers up
        async with contextlib.AsyncExitStack() as stack:
            engine, extra, upstream = plan.engine, dict(settings or {}), None
            if plan.relay:  # gateway -> container engine -> model container running the paced fake
                upstream = await stack.enter_async_context(
                    GatewayProcess(plan.engine, {"fake_rtf": "1.0", "log_level": "WARNING"}, command="container")
                )
                engine, extra = "container", {**relay_settings(upstream.ws_url, max(levels)), **extra}
            gw = await stack.enter_async_context(
                GatewayProcess(
                    engine, gateway_settings(plan.fmt, {"workers": str(plan.workers), **extra}), uvloop=plan.uvloop
                )
            )
            for n in levels:
                level = await run_level(gw, upstream, pool, n, plan)
                log.info("%s", _row(level))
                results.append(level)
                await asyncio.sleep(2.0)  # let the gateway close the last level's sessions
                if stop_on_break and not level.holds:
                    break
    return results


def _row(r: Level) -> str:
    errs = ",".join(f"{k}:{v}" for k, v in r.errors.items()) or "-"
    return (
        f"{r.format:>4} {r.concurrency:>6} {r.streaming_at_end:>6} {r.late_p50_ms:>8.1f} {r.late_p99_ms:>8.1f} "
        f"{r.late_max_ms:>8.1f} {r.gateway_cores:>6.2f} {r.gateway_runqueue:>6.2f} "
        f"{'-' if r.upstream_cores is None else format(r.upstream_cores, '.2f'):>6} "
        f"{r.client_cores:>6.2f} {r.machine_busy:>5.0%} "
        f"{r.streams_per_core:>8.1f} {'yes' if r.holds else 'NO':>5} {errs}"
    )


HEADER = (
    f"{'fmt':>4} {'conc':>6} {'live':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
    f"{'gw cpu':>6} {'gw rq':>6} {'up cpu':>6} "
    f"{'client':>6} {'box':>5} {'str/core':>8} {'holds':>5} errors"
)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="capacity", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--format", default="pcm", choices=("pcm", "mp3"))
    parser.add_argument("--levels", default="100,250,500,1000,1500")
    parser.add_argument("--window", type=float, default=15.0, help="measured seconds per level")
    parser.add_argument("--client-procs", type=int, default=1)
    parser.add_argument("--bound-ms", type=float, default=50.0, help="p99 lateness bound")
    parser.add_argument("--ramp", type=float, default=250.0, help="new sessions per second")
    parser.add_argument("--profile", action="store_true", help="py-spy the gateway during each window")
    parser.add_argument("--all", action="store_true", help="run every level even after one breaks")
    parser.add_argument("--encoders", action="store_true", help="also time the MP3 encoders alone")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="gateway setting")
    parser.add_argument("--engine", default=PACED_FAKE, help="fake: the stock (drifting) fake engine")
    parser.add_argument("--uvloop", action="store_true", help="run the gateway on uvloop")
    parser.add_argument("--relay", action="store_true", help="engine in a model container; the gateway relays")
    parser.add_argument("--workers", type=int, default=1, help="gateway worker processes (0: one per core)")
    parser.add_argument("--out", default="", help="write the results as JSON here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    plan = Plan(
        fmt=args.format,
        window_s=args.window,
        client_procs=args.client_procs,
        bound_ms=args.bound_ms,
        ramp_per_s=args.ramp,
        profile=args.profile,
        engine=args.engine,
        uvloop=args.uvloop,
        relay=args.relay,
        workers=args.workers,
    )
    extra = dict(item.split("=", 1) for item in args.set)
    log.info("%s", HEADER)
    levels = asyncio.run(
        sweep([int(x) for x in args.levels.split(",")], plan, settings=extra, stop_on_break=not args.all)
    )
    report: dict[str, Any] = {
        "plan": asdict(plan),
        "levels": [asdict(x) for x in levels],
        "load_average": os.getloadavg(),
        "cpus": os.cpu_count(),
    }
    if args.encoders:
        report["encoders"] = encoder_speeds()
        log.info("encoders alone (x real time on one core): %s", report["encoders"])
    for level in levels:
        for name, share in level.hot[:8]:
            log.info("  %5d hot %5.1f%% %s", level.concurrency, share * 100, name)
    held = [x.concurrency for x in levels if x.holds]
    log.info("highest level held: %s", max(held) if held else "none")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2))
    return 0 if held else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
