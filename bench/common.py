"""Shared pieces of the latency benchmarks: targets, timing, stats, output.

A benchmark starts a real gateway on a free loopback port (in this process, so it can also
call the engine directly: ``gateway``; as a subprocess for the container path:
``bench.procs``), talks to it with the reference clients (in a child process:
``bench.remote``), and writes ``bench-results/<name>.json`` plus PNG plots (``bench.plots``).
Everything here is measurement plumbing; the figures come from each benchmark's own runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from gateway.config import Settings, load_settings
from gateway.engines.base import Engine

from .plots import plot_bars
from .servers import serve_gateway

log = logging.getLogger(__name__)

RESULTS_DIR = Path("bench-results")
STALL_TOLERANCE_S = 0.010  # a payload this late (or less) is jitter a player's buffer absorbs


@dataclass(frozen=True, slots=True)
class Target:
    """A gateway to measure: its base URL, and in-process, its engine."""

    name: str
    url: str
    settings: Settings
    engine: Engine | None = None

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://", 1) + "/v1/stream/ws"

    @property
    def sse_url(self) -> str:
        return self.url + "/v1/stream/sse"

    @property
    def speech_url(self) -> str:
        return self.url + "/v1/audio/speech"


def bench_settings(engine: str, overrides: Sequence[str] = (), **changes: Any) -> Settings:
    """Settings for a benchmark gateway: defaults and config file, ``--set`` items, ``changes``."""
    values: dict[str, Any] = {"engine": engine, "log_level": "WARNING"}
    for item in overrides:
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set expects NAME=VALUE, got {item!r}")
        values[name.strip()] = value
    return load_settings(overrides={**values, **changes})


def add_engine_args(p: argparse.ArgumentParser, engines: str, rtfs: str) -> None:
    """The options of a benchmark run over several engines: ``--engines``, the fake engine's
    ``--rtfs`` paces, ``--set`` gateway settings and the ``--out`` folder (see ``engine_targets``)."""
    p.add_argument("--engines", default=engines, help="comma-separated: embedded, fake, ... (default: %(default)s)")
    p.add_argument("--rtfs", default=rtfs, help="fake engine paces, compute s per audio s (default: %(default)s)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="gateway setting override")
    p.add_argument("--out", type=Path, default=RESULTS_DIR, help="output folder (default: %(default)s)")


def parse_engine_args(p: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``p``'s arguments with ``--engines`` and ``--rtfs`` split into lists (``add_engine_args``)."""
    args = p.parse_args(argv)
    args.engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    args.rtfs = [float(r) for r in args.rtfs.split(",") if r.strip()]
    if not args.engines or ("fake" in args.engines and not args.rtfs):
        p.error("--engines must name an engine, and --rtfs a pace where it names fake")
    return args


def engine_targets(
    args: argparse.Namespace, fake: dict[str, Any] | None = None, **changes: Any
) -> list[tuple[str, Settings]]:
    """(name, settings) per gateway: the fake engine once per ``--rtfs`` pace (with ``fake``'s
    settings too), every other engine once; ``changes`` apply to all."""
    out: list[tuple[str, Settings]] = []
    for name in args.engines:
        if name == "fake":
            out += [
                (f"fake rtf {r:g}", bench_settings("fake", args.set, fake_rtf=r, **(fake or {}), **changes))
                for r in args.rtfs
            ]
        else:
            out.append((name, bench_settings(name, args.set, **changes)))
    return out


@contextlib.asynccontextmanager
async def gateway(settings: Settings, name: str | None = None, engine: Engine | None = None) -> AsyncIterator[Target]:
    """A real gateway in this process on a free loopback port, its engine loaded.

    Passing the ``engine`` of another running gateway shares it (one model in memory, one
    inference pool), so gateways that differ only in core settings can be measured side by
    side; the engine is closed by whichever gateway stops first, so stop them together.
    """
    from gateway.web.state import GATEWAY

    async with serve_gateway(settings, engine) as (url, app):
        yield Target(name or settings.engine, url, settings, app[GATEWAY].engine)


# -- measurements --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Batch:
    ttfb_ms: float  # request sent -> first byte of the body
    total_ms: float
    audio_bytes: int


async def post_speech(
    http: aiohttp.ClientSession, url: str, text: str, t0: float | None = None, **fields: Any
) -> Batch:
    """``POST /v1/audio/speech`` (the batch baseline: ``stream: false``, since the route
    streams by default), timed from ``t0`` (default: now)."""
    t0 = time.perf_counter() if t0 is None else t0
    # each run synthesizes afresh
    body = {"model": "kokoro", "input": text, "cache": False, "stream": False, **fields}
    async with http.post(url, json=body) as resp:
        if resp.status != 200:
            raise RuntimeError(f"POST {url} -> {resp.status}: {await resp.text()}")
        first = await resp.content.readany()
        t_first = time.perf_counter()
        rest = await resp.read()
    return Batch((t_first - t0) * 1000, (time.perf_counter() - t0) * 1000, len(first) + len(rest))


@dataclass(frozen=True, slots=True)
class Stats:
    n: int
    mean: float
    median: float
    p90: float
    min: float
    max: float


def stats(values: Sequence[float]) -> Stats:
    if not values:
        raise ValueError("no values to summarize")
    a = np.asarray(values, float)
    return Stats(
        len(a),
        round(float(a.mean()), 1),
        round(float(np.median(a)), 1),
        round(float(np.percentile(a, 90)), 1),
        round(float(a.min()), 1),
        round(float(a.max()), 1),
    )


def improvement(batch: Stats, other: Stats) -> dict[str, float]:
    """How much ``other`` cuts ``batch``: percent (of the mean) and as a factor, mean and median."""
    return {
        "mean_pct": round((other.mean - batch.mean) / batch.mean * 100, 1),
        "speedup_mean": round(batch.mean / other.mean, 2),
        "speedup_median": round(batch.median / other.median, 2),
        "ratio_mean": round(other.mean / batch.mean, 3),
    }


def playback(
    arrivals_s: Sequence[float], durations_s: Sequence[float], tolerance_s: float = STALL_TOLERANCE_S
) -> dict[str, Any]:
    """Play payloads as they arrive, from the first one on: where would playback stall?

    A player starts at the first payload and plays each in turn; a payload that arrives after
    everything before it has been played (by more than ``tolerance_s``) is a stall, and play
    resumes when it arrives. Times are seconds on one clock.
    """
    if not arrivals_s:
        return {"stalls": 0, "stall_ms": 0.0, "intervals": [], "gaps": []}
    end = arrivals_s[0]
    intervals: list[tuple[float, float]] = []
    gaps: list[tuple[float, float]] = []
    for t, d in zip(arrivals_s, durations_s):
        if t > end + tolerance_s:
            gaps.append((end, t))
        start = max(t, end)
        end = start + d
        if intervals and start <= intervals[-1][1] + 1e-9:
            intervals[-1] = (intervals[-1][0], end)
        else:
            intervals.append((start, end))
    stall_ms = sum(b - a for a, b in gaps) * 1000
    return {"stalls": len(gaps), "stall_ms": round(stall_ms, 1), "intervals": intervals, "gaps": gaps}


def mp3_seconds(payload: bytes, bitrate_kbps: int) -> float:
    """Seconds of audio in constant-bitrate MP3 bytes (64 kbps at 24 kHz: 192 bytes = 24 ms)."""
    return len(payload) * 8 / (bitrate_kbps * 1000)


Probe = Callable[[aiohttp.ClientSession, str], Awaitable[dict[str, Any]]]


async def measure(
    http: aiohttp.ClientSession,
    probes: dict[str, Probe],
    inputs: Sequence[str],
    reps: int,
    warmup: str,
    label: str = "",
) -> list[dict[str, Any]]:
    """Every probe on every input, interleaved, ``reps`` times, after one uncounted warm-up each."""
    for probe in probes.values():
        await probe(http, warmup)
    runs = []
    for rep in range(reps):
        log.info("%s: repetition %d of %d (%s x %d inputs)", label, rep + 1, reps, ", ".join(probes), len(inputs))
        for i, text in enumerate(inputs):
            for name, probe in probes.items():
                runs.append({"channel": name, "rep": rep, "reply": i, **await probe(http, text)})
    return runs


def stream_run(r: Any, what: str, bitrate: int = 64) -> dict[str, Any]:
    """A streamed reply (``StreamResult``) as a run: first and last audio, playback stalls."""
    if r.error or r.ttfb_ms is None:
        raise RuntimeError(f"{what} failed: {r.error or 'no audio'}")
    arrivals = [p - r.t0 for p in r.payload_times]
    play = playback(arrivals, [mp3_seconds(p, bitrate) for p in r.payloads])
    return {
        "ttfb_ms": r.ttfb_ms,
        "total_ms": arrivals[-1] * 1000,
        "stalls": play["stalls"],
        "stall_ms": play["stall_ms"],
        "first_segment": (r.of("sentence") or [{}])[0].get("text"),
    }


def summarize(runs: list[dict[str, Any]], baseline: str = "batch") -> dict[str, Any]:
    """Stats per channel (first audio, last audio, stalls) and each one's gain over ``baseline``."""
    out: dict[str, Any] = {"channels": {}, "improvement": {}}
    for ch in dict.fromkeys(r["channel"] for r in runs):
        mine = [r for r in runs if r["channel"] == ch]
        entry: dict[str, Any] = {
            "ttfb": stats([r["ttfb_ms"] for r in mine]),
            "total": stats([r["total_ms"] for r in mine]),
        }
        if "stalls" in mine[0]:
            entry["runs_with_stalls"] = sum(1 for r in mine if r["stalls"])
            entry["stall_ms_total"] = round(sum(r["stall_ms"] for r in mine), 1)
        out["channels"][ch] = entry
    if baseline in out["channels"]:
        base = out["channels"][baseline]["ttfb"]
        for ch, entry in out["channels"].items():
            if ch != baseline:
                out["improvement"][ch] = improvement(base, entry["ttfb"])
    out["runs"] = runs
    return out


# -- output --------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    """What else was running: the CPU count and the load average when this was called."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return {"cpus": os.cpu_count(), "loadavg_1m": round(load[0], 2), "loadavg_5m": round(load[1], 2)}


@contextlib.contextmanager
def recorded(out: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Stamp a benchmark's result with the machine's load before and after, and its run time."""
    out["machine_start"] = machine()
    started = time.perf_counter()
    yield out
    out.update(machine_end=machine(), elapsed_s=round(time.perf_counter() - started, 1))


def write_json(out_dir: Path, name: str, data: dict[str, Any]) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, default=_jsonable) + "\n")
    return path


def _jsonable(value: Any) -> Any:
    if isinstance(value, Stats):
        return asdict(value)
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain aligned text table (first column left-aligned, the rest right-aligned)."""
    cells = [[_cell(v) for v in row] for row in [headers, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


def quiet_logs() -> None:
    """Keep the access log and the gateway's info lines out of a benchmark's table."""
    for name in ("aiohttp.access", "gateway"):
        logging.getLogger(name).setLevel(logging.WARNING)
    logging.getLogger(__package__).setLevel(logging.INFO)  # the benchmarks' own progress lines


def stall_cell(entry: dict[str, Any]) -> str:
    """``runs with a stall / runs (total stall time)`` for a table, or blank for batch."""
    if "runs_with_stalls" not in entry:
        return ""
    return f"{entry['runs_with_stalls']}/{entry['ttfb'].n} ({entry['stall_ms_total']:.0f} ms)"


def report(text: str) -> None:
    """A benchmark's table is its output: stdout, not the log."""
    sys.stdout.write(text.rstrip("\n") + "\n")
    sys.stdout.flush()


def publish(
    out_dir: Path, name: str, out: dict[str, Any], table_text: str, *, plot_title: str | None, groups_of: str
) -> None:
    """Write ``name``.json, the ttfb bar plot of ``out[groups_of]`` (unless ``plot_title`` is
    None), and print the table with the run's time and machine load under it."""
    write_json(out_dir, name, out)
    if plot_title is not None:
        groups = {
            n: {c: e["ttfb"] for c, e in r["channels"].items()} for n, r in out[groups_of].items() if "channels" in r
        }
        if groups:
            plot_bars(out_dir / f"{name}.png", plot_title, groups)
    m0, m1 = out["machine_start"], out["machine_end"]
    report(
        table_text + f"\n{out['elapsed_s']} s; load average {m0['loadavg_1m']} -> {m1['loadavg_1m']} "
        f"on {m0['cpus']} CPUs; results in {out_dir}/{name}.json"
    )


def run_published(
    args: argparse.Namespace,
    bench: Callable[[argparse.Namespace], Awaitable[dict[str, Any]]],
    render: Callable[[dict[str, Any]], str],
    *,
    plot_title: str | None = None,
    groups_of: str = "engines",
) -> dict[str, Any]:
    """A benchmark's ``main``: quiet logs, run ``bench(args)`` and publish it as ``out["bench"]``
    (the bar plot titled ``plot_title`` unless ``--no-plots``)."""
    quiet_logs()
    out = asyncio.run(bench(args))
    title = None if getattr(args, "no_plots", False) else plot_title
    publish(args.out, out["bench"], out, render(out), plot_title=title, groups_of=groups_of)
    return out


# -- timelines and plots -------------------------------------------------------------------


def timeline(result: Any, *, bitrate: int, first_clause_words: int, max_chars: int) -> dict[str, Any]:
    """One reply on one channel, in ms: tokens in, segments cut, synthesis, audio sent and received.

    Server times (``t_ms`` of ``text``, ``sentence`` and ``audio`` events) count from the
    server's first input of the reply; client times count from the request; on loopback the
    two clocks start within a millisecond of each other. Cut times replay the gateway's own
    segmenter over the tokens at their server times. A segment's synthesis runs from its
    ``sentence`` event to its last audio payload (the encoder's lag moves a few ms of each
    segment into the next one's first payload).
    """
    from gateway.text.segmenter import Segmenter

    events = [(k, f) for _, k, f in result.events]
    tokens = [(float(f["t_ms"]), str(f["delta"])) for k, f in events if k == "text"]
    sentences = [f for k, f in events if k == "sentence"]
    sent = [f for k, f in events if k == "audio" and "t_ms" in f]
    done = result.done or {}
    cuts: list[float] = []
    if tokens:
        seg = Segmenter(first_clause_words=first_clause_words, max_chars=max_chars)
        for t, delta in tokens:
            cuts += [t] * len(seg.feed(delta))
        cuts += [tokens[-1][0]] * len(seg.flush())
    else:
        cuts = [float(done.get("first_segment_ms") or 0.0)] * len(sentences)
    synthesis = []
    for s in sentences:
        ends = [float(a["t_ms"]) for a in sent if a.get("sentence") == s["index"]]
        synthesis.append((float(s["t_ms"]), max(ends, default=float(s["t_ms"]))))
    received = [(t - result.t0) * 1000 for t in result.payload_times]
    durations = [mp3_seconds(p, bitrate) for p in result.payloads]
    play = playback([t / 1000 for t in received], durations)
    return {
        "tokens_ms": [t for t, _ in tokens],
        "cuts_ms": cuts,
        "segments": [s["text"] for s in sentences],
        "synthesis_ms": synthesis,
        "sent_ms": [float(a["t_ms"]) for a in sent],
        "received_ms": received,
        "playing_ms": [(a * 1000, b * 1000) for a, b in play["intervals"]],
        "stall_gaps_ms": [(a * 1000, b * 1000) for a, b in play["gaps"]],
        "ttfb_ms": result.ttfb_ms,
    }
