"""The unified WebSocket channel: ``GET /v1/stream/ws``.

Client -> server: JSON text frames ``start``, ``text``, ``prompt``, ``flush``, ``end``,
``cancel``, ``ping``. Server -> client: JSON events, and each audio payload as ONE binary frame
of whole MP3 frames; with ``envelope=msgpack`` every server message is one binary msgpack map
instead.

``text`` or ``prompt`` among the options is spoken: from ``start``, as if a ``text`` and a
``flush`` (or a ``prompt``) followed it, and the reply stays open for more; from the query
string, the session starts as the socket opens, with the text as the whole reply (``done``
follows) or the prompt as its first turn. ``ws_idle_timeout_s`` without a client message
(``ping`` -> ``pong`` keeps a socket alive) and without a reply in progress: ``closing
{reason: "idle"}``, then close 1000.

Errors the session survives (a malformed message, an unknown type, text after ``end``) answer
an ``error`` event. Errors it cannot survive answer ``error`` and then a close code: 1008 bad
options, a message flood or a client too slow to read; 1009 a message over the size limit;
1011 an engine failure or timeout; 1013 overloaded or not ready; 1001 server shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import msgpack
from aiohttp import WSCloseCode, WSMsgType, web

from ...core.stream import Event, StreamSession
from ...errors import BadRequest, GatewayError, PayloadTooLarge
from ..accesslog import log_websocket
from ..security import WS_TOKEN_PROTOCOL, check_origin
from ..state import GATEWAY, Gateway
from .channel import Channel
from .ws_input import Fatal, IdleClock, RateLimiter, close_code_for, frame_overhead, parse_message, validate_message

log = logging.getLogger(__name__)


class WsChannel(Channel):
    """The browser's socket. Subclasses change its class attributes: ``binary_control`` (a
    binary frame holds UTF-8 JSON control), ``rate_limited``, ``keeps_socket`` (``done`` leaves
    the socket open for the next reply)."""

    name = "ws"
    binary_control = False
    rate_limited = True
    keeps_socket = False
    idle_close = True  # close after ``ws_idle_timeout_s`` idle (the container's pooled sockets: never)

    def __init__(self, ws: web.WebSocketResponse, gw: Gateway, request: web.Request) -> None:
        super().__init__(gw)
        self.ws, self.request = ws, request
        self.query = dict(request.query)
        self.writer: asyncio.Task[None] | None = None
        self.msgpack = self.query.get("envelope", "json").lower() == "msgpack"  # as parse_options reads it
        self.lock = asyncio.Lock()
        self.limiter = RateLimiter(gw.settings.ws_messages_per_s, gw.settings.ws_burst)
        self.text_chars = 0  # text received in the current reply
        self.finished: asyncio.Future[None] | None = None  # set when the socket is done for
        self.closing = False  # we started the close handshake
        timeout = gw.settings.ws_idle_timeout_s if self.idle_close else 0.0
        self.idle = IdleClock(timeout, lambda: self.session is not None and self.session.busy)

    # -- sending ------------------------------------------------------------------------
    async def write(self, event: Event) -> int:
        if self.msgpack:
            body = {"type": event.type, **event.fields}
            if event.type == "audio":
                body["audio"] = event.audio
            data: bytes | str = msgpack.packb(body, use_bin_type=True)
        elif event.type == "audio":
            data = event.audio
        else:
            data = json.dumps({"type": event.type, **event.fields})
        size = len(data) if isinstance(data, bytes) else len(data.encode())
        await self._send(data)
        return size + frame_overhead(size)

    async def _send(self, data: bytes | str) -> None:
        transport = self.request.transport
        backlog = transport.get_write_buffer_size() if transport else 0
        if backlog > self.gw.settings.send_queue_bytes:
            raise Fatal(WSCloseCode.POLICY_VIOLATION, "slow_client", f"client is {backlog} bytes behind")
        self.idle.touch()  # a reply's events: time idle counts from the last
        async with self.lock:
            try:
                async with asyncio.timeout(self.gw.settings.send_timeout_s):
                    if isinstance(data, bytes):
                        await self.ws.send_bytes(data)
                    else:
                        await self.ws.send_str(data)
            except TimeoutError:
                raise Fatal(WSCloseCode.POLICY_VIOLATION, "slow_client", "client stopped reading") from None

    async def send_error(self, exc: GatewayError) -> None:
        self.gw.metrics.errors.labels(self.name, exc.code).inc()
        with contextlib.suppress(ConnectionError, Fatal, RuntimeError):
            await self.send(Event("error", exc.to_dict()))

    async def close(self, code: int, message: str = "") -> None:
        if self.ws.closed:
            return
        self.closing = True
        try:
            async with asyncio.timeout(2.0):
                await self.ws.close(code=code, message=message.encode()[:120])
        except (TimeoutError, ConnectionError):
            if self.request.transport is not None:
                self.request.transport.abort()  # a client that won't take a close frame is cut off

    def _error_close_code(self) -> int:
        """1008 for the client's fault (``nothing_to_speak``), 1013 for overload, else 1011."""
        cause = self.last_error.cause if self.last_error is not None else None
        return close_code_for(cause) if isinstance(cause, GatewayError) else WSCloseCode.INTERNAL_ERROR

    # -- the session's events -> the wire -----------------------------------------------
    async def _pump(self, session: StreamSession) -> None:
        keep = False
        try:
            last = await self.pump(session)
            last = session.outcome or last  # a conversation's turns end in done and error alike
            keep = last == "done" and self.keeps_socket
            if not keep:  # done: a normal close; error: the session cannot go on
                await self.close(WSCloseCode.OK if last == "done" else self._error_close_code())
        except Fatal as exc:  # too slow to read: no error event can reach it, just the close
            self.gw.metrics.errors.labels(self.name, exc.code).inc()
            await self.close(exc.close_code, exc.code)
            if self.request.transport is not None:
                self.request.transport.abort()  # drop what it never read
        except ConnectionError:
            pass
        finally:
            if not keep and self.finished is not None and not self.finished.done():
                self.finished.set_result(None)

    # -- the client's messages -> the session -------------------------------------------
    async def start_session(self, fields: dict[str, Any], *, whole: bool = False) -> StreamSession:
        """Open the session; its options' ``text`` is spoken at once (``whole``: as the whole
        reply, else as the reply's start), or its ``prompt`` starts the first turn."""
        session = await self.admitted_session(await self.options_for({**self.query, **fields}))
        self.msgpack = session.options.envelope == "msgpack"
        session.multi_turn = True  # each `prompt` is a turn; the socket stays open until `end`
        self.session = session
        await self.send(Event("ready", session.ready_fields()))
        self.writer = asyncio.create_task(self._pump(session))
        self.text_chars += len(session.options.text)
        session.speak_options(whole=whole)
        return session

    async def handle(self, msg: dict[str, Any]) -> None:
        if self.keeps_socket and self.session is not None and self.session.finished:
            await self._end_reply()  # the next reply on a socket that outlives one
        kind = validate_message(msg, self.gw.settings)
        if kind == "ping":  # keeps an idle socket open; starts nothing
            await self.send(Event("pong", {k: v for k, v in msg.items() if k == "id"}))
            return
        if kind == "start":
            if self.session is not None:
                raise BadRequest("the session has already started", code="already_started")
            await self.start_session({k: v for k, v in msg.items() if k != "type"})
            return
        session = self.session or await self.start_session({})
        if kind == "text":
            self.text_chars += len(msg["text"])
            if self.text_chars > self.gw.settings.max_text_chars:
                raise PayloadTooLarge(
                    f"this reply's text passed the limit of {self.gw.settings.max_text_chars} characters"
                )
            session.push_text(msg["text"])
        elif kind == "prompt":
            session.push_prompt(msg["prompt"])
        elif kind == "flush":
            session.flush()
        elif kind == "end":
            session.end()
        elif kind == "cancel":
            self.text_chars = 0
            await session.cancel(msg.get("played_ms"))

    async def _end_reply(self) -> None:
        """Forget the finished session so that the next message opens a fresh one."""
        old, self.session, self.writer = self.session, None, None
        self.reset_counts()
        self.text_chars = 0
        if old is not None:
            await old.aclose()

    async def serve(self) -> None:
        """Read the client until it leaves or the session ends (the pump closed the socket).

        The reader runs as its own task: a client that stops reading never sends the close
        handshake, and its session must still end when the pump gives up on it.
        """
        reader = asyncio.create_task(self.run())
        idle = asyncio.create_task(self.idle.expired())
        self.finished = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait([reader, self.finished, idle], return_when=asyncio.FIRST_COMPLETED)
            if idle.done() and not self.finished.done():
                self.finished.set_result(None)
                await self._close_idle()
            if self.closing:  # our close handshake is under way: let the client answer it
                await asyncio.wait([reader, self.finished], timeout=3.0)
        finally:
            idle.cancel()
            if not reader.done():
                reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader  # re-raises Fatal from the reader

    async def _close_idle(self) -> None:
        with contextlib.suppress(ConnectionError, Fatal, RuntimeError):
            await self.send(Event("closing", {"reason": "idle", "idle_timeout_s": self.idle.timeout_s}))
        await self.close(WSCloseCode.OK, "idle")

    async def run(self) -> None:
        if (self.query.get("text") or "").strip() or (self.query.get("prompt") or "").strip():
            with self.idle.held():  # the session starts as the socket opens
                async with self.client_errors():
                    await self.start_session({}, whole=True)
        async for msg in self.ws:
            if self.rate_limited and not self.limiter.allow(time.monotonic()):
                raise Fatal(
                    WSCloseCode.POLICY_VIOLATION,
                    "rate_limited",
                    f"more than {self.gw.settings.ws_messages_per_s:g} messages a second",
                )
            with self.idle.held():  # not idle while a message is handled (a start waits for the engine)
                if msg.type == WSMsgType.TEXT:
                    await self.on_text(msg.data)
                elif msg.type == WSMsgType.BINARY:
                    await self.on_binary(bytes(msg.data))
            if self.ws.closed:
                break

    async def on_binary(self, data: bytes) -> None:
        if not self.binary_control:
            await self.send_error(
                BadRequest("binary frames are not accepted; send JSON text frames", code="binary_not_supported")
            )
            return
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            await self.send_error(BadRequest("binary frames must hold UTF-8 JSON", code="invalid_json"))
            return
        await self.on_text(text)

    async def on_text(self, data: str) -> None:
        async with self.client_errors():
            await self.handle(parse_message(data))

    @contextlib.asynccontextmanager
    async def client_errors(self) -> AsyncIterator[None]:
        """The client's mistakes: an ``error`` the session survives, or ``Fatal``."""
        try:
            yield
        except PayloadTooLarge as exc:
            raise Fatal(WSCloseCode.MESSAGE_TOO_BIG, exc.code, exc.message) from None
        except BadRequest as exc:
            if exc.code == "invalid_markup":  # the reply's text is broken: nothing after it can be read right
                raise Fatal(WSCloseCode.POLICY_VIOLATION, exc.code, exc.message) from None
            if self.session is None and exc.code not in ("invalid_json", "unknown_type", "invalid_message"):
                raise Fatal(WSCloseCode.POLICY_VIOLATION, exc.code, exc.message) from None
            await self.send_error(exc)

    async def aclose(self) -> None:
        if self.writer is not None:
            self.writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await self.writer
        if self.session is not None:
            await self.session.aclose()


async def serve_socket(request: web.Request, channel_cls: type[WsChannel], **ws_options: Any) -> web.WebSocketResponse:
    """Run one socket of ``channel_cls``: the browser's and the model container's alike."""
    gw = request.app[GATEWAY]
    started = asyncio.get_running_loop().time()
    ws = web.WebSocketResponse(max_msg_size=gw.settings.ws_max_message_bytes, compress=False, **ws_options)
    await ws.prepare(request)
    channel = channel_cls(ws, gw, request)
    gw.channels.add(channel)
    with channel.counted():
        try:
            async with gw.admission.session(request.remote or "?"):
                await channel.serve()
        except Fatal as exc:
            await channel.send_error(exc.error)
            await channel.close(exc.close_code, exc.code)
        except GatewayError as exc:  # overloaded, shutting down, not ready, too many sessions
            await channel.send_error(exc)
            await channel.close(close_code_for(exc), exc.code)
        finally:
            gw.channels.discard(channel)
            log_websocket(request, ws, asyncio.get_running_loop().time() - started)
            await channel.aclose()  # a client that went away stops its synthesis here
    return ws


async def handle_ws(request: web.Request) -> web.WebSocketResponse:
    check_origin(request, request.app[GATEWAY].settings)  # before the upgrade: a plain 403
    # a browser token may come as the subprotocols "token, <token>": aiohttp echoes "token"
    return await serve_socket(request, WsChannel, heartbeat=30.0, protocols=(WS_TOKEN_PROTOCOL,))
