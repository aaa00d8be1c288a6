"""The OpenAI-compatible agent against a real loopback server that sends broken answers:
wrong shapes, missing keys, bytes that are not UTF-8, bodies that are not JSON, a connection
reset mid-reply. Each one must end the turn with the agent's own error
(``agent_error``, a ``GatewayError``), never another exception's traceback."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from bench.servers import serve_app
from gateway.agent.base import AgentError
from gateway.agent.openai_chat import OpenAIChat

GOOD = b'data: {"choices": [{"delta": {"content": "Hello."}}]}\n\n'
DONE = b"data: [DONE]\n\n"  # after a bad event: the stream is otherwise whole
SSE = "text/event-stream"
JSON = "application/json"

# (status, content type, body, whether the connection is reset after it)
BROKEN: dict[str, tuple[int, str, bytes, bool]] = {
    "choices not a list": (200, SSE, b'data: {"choices": "oops"}\n\n' + DONE, False),
    "choice not an object": (200, SSE, b'data: {"choices": [1]}\n\n' + DONE, False),
    "delta not an object": (200, SSE, b'data: {"choices": [{"delta": "hi"}]}\n\n' + DONE, False),
    "content not a string": (200, SSE, b'data: {"choices": [{"delta": {"content": 5}}]}\n\n' + DONE, False),
    "error message not a string": (200, SSE, b'data: {"error": {"message": {"nested": 1}}}\n\n' + DONE, False),
    "event not UTF-8": (200, SSE, b'data: {"choices": [{"delta": {"content": "\xff\xfe"}}]}\n\n' + DONE, False),
    "reset mid-reply": (200, SSE, GOOD, True),
    "answer not JSON": (200, JSON, b'{"choices": [', False),
    "answer not UTF-8": (200, JSON, b'{"choices": "\xff"}', False),
    "answer without choices": (200, JSON, b'{"id": "x"}', False),
    "answer content not a string": (200, JSON, b'{"choices": [{"message": {"content": [1]}}]}', False),
    "error body not UTF-8": (500, "text/plain; charset=utf-8", b"\xff\xfe failed", False),
    "error body reset": (500, "text/plain", b"part", True),
}


def broken_app(status: int, content_type: str, body: bytes, reset: bool) -> web.Application:
    async def completions(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(status=status, headers={"Content-Type": content_type})
        if reset:
            resp.headers["Content-Length"] = str(len(body) + 1000)  # promises more than comes
        await resp.prepare(request)
        await resp.write(body)
        if reset:
            assert request.transport is not None
            request.transport.abort()
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    return app


async def reply(chat: OpenAIChat) -> AsyncIterator[str]:
    async for delta in chat.stream([{"role": "user", "content": "Hello?"}]):
        yield delta


@pytest.mark.parametrize("case", sorted(BROKEN))
async def test_a_broken_answer_is_the_agents_error(case: str) -> None:
    async with serve_app(broken_app(*BROKEN[case])) as url:
        chat = OpenAIChat(url + "/v1", "test-model", key="sk-secret-key-0123456789")
        try:
            with pytest.raises(AgentError) as caught:
                async for _ in reply(chat):
                    pass
        finally:
            await chat.aclose()
    assert caught.value.code == "agent_error" and caught.value.status == 502
    assert caught.value.message.startswith("the model")  # says whose fault it is
    assert "sk-secret" not in caught.value.message and len(caught.value.message) < 400
