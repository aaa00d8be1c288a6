"""The SageMaker model container: ``make_container_app(settings) -> web.Application``.

The container contract, on port 8080:

* ``GET /ping``: 200 once the engine is loaded, 503 before (and for good if it failed).
* ``POST /invocations``: batch. A JSON body ``{"text"|"input", "voice", "speed", "format",
  "bitrate"}`` (or a ``text/plain`` body of text to speak) -> the whole audio, with its
  content type (``audio/mpeg`` for the default mp3).
* ``GET /invocations-bidirectional-stream``: a WebSocket speaking the unified channel's
  control messages (``start``, ``text``, ``prompt``, ``flush``, ``end``, ``cancel``). The
  SageMaker sidecar forwards request parts as TEXT or BINARY frames, so a binary frame is
  read as the same UTF-8 JSON. Events go out as JSON text frames and each audio payload as
  one binary frame (whole MP3 frames for mp3). Unlike the browser channel, ``done`` does not
  close the socket: the next ``start`` (or ``text``) on it begins a new reply, which is what
  lets the ``container`` engine keep a pool of open sockets. The socket is accepted at once
  (the engine is not awaited before the handshake) and pings are answered by aiohttp.
* ``GET /v1/voices``: the engine's voices (the ``container`` engine reads them at start).
* ``GET /metrics``: Prometheus text.
"""

from __future__ import annotations

import logging

from aiohttp import web

from ..audio.encoders import CONTENT_TYPES
from ..config import Settings
from ..core import batch
from ..core.options import parse_options
from ..engines import create_engine
from ..engines.base import Engine
from ..errors import BadRequest
from . import http
from .app import build_gateway, close_idle_upstream, engine_lifecycle, errors_middleware
from .jsonbody import decode_object
from .state import GATEWAY
from .transports.ws import WsChannel, serve_socket

log = logging.getLogger(__name__)

STREAM_PATH = "/invocations-bidirectional-stream"
CHANNEL = "container"  # the metrics label of this app's streams


class ContainerChannel(WsChannel):
    """The unified channel with the container's differences: binary control frames, no rate
    limit (the sidecar or gateway in front of it is the client), and sockets that outlive a
    reply, held idle as long as that client likes (its pool decides)."""

    name = CHANNEL
    binary_control = True
    rate_limited = False
    keeps_socket = True
    idle_close = False

    def between_replies(self) -> bool:
        # the pump has sent the last reply's done (or no reply began), and no close is under way
        return not self.closing and (self.writer is None or self.writer.done())


async def ping(request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    if not gw.ready.is_set():
        return web.json_response({"status": "loading", "engine": gw.engine.name}, status=503)
    if gw.load_error:
        return web.json_response({"status": "failed", "engine": gw.engine.name, "error": gw.load_error}, status=503)
    return web.json_response({"status": "ok", "engine": gw.engine.name})


async def invocations(request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    body = await _invocation_body(request)
    text = body.get("text") or body.get("input")
    if not isinstance(text, str) or not text.strip():
        raise BadRequest("`text` (or `input`) must be a non-empty string", code="empty_input")
    fields = {**body, "text": text}
    fields.pop("chunking", None)
    await gw.wait_ready()  # voices are known once the engine has loaded
    options = parse_options(fields, gw.settings, gw.engine)
    audio = await batch.synthesize(gw.hub, options, gw.settings)
    return web.Response(body=audio, headers={"Content-Type": CONTENT_TYPES[options.format]})


async def _invocation_body(request: web.Request) -> dict[str, object]:
    raw = await request.read()
    if request.content_type.startswith("text/plain"):
        return {"text": raw.decode(request.charset or "utf-8", errors="replace")}
    return decode_object(raw, "the body must be a JSON object (or text/plain text)")


async def stream(request: web.Request) -> web.WebSocketResponse:
    # no server heartbeat: the sidecar pings every 60 s and autoping answers; pooled idle
    # client sockets do not read, so they could not answer pings of ours
    return await serve_socket(request, ContainerChannel, autoping=True)


def make_container_app(settings: Settings, engine: Engine | None = None) -> web.Application:
    """The model container. The engine loads in the background; ``/ping`` says when it is done."""
    app = web.Application(middlewares=[errors_middleware], client_max_size=1024 * 1024)
    app[GATEWAY] = build_gateway(settings, engine or create_engine(settings), admit=False)
    app.cleanup_ctx.append(engine_lifecycle)
    app.on_shutdown.append(close_idle_upstream)
    app.router.add_get("/ping", ping)
    app.router.add_post("/invocations", invocations)
    app.router.add_get(STREAM_PATH, stream)
    app.router.add_get("/v1/voices", http.voices)
    app.router.add_get("/metrics", http.metrics)
    return app
