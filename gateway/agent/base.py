"""What every agent source is: a ``stream(messages)`` of text deltas, and the errors it raises.

A message is ``{"role": "system" | "user" | "assistant", "content": str}``, the shape both
OpenAI's chat API and (converted) Bedrock's Converse take. Errors say what went wrong upstream
without ever carrying the key: upstream text is passed through ``redact`` first.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from ..errors import GatewayError

Message = dict[str, str]


class Agent(Protocol):
    backend: str  # simulated | openai | bedrock
    label: str  # what a page shows: "simulated", or the model's name

    def stream(self, messages: list[Message]) -> AsyncIterator[str]:
        """The reply to ``messages`` (system first, the new user message last), delta by delta."""
        ...

    async def aclose(self) -> None: ...


class AgentError(GatewayError):
    """The model answered with an error, or its stream broke mid-reply."""

    code = "agent_error"
    status = 502


class AgentUnavailable(AgentError):
    """The model's server could not be reached (or has no credentials to reach it with)."""

    code = "agent_unavailable"
    status = 503


class AgentTimeout(AgentError):
    """No token within ``agent_timeout_s``."""

    code = "agent_timeout"
    status = 504


def redact(text: str, *secrets: str, limit: int = 200) -> str:
    """``text`` cut to ``limit`` characters with every secret (and any piece of it a server
    might echo, such as a key's tail) replaced by ``***``."""
    for secret in secrets:
        if len(secret) >= 8:
            for piece in {secret, secret[:12], secret[-8:]}:
                text = text.replace(piece, "***")
    text = " ".join(text.split())
    return text[:limit] + ("..." if len(text) > limit else "")


def one_turn(prompt: str, system: str = "") -> list[Message]:
    """The messages of a conversation's first turn."""
    head = [{"role": "system", "content": system}] if system else []
    return head + [{"role": "user", "content": prompt}]
