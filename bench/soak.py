"""Soak: many sessions with random cancels, disconnects and bad messages for a bounded time.

    python run_gateway.py bench soak [--seconds 120] [--clients 40] [--engine fake]

Starts a gateway in a subprocess on a free loopback port, drives it, and reports sessions served,
errors, the gateway's resident memory and live asyncio tasks at the start and at the end
(scraped from its /metrics), so leaks show up as numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import re
import time
from collections import Counter
from pathlib import Path

import aiohttp

from .client import sse_stream, ws_stream
from .procs import ServerProcess

log = logging.getLogger(__name__)
TEXTS = (
    "Sure, I can help with that. Your order shipped this morning and arrives on Thursday.",
    "The meeting moved to 3:30 p.m. on Friday. Dr. Chen will join remotely. Bring the slides!",
    "Here is the plan. First, we collect the data. Then we train. Finally, we evaluate it.",
)
ACTIONS = ("complete_ws", "complete_sse", "cancel", "disconnect", "garbage", "disconnect_sse")


async def scrape(http: aiohttp.ClientSession, url: str) -> dict[str, float]:
    async with http.get(url + "/metrics") as r:
        text = await r.text()
    out = {}
    for name in ("tts_asyncio_tasks", "tts_process_rss_bytes"):
        m = re.search(rf"^{name} (\S+)$", text, re.M)
        out[name] = float(m.group(1)) if m else float("nan")
    return out


async def one_session(http: aiohttp.ClientSession, url: str, rng: random.Random) -> str:
    ws_url = url.replace("http", "ws") + "/v1/stream/ws"
    action = rng.choice(ACTIONS)
    text = rng.choice(TEXTS)
    if action == "complete_ws":
        r = await ws_stream(http, ws_url, text=text)
        return "served" if r.done else f"error:{(r.error or {}).get('code')}"
    if action == "complete_sse":
        r = await sse_stream(http, url + "/v1/stream/sse", text=text)
        return "served" if r.done else f"error:{(r.error or {}).get('code')}"
    if action == "cancel":
        r = await ws_stream(http, ws_url, text=text, cancel_after_payloads=1)
        return "cancelled" if r.of("cancelled") or r.done else f"error:{(r.error or {}).get('code')}"
    if action == "disconnect_sse":
        async with http.get(url + "/v1/stream/sse", params={"text": text}) as resp:
            async for line in resp.content:
                if line.startswith(b"event: audio"):
                    break
        return "disconnected"
    async with http.ws_connect(ws_url) as ws:
        if action == "garbage":
            await ws.send_str(rng.choice(["{", "[]", '{"type":"nope"}', '{"type":"text","text":7}']))
            await ws.receive(timeout=10)
            return "rejected"
        await ws.send_json({"type": "text", "text": text})
        await ws.send_json({"type": "end"})
        await ws.receive(timeout=10)
        await asyncio.sleep(rng.random() * 0.3)
    return "disconnected"


async def client_loop(http: aiohttp.ClientSession, url: str, deadline: float, seed: int, tally: Counter) -> None:
    rng = random.Random(seed)
    while time.monotonic() < deadline:
        try:
            tally[await asyncio.wait_for(one_session(http, url, rng), 60)] += 1
        except (TimeoutError, aiohttp.ClientError) as exc:
            tally[f"client_error:{type(exc).__name__}"] += 1


async def soak(url: str, seconds: float, clients: int) -> dict[str, object]:
    async with aiohttp.ClientSession() as http:
        start = await scrape(http, url)
    tally: Counter[str] = Counter()
    deadline = time.monotonic() + seconds
    async with aiohttp.ClientSession() as http:
        await asyncio.gather(*(client_loop(http, url, deadline, n, tally) for n in range(clients)))
    # a fresh client: the soak's own keep-alive connections are closed, not counted as tasks
    async with aiohttp.ClientSession() as http:
        end = await scrape(http, url)
        for _ in range(20):  # let connections close: the task count must come back to idle
            if end["tts_asyncio_tasks"] <= start["tts_asyncio_tasks"]:
                break
            await asyncio.sleep(0.5)
            end = await scrape(http, url)
    errors = sum(v for k, v in tally.items() if k.startswith(("error", "client_error")))
    return {
        "seconds": seconds,
        "clients": clients,
        "sessions": sum(tally.values()),
        "outcomes": dict(tally),
        "errors": errors,
        "rss_start_mb": round(start["tts_process_rss_bytes"] / 2**20, 1),
        "rss_end_mb": round(end["tts_process_rss_bytes"] / 2**20, 1),
        "tasks_start": start["tts_asyncio_tasks"],
        "tasks_end": end["tts_asyncio_tasks"],
    }


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="bench soak", description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=120.0)
    p.add_argument("--clients", type=int, default=40)
    p.add_argument("--engine", default="fake")
    p.add_argument(
        "--set",
        action="append",
        default=["fake_rtf=0.2", "fake_chunk_ms=100"],
        help="gateway settings (default: fake engine at 0.2 real-time factor)",
    )
    p.add_argument("--out", default="bench-results/soak.json")
    args = p.parse_args(argv)
    with ServerProcess("serve", "--engine", args.engine, settings=args.set) as server:
        result = asyncio.run(soak(server.url, args.seconds, args.clients))
    result["engine"] = args.engine
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0
