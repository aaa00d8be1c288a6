"""The streamed replies of ``POST /v1/audio/speech``: chunked audio, or OpenAI's server-sent events.

Both take the reply's payloads as the pipeline makes them and wait for the first one before
they answer: an error before it (bad voice, engine down, nothing to speak) is still a plain
HTTP error with the JSON shape of every route. After it the status is sent, so an error ends
the audio stream without its last chunk (the client sees a truncated transfer, not a short
file that looks whole), and the SSE stream with an ``error`` event. A client that stops reading
is cut off as on the channels (``slowclient.py``: ``send_timeout_s``, ``send_queue_bytes``), which
ends its session and frees its admission slot.

SSE is OpenAI's own form (``stream_format: "sse"``): bare ``data:`` lines of JSON, ``\\n``
line ends, ``{"type": "speech.audio.delta", "audio": <base64>}`` per payload (whole MP3
frames in each) and finally ``{"type": "speech.audio.done", "usage": {...}}``.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web
from aiohttp_sse import EventSourceResponse

from ..core.events import error_event
from ..errors import SlowClient
from .slowclient import cut_off, send_limits

log = logging.getLogger(__name__)


def usage(text: str) -> dict[str, int]:
    """``speech.audio.done``'s usage: input tokens are the input's characters, as OpenAI bills
    tts-1; Kokoro makes no audio tokens, so output is 0."""
    return {"input_tokens": len(text), "output_tokens": 0, "total_tokens": len(text)}


async def stream_audio(
    request: web.Request, payloads: AsyncIterator[bytes], headers: dict[str, str]
) -> web.StreamResponse:
    """Each payload written as it comes (chunked transfer)."""
    first = await anext(payloads)  # before the status: an error here is the route's JSON error
    response = web.StreamResponse(headers=headers)
    response.enable_chunked_encoding()
    await response.prepare(request)
    try:
        data: bytes | None = first
        while data is not None:
            async with send_limits(request):  # a reader that stops is cut off
                await response.write(data)
            data = await anext(payloads, None)
        async with send_limits(request):
            await response.write_eof()
    except ConnectionError:  # the client left: aclosing() in the route stops its synthesis
        log.debug("streamed speech: the client left")
    except SlowClient as exc:
        cut_off(request, "speech", exc)
    except Exception as exc:
        log.warning("streamed speech failed after the headers: %s", error_event(exc).fields["message"])
        if request.transport is not None:
            request.transport.abort()
    return response


def _data(fields: dict[str, Any]) -> str:
    return json.dumps(fields, separators=(",", ":"))


async def stream_sse(
    request: web.Request, payloads: AsyncIterator[bytes], headers: dict[str, str], done_usage: dict[str, int]
) -> web.StreamResponse:
    """``speech.audio.delta`` per payload, then ``speech.audio.done`` (or ``error``)."""
    first = await anext(payloads)
    async with EventSourceResponse(headers=headers, sep="\n", allow_all_methods=True) as resp:
        await resp.prepare(request)
        try:
            await _events(request, resp, first, payloads, done_usage)
        except SlowClient as exc:  # it can take no event: cut off
            cut_off(request, "speech", exc)
            return web.Response(status=499)
        except ConnectionError:  # the client left: aclosing() in the route stops its synthesis
            log.debug("streamed speech events: the client left")
            return web.Response(status=499)
    return resp


async def _events(
    request: web.Request,
    resp: EventSourceResponse,
    first: bytes,
    payloads: AsyncIterator[bytes],
    done_usage: dict[str, int],
) -> None:
    async def send(fields: dict[str, Any]) -> None:
        async with send_limits(request):  # a reader that stops is cut off
            await resp.send(_data(fields))

    try:
        data: bytes | None = first
        while data is not None:
            await send({"type": "speech.audio.delta", "audio": base64.b64encode(data).decode("ascii")})
            data = await anext(payloads, None)
    except (ConnectionError, SlowClient):
        raise
    except Exception as exc:
        await send({"type": "error", "error": error_event(exc).fields})
        return
    await send({"type": "speech.audio.done", "usage": done_usage})
    async with send_limits(request):
        await resp.write_eof()
