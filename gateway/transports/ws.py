"""The unified WebSocket channel: ``GET /v1/stream/ws``.

Client -> server: JSON text frames ``start``, ``text``, ``prompt``, ``flush``, ``end``,
``cancel``. Server -> client: JSON events, and each audio payload as ONE binary frame of whole
MP3 frames; with ``envelope=msgpack`` every server message is one binary msgpack map instead.
Errors the session can survive (a malformed message, an unknown type) answer an ``error``
event; errors it cannot (bad options, an engine failure) answer ``error`` and then a close code.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

import msgpack
from aiohttp import WSCloseCode, WSMsgType, web

from ..errors import BadRequest, GatewayError, NotReady, PayloadTooLarge
from ..options import parse_options
from ..state import GATEWAY, Gateway
from ..stream import Event, StreamSession

log = logging.getLogger(__name__)

CLIENT_TYPES = ("start", "text", "prompt", "flush", "end", "cancel")
MAX_MESSAGE_BYTES = 64 * 1024


def frame_overhead(n: int) -> int:
    """Bytes of a server-to-client (unmasked) WebSocket frame header for an n-byte payload."""
    return 2 if n < 126 else 4 if n < 65536 else 10


class WsChannel:
    def __init__(self, ws: web.WebSocketResponse, gw: Gateway, query: dict[str, str]) -> None:
        self.ws, self.gw, self.query = ws, gw, query
        self.session: StreamSession | None = None
        self.writer: asyncio.Task[None] | None = None
        self.msgpack = query.get("envelope", "json") == "msgpack"
        self.lock = asyncio.Lock()
        self.audio_wire = 0
        self.total_wire = 0

    # -- sending ------------------------------------------------------------------------
    async def send_event(self, event: Event) -> int:
        """Send one event; return the bytes it took on the wire."""
        if self.msgpack:
            body = {"type": event.type, **event.fields}
            if event.type == "audio":
                body["audio"] = event.audio
            data: bytes = msgpack.packb(body, use_bin_type=True)
            async with self.lock:
                await self.ws.send_bytes(data)
        elif event.type == "audio":
            data = event.audio
            async with self.lock:
                await self.ws.send_bytes(data)
        else:
            data = json.dumps({"type": event.type, **event.fields}).encode()
            async with self.lock:
                await self.ws.send_str(data.decode())
        wire = len(data) + frame_overhead(len(data))
        self.total_wire += wire
        return wire

    async def send_error(self, exc: GatewayError) -> None:
        self.gw.metrics.errors.labels("ws", exc.code).inc()
        with contextlib.suppress(ConnectionError):
            await self.send_event(Event("error", exc.to_dict()))

    async def close(self, code: int, message: str = "") -> None:
        await self.ws.close(code=code, message=message.encode()[:120])

    # -- the session's events -> the wire -----------------------------------------------
    async def pump(self, session: StreamSession) -> None:
        m = self.gw.metrics
        event = Event("none")
        async for event in session.events():
            if event.type == "done":
                fields = {**event.fields, "wire_bytes": self.audio_wire, "wire_bytes_total": self.total_wire, "channel": "ws"}
                event = Event("done", fields)
                if fields.get("ttfb_ms") is not None:
                    m.ttfb.labels("ws").observe(fields["ttfb_ms"] / 1000)
            wire = await self.send_event(event)
            if event.type == "audio":
                self.audio_wire += wire
                m.bytes.labels("ws", "audio").inc(len(event.audio))
                m.bytes.labels("ws", "wire").inc(wire)
            elif event.type == "error":
                m.errors.labels("ws", str(event.fields.get("code"))).inc()
        last = event.type if session.finished else ""
        # done: a normal close; error: the session cannot go on (engine fault or timeout)
        await self.close(WSCloseCode.OK if last == "done" else WSCloseCode.INTERNAL_ERROR)

    # -- the client's messages -> the session -------------------------------------------
    async def open_session(self, fields: dict[str, Any]) -> StreamSession:
        options = parse_options({**self.query, **fields}, self.gw.settings, self.gw.engine)
        await self.gw.wait_ready()
        session = StreamSession(self.gw.engine, options, self.gw.settings, agent=self.gw.agent, metrics=self.gw.metrics)
        self.msgpack = options.envelope == "msgpack"
        self.session = session
        await self.send_event(Event("ready", session.ready_fields()))
        self.writer = asyncio.create_task(self.pump(session))
        return session

    async def handle(self, msg: dict[str, Any]) -> None:
        kind = msg.get("type")
        if kind not in CLIENT_TYPES:
            raise BadRequest(f"unknown message type {kind!r}; expected one of {', '.join(CLIENT_TYPES)}", code="unknown_type")
        if kind == "start":
            if self.session is not None:
                raise BadRequest("the session has already started", code="already_started")
            await self.open_session({k: v for k, v in msg.items() if k != "type"})
            return
        session = self.session or await self.open_session({})
        if kind == "text":
            text = msg.get("text")
            if not isinstance(text, str):
                raise BadRequest("`text` needs a string field `text`", code="invalid_message")
            if len(text) > self.gw.settings.max_text_chars:
                raise PayloadTooLarge(f"text is {len(text)} characters; the limit is {self.gw.settings.max_text_chars}")
            session.push_text(text)
        elif kind == "prompt":
            prompt = msg.get("prompt")
            if not isinstance(prompt, str) or not prompt.strip():
                raise BadRequest("`prompt` needs a non-empty string field `prompt`", code="invalid_message")
            if len(prompt) > self.gw.settings.max_prompt_chars:
                raise PayloadTooLarge(f"prompt is {len(prompt)} characters; the limit is {self.gw.settings.max_prompt_chars}")
            session.push_prompt(prompt)
        elif kind == "flush":
            session.flush()
        elif kind == "end":
            session.end()
        elif kind == "cancel":
            await session.cancel()

    async def run(self) -> None:
        async for msg in self.ws:
            if msg.type == WSMsgType.TEXT:
                await self.on_text(msg.data)
            elif msg.type == WSMsgType.BINARY:
                await self.send_error(BadRequest("binary frames are not accepted; send JSON text frames", code="binary_not_supported"))
            if self.ws.closed:
                break

    async def on_text(self, data: str) -> None:
        try:
            try:
                msg = json.loads(data)
            except json.JSONDecodeError:
                raise BadRequest("messages must be JSON objects", code="invalid_json") from None
            if not isinstance(msg, dict):
                raise BadRequest("messages must be JSON objects", code="invalid_json")
            await self.handle(msg)
        except NotReady as exc:
            await self.send_error(exc)
            await self.close(WSCloseCode.TRY_AGAIN_LATER, exc.message)
        except BadRequest as exc:
            await self.send_error(exc)
            if self.session is None and exc.code not in ("invalid_json", "unknown_type", "invalid_message"):
                await self.close(WSCloseCode.POLICY_VIOLATION, exc.message)

    async def aclose(self) -> None:
        if self.writer is not None:
            self.writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await self.writer
        if self.session is not None:
            await self.session.aclose()


async def handle_ws(request: web.Request) -> web.WebSocketResponse:
    gw = request.app[GATEWAY]
    ws = web.WebSocketResponse(max_msg_size=MAX_MESSAGE_BYTES, heartbeat=30.0, compress=False)
    await ws.prepare(request)
    channel = WsChannel(ws, gw, dict(request.query))
    gw.metrics.sessions.labels("ws").inc()
    gw.metrics.active.labels("ws").inc()
    try:
        await channel.run()
    finally:
        gw.metrics.active.labels("ws").dec()
        await channel.aclose()  # a client that went away stops its synthesis here
    return ws
