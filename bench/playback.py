"""Playback as a listener hears it: a real-time player that honours the server's ``preroll_ms``.

``run_gateway.py bench playback`` speaks one agent-like reply (``--text``; 4-5 sentences) as
PCM and replays each session's arrivals through a simulated player (``player.py``): it starts
once the audio it holds reaches the preroll in force (the latest ``preroll_ms`` of ``ready`` or
a ``sentence`` event; a server without the field counts as 0), or at ``done`` if it never gets
there; it plays in real time; when it runs dry it waits until it holds the preroll in force
again. Per session: first audio, playback start, stalls after the start (count and time),
audio length, end of playback, all from the request.

Engines: the embedded model (default settings) and the fake engine paced at each ``--rtfs``
value. Scenarios per engine, interleaved in every repetition after one uncounted warm-up:

* one channel: one WebSocket session;
* both channels: one SSE and one WebSocket session with the same text, started together
  (identical segments may share one synthesis on the server: this scenario sends
  ``cache: true``, every other session and batch request ``cache: false``; the gateways run
  with ``cache_mb=0`` so a repetition shares a live synthesis rather than replaying the last;
  the server's hit/join/miss counts for the scenario are recorded);
* busy core: one WebSocket session while a ``while True: pass`` process keeps a core busy;
* batch: ``POST /v1/audio/speech`` of the same text (time to the whole response), idle and
  under the busy core; ``start/batch`` compares each session's playback start with it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from gateway.config import Settings

from .common import (
    Target,
    add_engine_args,
    engine_targets,
    gateway,
    machine,
    parse_engine_args,
    post_speech,
    publish,
    quiet_logs,
    table,
)
from .player import SAMPLE_RATE, session_run
from .plots import pyplot
from .remote import RemoteClient

TEXT = (
    "Sure, I can help with that. I found two flights to Denver on Friday that fit your schedule. "
    "The first leaves at seven in the morning and lands just after nine, with a window seat still open. "
    "The second leaves at noon and costs forty dollars less. Would you like me to book one of them?"
)
WARMUP = "Hi there, warming up. Not counted."
SCENARIOS = ("one channel", "both channels", "busy core")
HUB_METRIC = "tts_synthesis_cache_total"  # segments by outcome: hit, join (shared a synthesis), miss

log = logging.getLogger(__name__)


# -- sessions and scenarios ------------------------------------------------------------------


@contextlib.asynccontextmanager
async def busy_core() -> AsyncIterator[None]:
    """Another process that keeps one core busy until the block ends."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        await asyncio.sleep(0.3)  # let it get going
        yield
    finally:
        proc.kill()
        await asyncio.to_thread(proc.wait)


async def batch(http: aiohttp.ClientSession, t: Target, text: str, fields: dict[str, Any]) -> dict[str, Any]:
    b = await post_speech(http, t.speech_url, text, response_format="pcm", **fields)
    return {"channel": "batch", "batch_ms": round(b.total_ms, 1), "audio_s": round(b.audio_bytes / 2 / SAMPLE_RATE, 3)}


async def session(client: RemoteClient, t: Target, channel: str, text: str, fields: dict[str, Any]) -> dict[str, Any]:
    r = await client.run(channel, t.sse_url if channel == "sse" else t.ws_url, text, {"format": "pcm", **fields})
    return {"channel": channel, **session_run(r)}


async def one_rep(
    http: aiohttp.ClientSession, clients: Sequence[RemoteClient], t: Target, text: str
) -> list[dict[str, Any]]:
    """Every scenario once on ``t``; each session's start is compared with the batch of its condition."""
    fresh = {"cache": False}
    idle = await batch(http, t, text, fresh)
    runs = [
        {"scenario": "one channel", **idle},
        {"scenario": "one channel", **await session(clients[0], t, "ws", text, fresh)},
    ]
    before = await hub_counts(http, t)
    shared = {"cache": True}  # the two sessions may share each segment's synthesis
    both = await asyncio.gather(session(clients[1], t, "sse", text, shared), session(clients[0], t, "ws", text, shared))
    after = await hub_counts(http, t)
    segments = {k: after[k] - before.get(k, 0) for k in after}
    runs += [{"scenario": "both channels", **r, "hub": segments} for r in both]
    async with busy_core():
        loaded = [await session(clients[0], t, "ws", text, fresh), await batch(http, t, text, fresh)]
    runs += [{"scenario": "busy core", **r} for r in loaded]
    for r in runs:
        base = loaded[1] if r["scenario"] == "busy core" else idle
        if r["channel"] != "batch" and r["start_ms"] is not None:
            r["start_vs_batch"] = round(r["start_ms"] / base["batch_ms"], 3)
    return runs


async def hub_counts(http: aiohttp.ClientSession, t: Target) -> dict[str, int]:
    """Segments the server's synthesis hub served so far, by outcome (hit, join, miss); {} if
    the server does not count them."""
    async with http.get(t.url + "/metrics") as resp:
        text = await resp.text()
    counts = {}
    for line in text.splitlines():
        if line.startswith(HUB_METRIC + "{"):
            outcome = line.split('outcome="', 1)[1].split('"', 1)[0]
            counts[outcome] = int(float(line.rsplit(" ", 1)[1]))
    return counts


def targets(args: argparse.Namespace) -> list[tuple[str, Any]]:
    """(name, settings) per gateway. The segment cache is off (``cache_mb=0``) where the server
    has one, so that a repetition of 'both channels' shares a live synthesis instead of
    replaying the last one; sessions that share still join each other's synthesis."""
    has_cache = "cache_mb" in {f.name for f in dataclasses.fields(Settings)}
    no_cache: dict[str, Any] = {"cache_mb": 0.0} if has_cache else {}
    return engine_targets(args, **no_cache)


async def start_gateways(
    http: aiohttp.ClientSession, stack: contextlib.AsyncExitStack, args: argparse.Namespace
) -> list[Target]:
    """A gateway per engine, kept open by ``stack`` (the embedded one once its vocoder is built)."""
    from .ttfb import vocoder_ready

    gws = []
    for name, settings in targets(args):
        t = await stack.enter_async_context(gateway(settings, name))
        if settings.engine == "embedded" and not await vocoder_ready(http, t):
            log.warning("%s: the vocoder is not streaming inside sentences (off or failed)", name)
        gws.append(t)
    return gws


# -- summary, table, plot ------------------------------------------------------------------


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Means per (engine, scenario, channel); stalls and stall time are per session."""
    rows = []
    keys = dict.fromkeys((r["engine"], r["scenario"], r["channel"]) for r in runs)
    for engine, scenario, channel in keys:
        mine = [r for r in runs if (r["engine"], r["scenario"], r["channel"]) == (engine, scenario, channel)]
        mean = lambda k, mine=mine: _mean([r.get(k) for r in mine])  # noqa: E731
        row = {"engine": engine, "scenario": scenario, "channel": channel, "n": len(mine), "audio_s": mean("audio_s")}
        if channel == "batch":
            row["batch_ms"] = mean("batch_ms")
        else:
            row.update(
                first_audio_ms=mean("first_audio_ms"),
                start_ms=mean("start_ms"),
                end_ms=mean("end_ms"),
                oracle_ms=mean("oracle_ms"),  # the bar: start <= 1.3 x oracle + 300 ms, every session
                within_bar=all(r["start_ms"] <= 1.3 * r["oracle_ms"] + 300 for r in mine),
                start_vs_batch=round(float(np.mean([r["start_vs_batch"] for r in mine])), 3),
                stalls=mean("stalls"),
                stall_ms=mean("stall_ms"),
                preroll_ms_max=max((max(r["preroll_ms"], default=0) for r in mine), default=0),
            )
        rows.append(row)
    return rows


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(float(np.mean(known)), 3) if known else None


def render(out: dict[str, Any]) -> str:
    headers = [
        "engine",
        "scenario",
        "channel",
        "n",
        "first audio ms",
        "playback start ms",
        "oracle ms",
        "<= 1.3x+0.3s",
        "start/batch",
        "stalls",
        "stall ms",
        "audio s",
        "end s",
        "max preroll ms",
    ]
    cells = []
    for r in out["rows"]:
        if r["channel"] == "batch":
            cells.append(
                [
                    r["engine"],
                    r["scenario"],
                    "batch",
                    r["n"],
                    "",
                    f"{r['batch_ms']:.0f}",
                    "",
                    "",
                    "1.00",
                    "",
                    "",
                    f"{r['audio_s']:.2f}",
                    "",
                    "",
                ]
            )
        else:
            cells.append(
                [
                    r["engine"],
                    r["scenario"],
                    r["channel"],
                    r["n"],
                    f"{r['first_audio_ms']:.0f}",
                    f"{r['start_ms']:.0f}",
                    f"{r['oracle_ms']:.0f}",
                    "yes" if r["within_bar"] else "no",
                    f"{r['start_vs_batch']:.2f}",
                    f"{r['stalls']:.1f}",
                    f"{r['stall_ms']:.0f}",
                    f"{r['audio_s']:.2f}",
                    f"{r['end_ms'] / 1000:.2f}",
                    r["preroll_ms_max"],
                ]
            )
    shared = [
        f"{r['engine']} {r['rep'] + 1}: {r['hub']}"
        for r in out["runs"]
        if r["scenario"] == "both channels" and r["channel"] == "ws" and r.get("hub")
    ]
    if shared:
        note = "\nboth channels, segments by outcome (join = shared a synthesis in flight): " + "; ".join(shared)
    else:
        note = "\nboth channels: the server reports no shared synthesis counts"
    note += (
        ""
        if out["preroll_seen"]
        else "\nno preroll_ms from the server (counted as 0): the player started at the first payload"
    )
    return (
        table(headers, cells) + "\nstalls, stall ms: per session, mean (every time the player ran dry after "
        "it started, no tolerance)\noracle: the earliest start the arrivals allowed without a stall (the latest "
        "over payloads of arrival minus the audio before it)\nstart/batch: playback start over the batch time of "
        "the same text under "
        "the same load; a batch row's start is its whole response" + note
    )


def plot(path: Path, out: dict[str, Any]) -> None:
    """Playback start (x) against stall time (y), in seconds: a panel per engine, a colour per
    scenario, a marker per channel, a point per session; grey lines: the batch time."""
    plt = pyplot()
    engines = list(dict.fromkeys(r["engine"] for r in out["runs"]))
    fig, axes = plt.subplots(1, len(engines), figsize=(4.2 * len(engines), 4.0), squeeze=False)
    for ax, engine in zip(axes[0], engines):
        mine = [r for r in out["runs"] if r["engine"] == engine]
        for scenario, channel in dict.fromkeys((r["scenario"], r["channel"]) for r in mine):
            same = [r for r in mine if (r["scenario"], r["channel"]) == (scenario, channel)]
            if channel == "batch":
                ax.axvline(
                    float(np.mean([r["batch_ms"] for r in same])) / 1000,
                    color="0.5",
                    lw=1,
                    ls="--" if scenario == "busy core" else "-",
                    label=f"batch ({scenario})",
                )
            else:
                ax.plot(
                    [r["start_ms"] / 1000 for r in same],
                    [r["stall_ms"] / 1000 for r in same],
                    "o" if channel == "ws" else "s",
                    color=f"C{SCENARIOS.index(scenario)}",
                    ls="",
                    alpha=0.75,
                    label=f"{scenario}, {channel}",
                )
        xmax = max(r.get("start_ms") or r.get("batch_ms") or 0 for r in mine) / 1000 or 1.0
        ymax = max(0.1, *(r.get("stall_ms", 0) / 1000 for r in mine))
        ax.set_xlim(-0.04 * xmax, 1.08 * xmax)
        ax.set_ylim(-0.06 * ymax, 1.1 * ymax)
        ax.set_title(engine, fontsize=10)
        ax.set_xlabel("playback start (s from the request)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("stall time after the start (s)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8)
    fig.suptitle("playback honouring preroll_ms: start against stalls (PCM, simulated real-time player)")
    fig.tight_layout(rect=(0, 0.14, 1, 1))  # room for the legend below the panels
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- command line --------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="run_gateway.py bench playback", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_engine_args(p, engines="embedded,fake", rtfs="0.3,0.9,1.3")
    p.add_argument("--reps", type=int, default=2, help="repetitions, interleaved (default: %(default)s)")
    p.add_argument("--text", default=TEXT, help="the reply to speak (default: a 5-sentence agent reply)")
    p.add_argument("--no-plots", action="store_true")
    args = parse_engine_args(p, argv)
    if args.reps < 1 or not args.text.strip():
        p.error("--reps must be >= 1, --text non-empty")
    return args


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"bench": "playback", "text": args.text, "reps": args.reps, "machine_start": machine()}
    began = time.perf_counter()
    runs: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as http, contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(RemoteClient.start()) for _ in range(2)]
        gws = await start_gateways(http, stack, args)
        out["engines"] = {
            t.name: {"engine": t.settings.engine, "fake_rtf": t.settings.fake_rtf}
            if t.settings.engine == "fake"
            else {"engine": t.settings.engine}
            for t in gws
        }
        for t in gws:  # warm-up, not counted
            await session(clients[0], t, "ws", WARMUP, {"cache": False})
            await batch(http, t, WARMUP, {"cache": False})
        for rep in range(args.reps):
            for t in gws:
                log.info("repetition %d of %d: %s", rep + 1, args.reps, t.name)
                runs += [{"engine": t.name, "rep": rep, **r} for r in await one_rep(http, clients, t, args.text)]
    out.update(
        runs=runs,
        rows=summarize(runs),
        preroll_seen=any(r.get("preroll_ms") for r in runs),
        machine_end=machine(),
        elapsed_s=round(time.perf_counter() - began, 1),
    )
    return out


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    quiet_logs()
    out = asyncio.run(bench(args))
    if not args.no_plots:
        plot(args.out / "playback.png", out)
    publish(args.out, "playback", out, render(out), plot_title=None, groups_of="engines")
    return 0
