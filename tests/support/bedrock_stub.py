"""A local stand-in for the Bedrock runtime's ``ConverseStream``, speaking AWS's event-stream
encoding, for boto3 to talk to over real HTTP (``endpoint_url``).

``POST /model/{modelId}/converse-stream`` takes the Converse JSON body and answers
``application/vnd.amazon.eventstream``: binary messages (a prelude with the total and header
lengths and its CRC32, typed headers, a JSON payload, a CRC32 of the whole message), each an
``event`` (``:event-type`` messageStart, contentBlockDelta, contentBlockStop, messageStop,
metadata) or an ``exception`` (``:exception-type`` such as modelStreamErrorException).
Requests must be SigV4-signed for the ``bedrock`` service (signatures are not verified: no
secrets here). Service errors before the stream are HTTP errors with ``x-amzn-ErrorType``.
"""

from __future__ import annotations

import asyncio
import collections
import json
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

EVENT_STREAM = "application/vnd.amazon.eventstream"


def encode_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One event-stream message; every header is a string (value type 7)."""
    head = b""
    for name, value in headers.items():
        raw = value.encode()
        head += bytes([len(name)]) + name.encode() + b"\x07" + struct.pack(">H", len(raw)) + raw
    prelude = struct.pack(">II", 12 + len(head) + len(payload) + 4, len(head))
    message = prelude + struct.pack(">I", zlib.crc32(prelude)) + head + payload
    return message + struct.pack(">I", zlib.crc32(message))


def event(kind: str, body: dict[str, Any]) -> bytes:
    return encode_message(
        {":event-type": kind, ":content-type": "application/json", ":message-type": "event"}, json.dumps(body).encode()
    )


def exception(kind: str, message: str) -> bytes:
    return encode_message(
        {":exception-type": kind, ":content-type": "application/json", ":message-type": "exception"},
        json.dumps({"message": message}).encode(),
    )


@dataclass
class Reply:
    tokens: list[str]
    status: int = 200  # >= 400: an HTTP error of this status (ThrottlingException etc.)
    error_type: str = "InternalServerException"
    hold_after: int | None = None  # send this many tokens, then wait for ``release``
    release: asyncio.Event = field(default_factory=asyncio.Event)
    stream_error_after: int | None = None  # after this many tokens, a modelStreamErrorException


@dataclass
class ConverseStub:
    default: Reply = field(default_factory=lambda: Reply(["Hello", " there", "."]))
    replies: collections.deque[Reply] = field(default_factory=collections.deque)
    requests: list[dict[str, Any]] = field(default_factory=list)  # {"model", "body"}
    disconnected: asyncio.Event = field(default_factory=asyncio.Event)  # a client left mid-stream
    stopping: asyncio.Event = field(default_factory=asyncio.Event)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/model/{model}/converse-stream", self.converse_stream)
        return app

    async def converse_stream(self, request: web.Request) -> web.StreamResponse:
        auth = request.headers.get("Authorization", "")
        if not (auth.startswith("AWS4-HMAC-SHA256 ") and "/bedrock/aws4_request" in auth):
            return _error(403, "MissingAuthenticationTokenException", "Missing Authentication Token")
        body = await request.json()
        self.requests.append({"model": request.match_info["model"], "body": body})
        reply = self.replies.popleft() if self.replies else self.default
        if reply.status >= 400:
            return _error(reply.status, reply.error_type, "The service could not answer.")
        resp = web.StreamResponse(headers={"Content-Type": EVENT_STREAM})
        await resp.prepare(request)
        try:
            await self._send(resp, reply)
        except (ConnectionError, asyncio.CancelledError):
            self.disconnected.set()
            raise
        return resp

    async def _send(self, resp: web.StreamResponse, reply: Reply) -> None:
        await resp.write(event("messageStart", {"role": "assistant"}))
        for n, token in enumerate(reply.tokens):
            if n == reply.hold_after:
                waits = [asyncio.ensure_future(reply.release.wait()), asyncio.ensure_future(self.stopping.wait())]
                try:
                    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for w in waits:
                        w.cancel()
                await resp.write(b"")  # a client that left shows here
            if n == reply.stream_error_after:
                await resp.write(exception("modelStreamErrorException", "The model stopped."))
                await resp.write_eof()
                return
            await resp.write(event("contentBlockDelta", {"delta": {"text": token}, "contentBlockIndex": 0}))
        await resp.write(event("contentBlockStop", {"contentBlockIndex": 0}))
        await resp.write(event("messageStop", {"stopReason": "end_turn"}))
        await resp.write(
            event(
                "metadata",
                {
                    "usage": {
                        "inputTokens": 1,
                        "outputTokens": len(reply.tokens),
                        "totalTokens": 1 + len(reply.tokens),
                    },
                    "metrics": {"latencyMs": 1},
                },
            )
        )
        await resp.write_eof()


def _error(status: int, kind: str, message: str) -> web.Response:
    return web.Response(
        status=status,
        body=json.dumps({"message": message}).encode(),
        headers={"x-amzn-ErrorType": kind, "Content-Type": "application/json"},
    )
