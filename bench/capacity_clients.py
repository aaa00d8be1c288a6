"""The client side of ``bench.capacity``: one process's share of the sessions, each measuring
how late every payload arrives for a listener who started playing at the first one."""

from __future__ import annotations

import asyncio
import collections
import json
import time
from typing import Any

import aiohttp

from .meters import payload_seconds, raise_fd_limit


class Sink:
    def __init__(self) -> None:
        self.late: list[float] = []
        self.errors: collections.Counter[str] = collections.Counter()
        self.connected = 0
        self.audio_s = 0.0  # audio delivered inside the window


async def _session(
    http: aiohttp.ClientSession, url: str, fmt: str, text: str, window: tuple[float, float], sink: Sink
) -> None:
    async with http.ws_connect(url, max_msg_size=0) as ws:
        sink.connected += 1
        await ws.send_json({"type": "start", "format": fmt, "cache": False})  # every session synthesizes
        await ws.send_json({"type": "text", "text": text})
        await ws.send_json({"type": "end"})
        first, heard, rate = 0.0, 0.0, 24000
        async for msg in ws:
            now = time.monotonic()
            if msg.type == aiohttp.WSMsgType.BINARY:
                if not first:
                    first = now
                seconds = payload_seconds(msg.data, fmt, rate)
                if window[0] <= now <= window[1]:
                    sink.audio_s += seconds
                    if now != first:
                        sink.late.append(now - first - heard)
                heard += seconds
            elif msg.type == aiohttp.WSMsgType.TEXT:
                body = json.loads(msg.data)
                if body["type"] == "ready":
                    rate = int(body["sample_rate"])
                elif body["type"] == "error":
                    sink.errors[str(body.get("code"))] += 1
            else:
                break


async def _guarded(coro: Any, sink: Sink) -> None:
    try:
        await coro
    except asyncio.CancelledError:
        raise
    except aiohttp.WSServerHandshakeError as exc:
        sink.errors[f"http_{exc.status}"] += 1
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        sink.errors[type(exc).__name__] += 1


async def _client_load(
    url: str, n: int, fmt: str, text: str, start_at: float, ramp_s: float, window: tuple[float, float]
) -> dict[str, Any]:
    sink = Sink()
    cpu0 = time.process_time()
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    async with aiohttp.ClientSession(connector=connector) as http:
        tasks = []
        for i in range(n):  # a steady ramp: a connect storm measures the accept queue, not streaming
            await asyncio.sleep(max(0.0, start_at + i * ramp_s / n - time.monotonic()))
            tasks.append(asyncio.create_task(_guarded(_session(http, url, fmt, text, window, sink), sink)))
        await asyncio.sleep(max(0.0, window[1] - time.monotonic()))
        streaming = sum(1 for t in tasks if not t.done())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    cpu = time.process_time() - cpu0
    return {
        "late": sink.late,
        "errors": dict(sink.errors),
        "connected": sink.connected,
        "streaming": streaming,
        "client_cpu_s": cpu,
        "audio_s": sink.audio_s,
    }


def client_worker(
    url: str, n: int, fmt: str, text: str, start_at: float, ramp_s: float, window: tuple[float, float]
) -> dict[str, Any]:
    """Entry point of a client process (module-level, so a spawned process can import it)."""
    raise_fd_limit()
    coro = _client_load(url, n, fmt, text, start_at, ramp_s, window)
    try:
        import uvloop  # the clients are not what is measured: give them the faster loop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)
