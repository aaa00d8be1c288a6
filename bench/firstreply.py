"""What a newcomer hears: the very first reply of a fresh gateway, and the demo's "Play both".

``run_gateway.py bench firstreply`` starts a fresh gateway process (``serve``, one worker, the
embedded engine by default) per ``--order``, and the moment it logs that it listens with its
engine ready it presses Play the way the demo page does (a WebSocket reply of the page's
default text in its ``start``, ``cache`` as the page sends it). Then, on the same process: a second reply
(``cache: false``), the batch baseline (``POST /v1/audio/speech``, ``stream: false``,
``cache: false``) of the same text, and "Play both" (one SSE and one WebSocket reply of the same
text at once, sharing synthesis as the page does; the gateway runs with ``cache_mb=0`` so that
they share a live synthesis instead of replaying the first reply's cached audio).

Players are simulated (``player.py``: PCM, honouring ``preroll_ms``); with ``--browser``,
Chromium presses "Play both" on the demo page instead (``firstreply_browser.py``). Per reply:
first audio and playback start from the press, and start / batch. The gateway's own log lines
after "listening" (speed warm-up, the streaming vocoder's build) are printed with their time
from the ready line, to show what still runs while the first reply is served.

``--order``: ``ready-first`` is the gateway's start-up before ``startup_before_ready`` (the
vocoder's build and the speed warm-up after the ready line); ``prepared`` is the default
(done before it). Both run in one invocation so the figures are side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

from gateway.config import ROOT

from .common import RESULTS_DIR, machine, post_speech, table, write_json
from .player import SAMPLE_RATE, session_run
from .remote import RemoteClient
from .servers import free_port

# the demo page's default text (static/index.html)
TEXT = (
    "Hello! This reply is streamed one sentence at a time. Each sentence is synthesized as soon as "
    "it is complete. Listen for gaps between them."
)
ORDERS = {"ready-first": ["startup_before_ready=false"], "prepared": ["startup_before_ready=true"]}
READY = "listening on"
log = logging.getLogger(__name__)


class Gateway:
    """A fresh ``serve`` process whose output lines are kept with their arrival times."""

    def __init__(self, engine: str, settings: list[str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.argv = [
            sys.executable,
            "run_gateway.py",
            "serve",
            "--engine",
            engine,
            "--workers",
            "1",
            "--port",
            str(self.port),
        ]
        for item in ["cache_mb=0", "log_level=INFO", *settings]:
            self.argv += ["--set", item]
        self.lines: list[tuple[float, str]] = []
        self.ready_at: float | None = None
        self.spawned_at = 0.0
        self._ready = asyncio.Event()
        self.proc: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> Gateway:
        self.spawned_at = time.perf_counter()
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv, cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        self._reader = asyncio.create_task(self._read())
        await asyncio.wait_for(self._ready.wait(), 300)
        if self.ready_at is None:
            raise RuntimeError("the gateway did not start:\n" + "\n".join(line for _, line in self.lines[-30:]))
        return self

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        while raw := await self.proc.stdout.readline():
            now = time.perf_counter()
            line = raw.decode(errors="replace").rstrip()
            self.lines.append((now, line))
            if READY in line and self.ready_at is None:
                self.ready_at = now
                self._ready.set()
        self._ready.set()

    async def __aexit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            await self.proc.wait()
        await self._reader

    def after_ready(self) -> list[str]:
        """The gateway's lines after the ready one, timed from it (access log left out)."""
        assert self.ready_at is not None
        return [
            f"+{t - self.ready_at:6.2f} s  {line.split(' ', 2)[-1][:300]}"
            for t, line in self.lines
            if t > self.ready_at and "aiohttp.access" not in line
        ]


def _played(r: Any, label: str, batch_ms: float) -> dict[str, Any]:
    row = {"reply": label, **session_run(r)}
    row["start_vs_batch"] = round(row["start_ms"] / batch_ms, 3) if row["start_ms"] is not None else None
    return row


async def one_order(
    order: str, args: argparse.Namespace, client: RemoteClient, client2: RemoteClient
) -> dict[str, Any]:
    pcm = {"format": "pcm"}
    async with Gateway(args.engine, ORDERS[order] + args.set) as gw:
        assert gw.ready_at is not None
        ready_s = gw.ready_at - gw.spawned_at
        ws, sse = gw.url.replace("http", "ws", 1) + "/v1/stream/ws", gw.url + "/v1/stream/sse"
        page = {**pcm, "text": args.text}  # as the page: the text in `start`, cache on
        first = await client.run("ws", ws, "", {**page, "cache": True})
        pressed_after_ready_ms = round((first.t0 - gw.ready_at) * 1000, 1)
        second = await client.run("ws", ws, "", page)
        async with aiohttp.ClientSession() as http:
            b = await post_speech(http, gw.url + "/v1/audio/speech", args.text, response_format="pcm")
        shared = {**pcm, "cache": True}
        both = await asyncio.gather(
            client2.run("sse", sse, args.text, shared), client.run("ws", ws, "", {**page, **shared})
        )
        batch_ms = round(b.total_ms, 1)
        rows = [
            _played(first, "first (cold)", batch_ms),
            _played(second, "second", batch_ms),
            _played(both[0], "play both: sse", batch_ms),
            _played(both[1], "play both: ws", batch_ms),
        ]
        log.info("%s: lines after ready\n%s", order, "\n".join(gw.after_ready()))
        return {
            "order": order,
            "ready_s": round(ready_s, 2),
            "pressed_after_ready_ms": pressed_after_ready_ms,
            "batch_ms": batch_ms,
            "audio_s": round(b.audio_bytes / 2 / SAMPLE_RATE, 3),
            "replies": rows,
            "log_after_ready": gw.after_ready(),
        }


def render(out: dict[str, Any]) -> str:
    if out["players"].startswith("Chromium"):
        return render_browser(out)
    rows = []
    for o in out["orders"]:
        for r in o["replies"]:
            rows.append(
                [
                    o["order"],
                    f"{o['ready_s']:.1f}",
                    r["reply"],
                    f"{r['first_audio_ms']:.0f}",
                    f"{r['start_ms']:.0f}",
                    f"{o['batch_ms']:.0f}",
                    f"{r['start_vs_batch']:.2f}",
                    f"{r['stalls']} / {r['stall_ms']:.0f}",
                ]
            )
    head = ["order", "ready s", "reply", "first audio ms", "start ms", "batch ms", "start/batch", "stalls / ms"]
    return table(head, rows) + "\nDone when: first (cold) start/batch <= 0.75; play both <= 0.5"


def render_browser(out: dict[str, Any]) -> str:
    rows = [
        [
            f"{o['order']}, {o['press']} at {o['pressed_ms']} ms",
            f"{o['ready_s']:.1f}",
            r["reply"],
            f"{r['first_audio_ms']:.0f}",
            f"{r['start_preroll_ms']:.0f}",
            f"{r['play_called_ms']:.0f}",
            f"{r['sound_ms']:.0f}",
            "/".join(map(str, o["batches_ms"])),
            f"{r['start_vs_batch']:.2f}",
            f"{r['gaps']} ({sum(r.get('gaps_ms', []))} ms)" if r["gaps"] else "0",
            f"{r['browser_cores']:.2f}",
        ]
        for o in out["orders"]
        for r in o["replies"]
    ]
    head = [
        "order, first press (from ready)",
        "ready s",
        "press: channel",
        "first audio ms",
        "preroll ms",
        "play() ms",
        "first sound ms",
        "batch ms",
        "sound/batch",
        "gaps",
        "browser cores",
    ]
    return table(head, rows) + "\nDone when: first (cold) sound/batch <= 0.75; Play both (second) <= 0.5"


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench firstreply", description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", default="embedded")
    p.add_argument("--text", default=TEXT)
    p.add_argument("--orders", nargs="+", default=list(ORDERS), choices=list(ORDERS))
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a gateway setting")
    p.add_argument("--out", type=Path, default=RESULTS_DIR, help="where firstreply.json goes")
    p.add_argument(
        "--browser", action="store_true", help="press Play both on the demo page in Chromium (firstreply_browser.py)"
    )
    p.add_argument(
        "--press",
        nargs="+",
        default=["settled"],
        choices=["settled", "ready"],
        help="with --browser, the first press: once the page is drawn and the browser idle (settled), or the "
        "moment its scripts are ready (ready: the page's own load work then runs beside the first reply); "
        "both: a fresh gateway each, one after the other",
    )
    return p.parse_args(argv)


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"machine": machine(), "text": args.text, "players": "simulated (PCM)", "orders": []}
    if args.browser:
        from .firstreply_browser import bench as in_chromium

        await in_chromium(args, out)
        out["machine_after"] = machine()
        return out
    async with RemoteClient.start() as client, RemoteClient.start() as client2:
        for order in args.orders:
            out["orders"].append(await one_order(order, args, client, client2))
    out["machine_after"] = machine()
    return out


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args = parse_args(argv)
    out = asyncio.run(bench(args))
    write_json(args.out, "firstreply", out)
    print(render(out))
    print(f"machine: {out['machine']} -> {out['machine_after']}")
    return 0
