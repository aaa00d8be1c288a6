"""The SSE channel: ``GET|POST /v1/stream/sse``, audio as base64 inside JSON events.

Byte accounting counts what is really written: each event's text plus the HTTP/1.1 chunk
framing around it, so ``done.wire_bytes / done.audio_bytes - 1`` is the channel's measured
overhead (about a third, from base64 and the JSON around it).

A reader that stops reading is held to the WebSocket's limits (``send_timeout_s``,
``send_queue_bytes``; ``slowclient.py``): it is cut off, its synthesis stops and its admission
slot goes to the next session.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from aiohttp import web
from aiohttp_sse import EventSourceResponse, sse_response

from ...core.stream import Event, StreamSession
from ...errors import BadRequest, SlowClient
from ..jsonbody import decode_object
from ..security import check_origin
from ..slowclient import cut_off, send_limits
from ..state import GATEWAY, Gateway
from .channel import Channel


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
        fields.update(decode_object(await request.read()))
    return fields


class SseChannel(Channel):
    """The SSE channel: every event one SSE event of JSON, audio as base64 in ``data``."""

    name = "sse"
    resp: CountingEventSource

    def __init__(self, gw: Gateway, request: web.Request) -> None:
        super().__init__(gw)
        self.request = request

    async def write(self, event: Event) -> int:
        fields = event.fields
        if event.type == "audio":
            fields = {**fields, "data": base64.b64encode(event.audio).decode("ascii")}
        before = self.resp.wire_bytes
        async with send_limits(self.request):
            await self.resp.send(json.dumps(fields), event=event.type)
        return self.resp.wire_bytes - before


async def handle_sse(request: web.Request) -> web.StreamResponse:
    gw = request.app[GATEWAY]
    check_origin(request, gw.settings)
    channel = SseChannel(gw, request)
    # validation errors are plain HTTP errors: nothing has been streamed yet
    options = await channel.options_for(await _request_fields(request))
    if not (options.text.strip() or options.prompt.strip()):
        raise BadRequest("give `text` or `prompt`", code="empty_input")
    async with gw.admission.session(request.remote or "?"):  # 503 + Retry-After when full
        session = await channel.admitted_session(options)  # ... or when the engine is booked
        try:
            with channel.counted():
                async with sse_response(request, response_cls=CountingEventSource, allow_all_methods=True) as resp:
                    channel.resp = resp
                    await _stream(session, channel)
                    async with send_limits(request):
                        await resp.write_eof()  # the stream's end, within the same limits
            return resp
        except SlowClient as exc:  # it can take no event: cut off, counted as on the WebSocket
            cut_off(request, channel.name, exc)
            return web.Response(status=499)
        except ConnectionError:
            return web.Response(status=499)  # the client went away; nothing more to send
        finally:
            await session.aclose()  # a client that went away stops its synthesis here


async def _stream(session: StreamSession, channel: SseChannel) -> None:
    await channel.send(Event("ready", session.ready_fields()))
    if session.options.prompt:
        session.push_prompt(session.options.prompt)
    else:
        session.push_text(session.options.text)
        session.end()
    await channel.pump(session)
