"""A local OpenAI-compatible chat server: real HTTP, real SSE chunks, a required bearer key.

``ChatStub`` serves ``POST /v1/chat/completions`` with ``stream: true`` the way OpenAI, vLLM
and Ollama do: one ``data: {chat.completion.chunk}`` event per token, a last chunk with
``finish_reason``, then ``data: [DONE]``. Each request takes the next ``Reply`` from
``replies`` (or ``default``); a ``Reply`` can hold its stream after some tokens until the test
releases it, fail with a status, hang before its first token, or cut the connection mid-reply.
A wrong or missing key gets 401 with a body that echoes the key it was given, as OpenAI's does:
the gateway must keep that out of everything it sends and logs.
"""

from __future__ import annotations

import asyncio
import collections
import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Reply:
    tokens: list[str]
    status: int = 200  # >= 400: answer this status with an OpenAI-style error body
    hold_after: int | None = None  # send this many tokens, then wait for ``release``
    release: asyncio.Event = field(default_factory=asyncio.Event)
    hang: bool = False  # send nothing at all (until the stub stops)
    cut_after: int | None = None  # send this many tokens, then drop the connection


@dataclass
class ChatStub:
    key: str
    default: Reply = field(default_factory=lambda: Reply(["Hello", " there", "."]))
    replies: collections.deque[Reply] = field(default_factory=collections.deque)
    requests: list[dict[str, Any]] = field(default_factory=list)  # bodies, in order
    disconnects: int = 0  # streams the client abandoned before [DONE]
    arrived: asyncio.Event = field(default_factory=asyncio.Event)  # set at each request
    stopping: asyncio.Event = field(default_factory=asyncio.Event)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.completions)
        app.on_shutdown.append(self._stop)
        return app

    async def _stop(self, app: web.Application) -> None:
        self.stopping.set()

    async def completions(self, request: web.Request) -> web.StreamResponse:
        given = request.headers.get("Authorization", "")
        if given != f"Bearer {self.key}":
            shown = given.removeprefix("Bearer ") or "(none)"
            return _error(401, f"Incorrect API key provided: {shown}.", "invalid_api_key")
        body = await request.json()
        self.requests.append(body)
        self.arrived.set()
        reply = self.replies.popleft() if self.replies else self.default
        if reply.status >= 400:
            return _error(reply.status, "The server had an error while processing your request.", "server_error")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        try:
            await self._send(request, resp, reply, body.get("model", ""))
        except (ConnectionError, asyncio.CancelledError):
            self.disconnects += 1
            raise
        return resp

    async def _send(self, request: web.Request, resp: web.StreamResponse, reply: Reply, model: str) -> None:
        if reply.hang:
            await self.stopping.wait()
            return
        for n, token in enumerate(reply.tokens):
            if n == reply.hold_after:
                await _first(reply.release.wait(), self.stopping.wait())
            if n == reply.cut_after:
                if request.transport is not None:
                    request.transport.abort()  # mid-reply: the chunked body never ends
                raise ConnectionResetError("cut by the test")
            await resp.write(_event(_chunk(model, {"content": token}, None)))
        await resp.write(_event(_chunk(model, {}, "stop")))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()


async def _first(*waits: Any) -> None:
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()


def _chunk(model: str, delta: dict[str, str], finish: str | None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _event(body: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(body)}\n\n".encode()


def _error(status: int, message: str, code: str) -> web.Response:
    return web.json_response(
        {"error": {"message": message, "type": "invalid_request_error", "code": code}}, status=status
    )
