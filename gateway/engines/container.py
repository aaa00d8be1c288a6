"""The container engine: synthesis in a model container reached over its WebSocket.

It speaks the container's ``/invocations-bidirectional-stream`` (see ``gateway.web.container``):
for each segment it sends ``start`` (``format=pcm``, the voice and speed, ``first_clause: false``:
the text is one segment, not to be cut again; ``cache: false`` with ``[container] cache = false``),
``text`` and ``end``,
then yields the binary PCM frames as they arrive until ``done``. The container does not close
a socket after ``done``, so finished sockets go back to a small pool of idle ones and the next
segment skips the handshake; one segment at a time per socket.

Failures: a socket that fails before any audio of a segment arrived (a stale pooled socket, a
restarted container) is retried once on a fresh connection; a second failure, or one after
audio was already yielded (a retry would repeat it), is an ``EngineError``. A segment closed
early (cancel, timeout) closes its socket, which stops the container's synthesis too.

Voices come from the container's ``GET /v1/voices`` at ``start()``, which waits for the
container's engine to be loaded; so does ``timestamps`` (its field there; absent: False).
No protocol flag asks for them: the container sends ``words {sentence, words: [{word, start_ms,
end_ms}]}`` before each sentence's audio whenever its engine has them (ms from the reply's,
here the segment's, first sample); they become ``WordTimes`` when asked for, else are dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

import aiohttp
from yarl import URL

from ..config import Settings, section
from ..errors import CLIENT_CODES, BadRequest, EngineError, EngineTimeout, GatewayError, NotReady
from ..kokoro.timestamps import WordTimes, words_event
from ..kokoro.vocoder.modes import DEFAULT as DEFAULT_MODE
from .base import EngineBase, Voice

log = logging.getLogger(__name__)

SAMPLE_RATE = 24000
CONNECT_TIMEOUT_S = 5.0
START_TIMEOUT_S = 180.0  # a GPU container may take minutes to load its model
POOL_IDLE_S = 30.0  # idle sockets older than this are closed rather than reused
CLOSE_TIMEOUT_S = 1.0


class LostSocket(Exception):
    """The socket failed or closed before the segment's ``done``."""


def http_base(ws_url: str) -> URL:
    """``ws://host:port/invocations-bidirectional-stream`` -> ``http://host:port``."""
    url = URL(ws_url)
    scheme = {"ws": "http", "wss": "https"}.get(url.scheme)
    if scheme is None or not url.host:
        raise ValueError(f"container_url must be a ws:// or wss:// URL, got {ws_url!r}")
    return url.with_scheme(scheme).with_path("/").with_query(None)


class SocketPool:
    """Idle open sockets to one URL; at most ``size`` kept, each for at most ``idle_s``."""

    def __init__(self, url: str, size: int, idle_s: float = POOL_IDLE_S) -> None:
        self.url, self.size, self.idle_s = url, size, idle_s
        self.opened = 0  # connections made: lets tests see reuse
        self._idle: list[tuple[float, aiohttp.ClientWebSocketResponse]] = []
        self._http: aiohttp.ClientSession | None = None

    def bind(self, http: aiohttp.ClientSession | None) -> None:
        self._http = http

    async def acquire(self, *, fresh: bool = False) -> aiohttp.ClientWebSocketResponse:
        now = time.monotonic()
        while self._idle and not fresh:
            stamp, ws = self._idle.pop()
            if not ws.closed and now - stamp < self.idle_s:
                return ws
            await self.discard(ws)
        return await self._connect()

    async def _connect(self) -> aiohttp.ClientWebSocketResponse:
        if self._http is None:
            raise NotReady("the container engine is not started")
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):  # TCP connect and the upgrade together
                ws = await self._http.ws_connect(
                    self.url,
                    timeout=aiohttp.ClientWSTimeout(ws_close=CLOSE_TIMEOUT_S),
                    autoping=True,
                    compress=0,
                    max_msg_size=0,
                )
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise LostSocket(f"cannot connect to {self.url}: {str(exc) or type(exc).__name__}") from exc
        self.opened += 1
        return ws

    async def release(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        if ws.closed or len(self._idle) >= self.size:
            await self.discard(ws)
        else:
            self._idle.append((time.monotonic(), ws))

    async def discard(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(ws.close(), CLOSE_TIMEOUT_S)

    async def clear(self) -> None:
        idle, self._idle = self._idle, []
        await asyncio.gather(*(self.discard(ws) for _, ws in idle))


def container_error(event: dict[str, Any]) -> GatewayError:
    """The container's ``error`` event as the gateway error it stands for: a client's fault
    (an option the container refused) stays a ``BadRequest`` with the container's code."""
    code, message = str(event.get("code", "engine_error")), str(event.get("message", ""))
    if code in CLIENT_CODES:
        return BadRequest(message, code=code)
    return EngineError(f"container: {message}", code=code)


def container_event(data: str | bytes, sample_rate: int, who: str = "the container") -> dict[str, Any]:
    """One JSON event of the container's protocol, checked (an ``error`` event raises); its
    ``type`` is ``done`` at the segment's end."""
    try:
        event = json.loads(data)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, nested too deep, an integer too long
        event = None
    if not isinstance(event, dict):
        raise EngineError(f"{who} sent a malformed event: {data[:80]!r}")
    kind = event.get("type")
    if kind == "ready" and event.get("sample_rate") not in (None, sample_rate):
        raise EngineError(f"{who} speaks {event['sample_rate']} Hz, expected {sample_rate}")
    if kind == "error":
        raise container_error(event)
    return event


@dataclass(frozen=True, slots=True)
class ContainerSettings:
    """``[container]``: read by this engine alone (defaults: ``gateway.config.Settings``)."""

    url: str
    pool_size: int  # idle sockets kept open to the container
    cache: bool  # false: ask the container to synthesize every segment (``cache: false``)


class ContainerEngine(EngineBase):
    name = "container"
    sample_rate = SAMPLE_RATE

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.options = section(settings, "container", ContainerSettings)
        self.timeout_s = settings.synth_timeout_s
        self.url = self.options.url
        self.base = http_base(self.url)  # fail on a bad URL at construction, not on first use
        self.max_concurrency = self.options.pool_size
        self.pool = SocketPool(self.url, self.max_concurrency)
        self.retries = 0  # segments retried on a fresh socket: lets tests see the retry
        self._http: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        if self._http is not None:
            return
        # limit=0: aiohttp's default of 100 connections would queue stream 101 behind the pool,
        # and the connect timeout would then fail it as unavailable
        http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S),
        )
        try:
            body = await self._fetch_voices(http)
        except BaseException:
            await http.close()
            raise
        self._declare(body)
        self._http = http
        self.pool.bind(http)
        log.info("container engine: %s serves %d voices (engine %s)", self.url, len(self.voices), body.get("engine"))

    def _declare(self, body: dict[str, Any]) -> None:
        """What the container's ``/v1/voices`` says its engine can do, as this engine's own."""
        voices = tuple(
            Voice(**{k: v[k] for k in ("id", "language", "gender", "description", "default") if k in v})
            for v in body["voices"]
        )
        modes = tuple(str(m) for m in body.get("vocoder_modes") or ())
        # the container's default mode where it names one, else its streaming default
        default_mode = body.get("default_vocoder") or (
            DEFAULT_MODE if DEFAULT_MODE in modes else (modes[0] if modes else None)
        )
        self.declare(
            voices=voices,
            default_voice=str(body.get("default") or (voices[0].id if voices else "")),
            vocoder_modes=modes,
            default_vocoder=default_mode,
            timestamps=bool(body.get("timestamps")),
            paces=bool(modes),  # (the model container is the embedded engine: it streams as it does)
        )

    async def _fetch_voices(self, http: aiohttp.ClientSession) -> dict[str, Any]:
        """Wait for the container's ``/ping`` (its engine loaded), then ``GET /v1/voices``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + START_TIMEOUT_S
        while True:
            try:
                ping = await self._get(http, "ping")
                if ping.get("status") == "failed":  # final: retrying cannot load it
                    raise EngineError(
                        f"the container at {self.base} failed to load its engine: {ping.get('error')}",
                        code="engine_load",
                    )
                if ping.get("status") == "ok":
                    body = await self._get(http, "v1", "voices")
                    if isinstance(body.get("voices"), list):
                        return body
                problem = f"not ready: {ping}"
            except (aiohttp.ClientError, OSError, ValueError) as exc:
                problem = str(exc) or type(exc).__name__
            if loop.time() > deadline:
                raise EngineError(
                    f"container at {self.base} not ready after {START_TIMEOUT_S:g} s: {problem}", code="engine_load"
                )
            log.info("waiting for the container at %s (%s)", self.base, problem)
            await asyncio.sleep(1.0)

    async def _get(self, http: aiohttp.ClientSession, *path: str) -> dict[str, Any]:
        """A JSON object from the container; any status (/ping says 503 while loading)."""
        url = self.base.joinpath(*path)
        async with http.get(url, timeout=aiohttp.ClientTimeout(total=CONNECT_TIMEOUT_S * 2)) as resp:
            body = await resp.json(content_type=None)
        if not isinstance(body, dict):
            raise ValueError(f"GET {url} answered {resp.status} with {body!r}")
        return body

    async def close_idle(self) -> None:
        await self.pool.clear()

    async def aclose(self) -> None:
        http, self._http = self._http, None
        self.pool.bind(None)
        await self.pool.clear()
        if http is not None:
            await http.close()

    async def synthesize(
        self,
        text: str,
        *,
        voice: str,
        speed: float,
        vocoder: str | None = None,
        buffered_s: float = 0.0,
        waiting: bool = False,
        timestamps: bool = False,
    ) -> AsyncGenerator[bytes | WordTimes, None]:
        """Yield the container's PCM for ``text`` (with ``timestamps``, its ``words`` events as
        ``WordTimes`` before the audio); one retry on a fresh socket before anything came."""
        self.require(self._http)
        for attempt in (1, 2):
            yielded = False
            try:
                # aclosing: a consumer that stops early closes the socket now, not at GC
                ahead = 0.0 if waiting else buffered_s  # the container's option: audio a playing player has
                segment = self._segment(text, voice, speed, vocoder, ahead, timestamps, fresh=attempt > 1)
                async with contextlib.aclosing(segment) as chunks:
                    async for item in chunks:
                        yielded = True
                        yield item
                return
            except LostSocket as exc:
                if yielded or attempt > 1:
                    raise EngineError(f"container connection lost: {exc}", code="engine_unavailable") from exc
                log.warning("container socket failed (%s); retrying on a fresh connection", exc)
                self.retries += 1
                await self.pool.clear()  # the others are likely as stale (a restarted container)

    async def _segment(
        self,
        text: str,
        voice: str,
        speed: float,
        vocoder: str | None,
        buffered_s: float,
        timestamps: bool,
        *,
        fresh: bool,
    ) -> AsyncGenerator[bytes | WordTimes, None]:
        ws = await self.pool.acquire(fresh=fresh)
        done = False
        try:
            # the listener's buffer travels too: the container's engine then streams inside the
            # segment only when someone is waiting for it (and in the mode asked for). The text
            # is one segment already: the container must not cut its first clause off again
            start = {
                "type": "start",
                "format": "pcm",
                "voice": voice,
                "speed": speed,
                "first_clause": False,
                "text_frontend": False,  # the text is this gateway's spoken form already
                "buffered_s": round(max(0.0, buffered_s), 3),
                **({"vocoder": vocoder} if vocoder else {}),
                **({} if self.options.cache else {"cache": False}),
            }
            try:
                for message in (start, {"type": "text", "text": text}, {"type": "end"}):
                    await ws.send_str(json.dumps(message))
            except (ConnectionError, RuntimeError, aiohttp.ClientError) as exc:
                raise LostSocket(f"send failed: {exc}") from exc
            odd = b""  # PCM frames could split a sample; keep the engine's chunks whole samples
            while True:
                msg = await self._receive(ws)
                if msg.type == aiohttp.WSMsgType.BINARY:
                    data = odd + msg.data
                    cut = len(data) - len(data) % 2
                    odd = data[cut:]
                    if cut:
                        yield data[:cut]
                elif msg.type == aiohttp.WSMsgType.TEXT:
                    event = container_event(msg.data, self.sample_rate)
                    if event.get("type") == "done":
                        done = True
                        return
                    if timestamps and (times := words_event(event, self.sample_rate)) is not None:
                        yield times
                else:  # CLOSE, CLOSING, CLOSED, ERROR
                    raise LostSocket(f"container closed the socket ({ws.close_code}, {msg.extra or msg.data})")
        finally:
            if done:
                await self.pool.release(ws)
            else:  # an error, a cancel or a timeout: the container's session is mid-reply
                await self.pool.discard(ws)

    async def _receive(self, ws: aiohttp.ClientWebSocketResponse) -> aiohttp.WSMessage:
        timeout = self.timeout_s
        try:
            return await ws.receive(timeout=timeout)
        except TimeoutError:
            raise EngineTimeout(f"the container sent nothing for {timeout:g} s") from None
