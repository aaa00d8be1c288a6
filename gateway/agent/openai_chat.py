"""Any OpenAI-compatible chat server (OpenAI, vLLM, Ollama, llama.cpp, LiteLLM...):
``POST {agent_url}/chat/completions`` with ``stream: true``, read as Server-Sent Events.

Each ``data:`` event's ``choices[0].delta.content`` is yielded the moment it arrives; the
stream ends at ``data: [DONE]``. The key (from the environment variable ``agent_api_key_env``)
goes only into the ``Authorization`` header: never into a message, an event or a log line.
Anything else the server sends (a chunk of another shape, bytes that are not UTF-8, a body
that is not JSON, a connection reset) is an ``AgentError`` naming it, redacted and cut short.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from .base import AgentError, AgentUnavailable, Message, redact


class OpenAIChat:
    backend = "openai"

    def __init__(
        self,
        url: str,
        model: str,
        *,
        key: str = "",
        max_tokens: int = 0,
        connect_timeout_s: float = 10.0,
        http: aiohttp.ClientSession | None = None,
    ) -> None:
        if not url or not model:
            raise ValueError(
                "the openai agent needs agent_url (a base URL such as http://127.0.0.1:11434/v1) and agent_model"
            )
        base = url.rstrip("/")
        self.url = base if base.endswith("/chat/completions") else base + "/chat/completions"
        self.model = self.label = model
        self.max_tokens = max_tokens
        self._key = key
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s or None)
        self._http, self._own_http = http, http is None

    def __repr__(self) -> str:  # never the key
        return f"OpenAIChat(url={self.url!r}, model={self.model!r})"

    async def aclose(self) -> None:
        if self._own_http and self._http is not None:
            await self._http.close()
            self._http = None

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None:  # made in the running loop, on first use
            self._http = aiohttp.ClientSession(timeout=self._timeout)
        return self._http

    async def stream(self, messages: list[Message]) -> AsyncIterator[str]:
        body: dict[str, Any] = {"model": self.model, "messages": messages, "stream": True}
        if self.max_tokens > 0:
            body["max_tokens"] = self.max_tokens
        try:
            resp = await self._session().post(self.url, json=body, headers=self._headers)
        except (aiohttp.ClientError, OSError) as exc:
            raise AgentUnavailable(f"cannot reach the model server at {self.url}: {type(exc).__name__}") from None
        async with resp:
            # whatever the server sends (a reset, bytes that are not UTF-8, JSON of any shape)
            # ends here as the agent's own error, never as another exception
            try:
                if resp.status >= 400:
                    text = (await resp.read()).decode("utf-8", "replace")
                    raise AgentError(f"the model server answered {resp.status}: {self._clean(text)}")
                if resp.content_type == "application/json":  # a server that does not stream
                    yield _message_text(_json(await resp.read(), self), self)
                    return
                async for delta in self._deltas(resp):
                    yield delta
            except (aiohttp.ClientError, OSError) as exc:  # a reset, a read timeout
                raise AgentError(f"the model's stream broke mid-reply: {type(exc).__name__}") from None

    async def _deltas(self, resp: aiohttp.ClientResponse) -> AsyncIterator[str]:
        data: list[str] = []
        finished = False
        async for raw in resp.content:
            line = _utf8(raw, self).rstrip("\r\n")
            if line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
                continue
            if line or not data:
                continue  # comments, other fields, keep-alives
            payload, data = "\n".join(data), []
            if payload.strip() == "[DONE]":
                return
            texts, done = _chunk_deltas(self._parse(payload), self)
            for text in texts:
                yield text
            finished = finished or done
        if not finished:
            raise AgentError("the model's stream ended mid-reply (no [DONE])")

    def _parse(self, payload: str) -> dict[str, Any]:
        chunk = _json(payload, self)
        if not isinstance(chunk, dict):
            raise AgentError("the model server sent an event that is not a JSON object")
        if err := chunk.get("error"):
            message = err.get("message", "") if isinstance(err, dict) else err
            raise AgentError(f"the model failed mid-reply: {self._clean(str(message))}")
        return chunk

    def _clean(self, text: str) -> str:
        return redact(text, self._key)


def _utf8(raw: bytes, chat: OpenAIChat) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise AgentError(f"the model server sent bytes that are not UTF-8: {chat._clean(repr(raw))}") from None


def _json(payload: str | bytes, chat: OpenAIChat) -> Any:
    text = _utf8(payload, chat) if isinstance(payload, bytes) else payload
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # not JSON, nested too deep, an integer too long
        raise AgentError(f"the model server sent an event that is not JSON: {chat._clean(text)}") from None


def _chunk_deltas(chunk: dict[str, Any], chat: OpenAIChat) -> tuple[list[str], bool]:
    """The text deltas of one streamed chunk, and whether a choice finished; an error for any
    other shape than ``{"choices": [{"delta": {"content": str}, "finish_reason": ...}]}``."""
    choices = chunk.get("choices") or []
    texts: list[str] = []
    finished = False
    for choice in choices if isinstance(choices, list) else [choices]:
        delta = (choice.get("delta") or {}) if isinstance(choice, dict) else None
        content = delta.get("content") if isinstance(delta, dict) else None
        if not isinstance(delta, dict) or not isinstance(content, (str, type(None))):
            raise AgentError(f"the model server sent a chunk of an unknown shape: {chat._clean(json.dumps(chunk))}")
        if content:
            texts.append(content)
        finished = finished or bool(choice.get("finish_reason"))
    return texts, finished


def _message_text(body: Any, chat: OpenAIChat) -> str:
    try:
        content = body["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise AgentError(
            f"the model server's answer has no choices[0].message: {chat._clean(json.dumps(body))}"
        ) from None
    if not isinstance(content, (str, type(None))):
        raise AgentError(f"the model server's answer is not text: {chat._clean(json.dumps(body))}")
    return content or ""
