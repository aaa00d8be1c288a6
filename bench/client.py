"""Reference clients for both channels, used by the tests, benchmarks and the load test.

Each returns a ``StreamResult``: the events in order with arrival times, the audio payloads
as received (base64 decoded for SSE), and the time to the first audio byte measured from the
moment the request was sent (or the first token for token-by-token input).
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import msgpack


@dataclass(slots=True)
class StreamResult:
    events: list[tuple[float, str, dict[str, Any]]] = field(default_factory=list)
    payloads: list[bytes] = field(default_factory=list)
    payload_times: list[float] = field(default_factory=list)
    t0: float = 0.0
    close_code: int | None = None

    @property
    def audio(self) -> bytes:
        return b"".join(self.payloads)

    @property
    def ttfb_ms(self) -> float | None:
        return (self.payload_times[0] - self.t0) * 1000 if self.payload_times else None

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [f for _, t, f in self.events if t == kind]

    @property
    def done(self) -> dict[str, Any] | None:
        found = self.of("done")
        return found[0] if found else None

    @property
    def error(self) -> dict[str, Any] | None:
        found = self.of("error")
        return found[0] if found else None

    def add_audio(self, data: bytes) -> None:
        self.payloads.append(data)
        self.payload_times.append(time.perf_counter())


async def ws_stream(
    http: aiohttp.ClientSession,
    url: str,
    *,
    text: str | None = None,
    tokens: Iterable[str] | None = None,
    prompt: str | None = None,
    options: dict[str, Any] | None = None,
    token_delay: float = 0.0,
    cancel_after_payloads: int | None = None,
    timeout: float = 120.0,
) -> StreamResult:
    """One reply over the WebSocket channel: ``start``, input, ``end``, then read to the close."""
    result = StreamResult()
    async with http.ws_connect(url, max_msg_size=0) as ws:
        result.t0 = time.perf_counter()
        await ws.send_json({"type": "start", **(options or {})})
        packed = (options or {}).get("envelope") == "msgpack"
        reader = asyncio.create_task(_read_ws(ws, result, cancel_after_payloads, packed))
        if prompt is not None:
            await ws.send_json({"type": "prompt", "prompt": prompt})
            await ws.send_json({"type": "end"})  # one turn: the socket closes after its `done`
        else:
            for n, token in enumerate(tokens if tokens is not None else [text or ""]):
                if n and token_delay:
                    await asyncio.sleep(token_delay)
                await ws.send_json({"type": "text", "text": token})
            await ws.send_json({"type": "end"})
        await asyncio.wait_for(reader, timeout)
        result.close_code = ws.close_code
    return result


async def _read_ws(
    ws: aiohttp.ClientWebSocketResponse, result: StreamResult, cancel_after: int | None, packed: bool
) -> None:
    async for msg in ws:
        now = time.perf_counter()
        if msg.type == aiohttp.WSMsgType.BINARY:
            data = msg.data
            if packed:
                body = msgpack.unpackb(data, raw=False)
                if body.get("type") == "audio":
                    result.add_audio(body.pop("audio"))
                result.events.append((now, body.pop("type"), body))
            else:
                result.add_audio(data)
                result.events.append((now, "audio", {"bytes": len(data)}))
            if cancel_after is not None and len(result.payloads) == cancel_after:
                await ws.send_json({"type": "cancel"})
        elif msg.type == aiohttp.WSMsgType.TEXT:
            body = json.loads(msg.data)
            kind = body.pop("type")
            result.events.append((now, kind, body))
            if kind == "cancelled":
                await ws.close()
        else:
            break


async def sse_stream(
    http: aiohttp.ClientSession, url: str, *, method: str = "GET", timeout: float = 120.0, **fields: Any
) -> StreamResult:
    """One reply over the SSE channel; ``fields`` are the request options (text, voice, ...)."""
    result = StreamResult()
    result.t0 = time.perf_counter()
    kwargs: dict[str, Any] = (
        {"json": fields} if method == "POST" else {"params": {k: str(v) for k, v in fields.items()}}
    )
    async with http.request(method, url, timeout=aiohttp.ClientTimeout(total=timeout), **kwargs) as resp:
        if resp.status != 200:
            body = await resp.json()
            result.events.append((time.perf_counter(), "error", {**body.get("error", {}), "status": resp.status}))
            return result
        event, data = "message", []
        async for raw in resp.content:
            line = raw.decode().rstrip("\r\n")
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip(" "))
            elif not line and data:
                body = json.loads("\n".join(data))
                if event == "audio":
                    result.add_audio(base64.b64decode(body["data"]))
                result.events.append((time.perf_counter(), event, body))
                event, data = "message", []
    return result
