"""The reference clients in a child process, so a benchmark's client never shares an event
loop (or a CPU slice) with the gateway it measures."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from gateway.config import ROOT


class RemoteClient:
    """The reference clients in a child process, driven over JSON lines on its stdin/stdout.

    An in-process client shares the event loop with the gateway, so it reads a payload only
    after whatever CPU work the gateway does next (encoding the rest of a segment), which
    would be counted as gateway latency. In a child process it reads as soon as bytes arrive.
    Times are ``time.perf_counter()`` values, one monotonic clock for all processes on Linux.
    """

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    @contextlib.asynccontextmanager
    async def start(cls) -> AsyncIterator[RemoteClient]:
        code = "from bench.remote import client_worker; client_worker()"
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", code, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, limit=1 << 24
        )
        try:
            yield cls(proc)
        finally:
            if proc.stdin is not None:
                proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()

    async def run(
        self, channel: str, url: str, text: str = "", options: dict[str, Any] | None = None, prompt: str = ""
    ) -> Any:
        """One reply (``text`` or ``prompt``) on ``ws`` or ``sse``; a ``StreamResult`` whose
        payloads keep only their sizes (the audio itself stays in the child). Options default
        to ``cache: false``: each run synthesizes afresh."""
        from .client import StreamResult

        if self.proc.stdin is None or self.proc.stdout is None:
            raise RuntimeError("the client process has no pipes")
        # benchmarks measure synthesis: no cache and no shared synthesis unless a bench asks
        job = {
            "channel": channel,
            "url": url,
            "text": text,
            "prompt": prompt,
            "options": {"cache": False, **(options or {})},
        }
        self.proc.stdin.write(json.dumps(job).encode() + b"\n")
        await self.proc.stdin.drain()
        line = await self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the client process died")
        reply = json.loads(line)
        if "exception" in reply:
            raise RuntimeError(f"{channel} client failed: {reply['exception']}")
        r = StreamResult(events=[tuple(e) for e in reply["events"]], t0=reply["t0"])
        r.payloads, r.payload_times = [bytes(n) for n in reply["sizes"]], reply["times"]
        return r


def client_worker() -> None:
    """The child side of ``RemoteClient``: one job per stdin line, one JSON reply per job."""
    asyncio.run(_client_jobs())


async def _client_jobs() -> None:
    from .client import sse_stream, ws_stream

    async with aiohttp.ClientSession() as http:
        while line := await asyncio.to_thread(sys.stdin.readline):
            job = json.loads(line)
            try:
                given = {"prompt": job["prompt"]} if job["prompt"] else {"text": job["text"]}
                if job["channel"] == "ws":
                    r = await ws_stream(http, job["url"], options=job["options"], **given)
                else:
                    r = await sse_stream(http, job["url"], method="POST", **given, **job["options"])
                events = [(t, k, {n: v for n, v in f.items() if n != "data"}) for t, k, f in r.events]
                reply = {"t0": r.t0, "times": r.payload_times, "sizes": [len(p) for p in r.payloads], "events": events}
            except Exception as exc:  # reported to the parent, which raises it
                reply = {"exception": repr(exc)}
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()
