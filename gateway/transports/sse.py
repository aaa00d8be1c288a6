"""The SSE channel: ``GET|POST /v1/stream/sse``, audio as base64 inside JSON events.

Byte accounting counts what is really written: each event's text plus the HTTP/1.1 chunk
framing around it, so ``done.wire_bytes / done.audio_bytes - 1`` is the channel's measured
overhead (about a third, from base64 and the JSON around it).
"""
from __future__ import annotations

import base64
import json
from typing import Any

from aiohttp import web
from aiohttp_sse import EventSourceResponse, sse_response

from ..errors import BadRequest
from ..options import parse_options
from ..security import check_origin
from ..state import GATEWAY
from ..stream import Event, StreamSession


class CountingEventSource(EventSourceResponse):
    """An SSE response that counts the bytes it puts on the wire, chunk framing included."""

    wire_bytes = 0

    async def write(self, data: bytes | bytearray | memoryview) -> None:
        n = len(data)
        self.wire_bytes += n + (len(f"{n:x}") + 4 if self.chunked and n else 0)
        await super().write(data)


async def _request_fields(request: web.Request) -> dict[str, Any]:
    fields: dict[str, Any] = dict(request.query)
    if request.method == "POST":
        try:
            body = await request.json(loads=json.loads)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise BadRequest("the body must be a JSON object", code="invalid_json") from None
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object", code="invalid_json")
        fields.update(body)
    return fields


async def handle_sse(request: web.Request) -> web.StreamResponse:
    gw = request.app[GATEWAY]
    check_origin(request, gw.settings)
    # validation errors are plain HTTP errors: nothing has been streamed yet
    fields = await _request_fields(request)
    await gw.wait_ready()  # voices are known once the engine has loaded
    options = parse_options(fields, gw.settings, gw.engine)
    if not (options.text.strip() or options.prompt.strip()):
        raise BadRequest("give `text` or `prompt`", code="empty_input")
    async with gw.admission.session(request.remote or "?"):  # 503 + Retry-After when full
        session = StreamSession(gw.engine, options, gw.settings, agent=gw.agent, metrics=gw.metrics, hub=gw.hub)
        m = gw.metrics
        m.sessions.labels("sse").inc()
        m.active.labels("sse").inc()
        try:
            async with sse_response(request, response_cls=CountingEventSource, allow_all_methods=True) as resp:
                await _stream(session, resp)
            return resp
        except ConnectionError:
            return web.Response(status=499)  # the client went away; nothing more to send
        finally:
            m.active.labels("sse").dec()
            await session.aclose()  # a client that went away stops its synthesis here


async def _stream(session: StreamSession, resp: CountingEventSource) -> None:
    gw_metrics = session.metrics
    await resp.send(json.dumps(session.ready_fields()), event="ready")
    if session.options.prompt:
        session.push_prompt(session.options.prompt)
    else:
        session.push_text(session.options.text)
        session.end()
    audio_wire = 0
    async for event in session.events():
        before = resp.wire_bytes
        await resp.send(json.dumps(_fields(event, audio_wire, resp.wire_bytes)), event=event.type)
        if event.type == "audio":
            audio_wire += resp.wire_bytes - before
        if gw_metrics is not None:
            _observe(gw_metrics, event, resp.wire_bytes - before)


def _fields(event: Event, audio_wire: int, total_wire: int) -> dict[str, Any]:
    if event.type == "audio":
        return {**event.fields, "data": base64.b64encode(event.audio).decode("ascii")}
    if event.type == "done":
        return {**event.fields, "wire_bytes": audio_wire, "wire_bytes_total": total_wire, "channel": "sse"}
    return event.fields


def _observe(m: Any, event: Event, wire: int) -> None:
    if event.type == "audio":
        m.bytes.labels("sse", "audio").inc(len(event.audio))
        m.bytes.labels("sse", "wire").inc(wire)
    elif event.type == "error":
        m.errors.labels("sse", event.fields.get("code", "error")).inc()
    elif event.type == "done" and event.fields.get("ttfb_ms") is not None:
        m.ttfb.labels("sse").observe(event.fields["ttfb_ms"] / 1000)
