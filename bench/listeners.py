"""How many listeners one engine serves gaplessly: ``run_gateway.py bench listeners``.

For N = 1, 2, 3, ... (``--max-n``), N listeners start at once, each a reply of its own
(a paragraph of two corpus replies, about 12-20 s of audio; ``cache: false``), on one
gateway and its one engine; each is played by a simulated real-time player that honours
``preroll_ms`` (``player.py``). Per N: how many were admitted at once, queued (``ready``
carried ``queued_ms`` > 0) or refused (``overloaded``); stalls and stall time of the admitted;
each one's playback start against its oracle start (the earliest start its arrivals allowed
without a stall: ``gateway.core.schedule.oracle_start``), and the issue's bar, start <= 1.3 x
oracle + 300 ms. Capacity: the largest N at which every admitted listener played gaplessly
and none was refused. Beside it, 1 / RTF: the engine rate (``/readyz``) says how many
real-time listeners its compute could feed at most.

Engines: the fake engine computing one call at a time (``fake_workers=1``) at each ``--rtfs``
pace, and the embedded model. Sessions use the SSE channel by default (``--channel``): its
request carries the whole text, so admission forecasts the real reply (the reference WebSocket
client sends its text after ``ready``: a nominal reply is forecast).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import time
from typing import Any

import aiohttp

from gateway.core.schedule import oracle_start

from .common import (
    Target,
    add_engine_args,
    engine_targets,
    gateway,
    machine,
    parse_engine_args,
    run_published,
    table,
)
from .corpus import REPLIES
from .player import arrivals_of, simulate
from .remote import RemoteClient

log = logging.getLogger(__name__)
WARMUP = "Warming up, not counted. The engine's speed is measured on these two sentences."
BAR_FACTOR, BAR_S = 1.3, 0.3  # the issue's goal: start at most 1.3 x the oracle + 300 ms


def paragraph(k: int) -> str:
    """Listener ``k``'s reply: two corpus replies, no two listeners alike."""
    n = len(REPLIES)
    return f"{REPLIES[k % n]} {REPLIES[(k * 3 + 1) % n]}"


def listener_row(r: Any) -> dict[str, Any]:
    """One listener's outcome: refused, or played (start, oracle, stalls), queued or not."""
    error = r.error
    if error is not None and not r.payloads:
        return {
            "outcome": "refused" if error.get("code") == "overloaded" else f"error {error.get('code')}",
            "retry_after": error.get("retry_after"),
        }
    arrivals = arrivals_of(r)
    played = simulate(arrivals)
    oracle = oracle_start([(a.t_s, a.audio_s) for a in arrivals if a.audio_s > 0])
    ready = r.of("ready")[0] if r.of("ready") else {}
    queued = float(ready.get("queued_ms") or 0)
    return {
        "outcome": "queued" if queued > 0 else "admitted",
        "queued_ms": queued,
        "start_forecast_ms": ready.get("start_forecast_ms"),
        "preroll_ms": ready.get("preroll_ms"),
        "prerolls_ms": [a.preroll_s * 1000 for a in arrivals if a.preroll_s is not None][1:],  # the sentences'
        "start_in_ms": [round(a.start_in_s * 1000) for a in arrivals if a.start_in_s is not None],
        "first_audio_s": played.first_audio_s,
        "start_s": played.start_s,
        "oracle_s": round(oracle, 3),
        "stalls": played.stalls,
        "stall_s": round(played.stall_s, 3),
        "audio_s": round(played.audio_s, 3),
        "within_bar": played.start_s is not None and played.start_s <= BAR_FACTOR * oracle + BAR_S,
    }


async def one_n(clients: list[RemoteClient], t: Target, n: int, channel: str) -> list[dict[str, Any]]:
    url = t.ws_url if channel == "ws" else t.sse_url
    runs = await asyncio.gather(*(clients[k].run(channel, url, paragraph(k), {"format": "pcm"}) for k in range(n)))
    return [{"listener": k, **listener_row(r)} for k, r in enumerate(runs)]


async def live_rtf(http: aiohttp.ClientSession, t: Target) -> float | None:
    async with http.get(t.url + "/readyz") as resp:
        speed = (await resp.json()).get("speed") or {}
    rtfs = [v["rtf"] for k, v in speed.items() if isinstance(v, dict) and "rtf" in v]
    return max(rtfs) if rtfs else None


def summarize(n: int, rows: list[dict[str, Any]]) -> dict[str, Any]:
    played = [r for r in rows if r["outcome"] in ("admitted", "queued")]
    ratios = [r["start_s"] / r["oracle_s"] for r in played if r["start_s"] is not None and r["oracle_s"] > 0]
    return {
        "n": n,
        "admitted": sum(r["outcome"] == "admitted" for r in rows),
        "queued": sum(r["outcome"] == "queued" for r in rows),
        "refused": sum(r["outcome"] == "refused" for r in rows),
        "errors": sum(r["outcome"].startswith("error") for r in rows),
        "stalls": sum(r["stalls"] for r in played),
        "stall_s": round(sum(r["stall_s"] for r in played), 3),
        "starts_s": [round(r["start_s"], 2) for r in played if r["start_s"] is not None],
        "oracles_s": [round(r["oracle_s"], 2) for r in played],
        "max_start_vs_oracle": round(max(ratios), 2) if ratios else None,
        "within_bar": all(r["within_bar"] for r in played),
        "gapless": bool(played)
        and all(r["stalls"] == 0 for r in played)
        and not any(r["outcome"] == "refused" for r in rows),
    }


async def run_engine(
    http: aiohttp.ClientSession, clients: list[RemoteClient], name: str, settings: Any, args: argparse.Namespace
) -> dict[str, Any]:
    async with gateway(settings, name) as t:
        if settings.engine == "embedded":
            from .ttfb import vocoder_ready

            await vocoder_ready(http, t)
        await clients[0].run(args.channel, t.ws_url if args.channel == "ws" else t.sse_url, WARMUP, {"format": "pcm"})
        per_n = []
        for n in range(1, args.max_n + 1):
            log.info("%s: %d listener(s)", name, n)
            rows = await one_n(clients, t, n, args.channel)
            per_n.append({**summarize(n, rows), "listeners": rows})
            await asyncio.sleep(0.5)  # the engine idle again between rounds
        rtf = await live_rtf(http, t)
    capacity = max((r["n"] for r in per_n if r["gapless"]), default=0)
    return {
        "engine": name,
        "rtf": rtf,
        "one_over_rtf": round(1 / rtf, 2) if rtf else None,
        "capacity": capacity,
        "per_n": per_n,
    }


def targets(args: argparse.Namespace) -> list[tuple[str, Any]]:
    return engine_targets(args, fake={"fake_workers": 1, "fake_chunk_ms": 100}, cache_mb=0.0)


def render(out: dict[str, Any]) -> str:
    headers = [
        "engine",
        "N",
        "admitted",
        "queued",
        "refused",
        "stalls",
        "stall s",
        "starts s",
        "oracle s",
        "max start/oracle",
        "<= 1.3x+0.3s",
        "gapless",
    ]
    cells = []
    for e in out["engines"]:
        for r in e["per_n"]:
            cells.append(
                [
                    e["engine"],
                    r["n"],
                    r["admitted"],
                    r["queued"],
                    r["refused"] + r["errors"],
                    r["stalls"],
                    f"{r['stall_s']:.2f}",
                    " / ".join(f"{s:.1f}" for s in r["starts_s"]),
                    " / ".join(f"{s:.1f}" for s in r["oracles_s"]),
                    r["max_start_vs_oracle"] if r["max_start_vs_oracle"] is not None else "",
                    "yes" if r["within_bar"] else "no",
                    "yes" if r["gapless"] else "no",
                ]
            )
    summary = "; ".join(
        f"{e['engine']}: capacity {e['capacity']} (1/RTF {e['one_over_rtf']}, live RTF {e['rtf']})"
        for e in out["engines"]
    )
    return (
        table(headers, cells) + f"\ncapacity = the largest N with every admitted listener gapless and none "
        f"refused; 1/RTF = the most real-time listeners the engine's compute could feed\n{summary}"
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="run_gateway.py bench listeners", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_engine_args(p, engines="fake", rtfs="0.25,0.5")
    p.add_argument("--max-n", type=int, default=5, help="listeners at most (default: %(default)s)")
    p.add_argument("--channel", choices=("sse", "ws"), default="sse")
    args = parse_engine_args(p, argv)
    if args.max_n < 1:
        p.error("--max-n must be >= 1")
    return args


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"bench": "listeners", "channel": args.channel, "machine_start": machine()}
    began = time.perf_counter()
    async with aiohttp.ClientSession() as http, contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(RemoteClient.start()) for _ in range(args.max_n)]
        out["engines"] = [await run_engine(http, clients, name, settings, args) for name, settings in targets(args)]
    out.update(machine_end=machine(), elapsed_s=round(time.perf_counter() - began, 1))
    return out


def main(argv: list[str]) -> int:
    run_published(parse_args(argv), bench, render)
    return 0
