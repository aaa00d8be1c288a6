"""The agent behind ``prompt``: a language model whose streamed reply is spoken as it arrives.

``agent_backend`` chooses it: ``simulated`` (the default: canned replies paced like a hosted
LLM, offline), ``openai`` (any OpenAI-compatible chat server) or ``bedrock`` (Amazon Bedrock's
ConverseStream through boto3, imported only when chosen). The conversation that holds one
listener's turns is the core's (``gateway.core.conversation``).
"""

from __future__ import annotations

import os

from ..config import Settings
from .base import Agent, AgentError, AgentTimeout, AgentUnavailable, Message, one_turn
from .simulated import REPLIES, SimulatedAgent, pick_reply, tokenize

BACKENDS = ("simulated", "openai", "bedrock")

__all__ = [
    "BACKENDS",
    "REPLIES",
    "Agent",
    "AgentError",
    "AgentTimeout",
    "AgentUnavailable",
    "Message",
    "SimulatedAgent",
    "create_agent",
    "one_turn",
    "pick_reply",
    "tokenize",
]


def create_agent(settings: Settings, env: dict[str, str] | None = None) -> Agent:
    """The agent ``settings`` name; the key comes from the environment, never from settings."""
    backend = settings.agent_backend
    if backend == "simulated":
        return SimulatedAgent(first_token_ms=settings.agent_first_token_ms, tokens_per_s=settings.agent_tokens_per_s)
    if backend == "openai":
        from .openai_chat import OpenAIChat

        key = (
            (os.environ if env is None else env).get(settings.agent_api_key_env, "")
            if settings.agent_api_key_env
            else ""
        )
        return OpenAIChat(
            settings.agent_url,
            settings.agent_model,
            key=key,
            max_tokens=settings.agent_max_tokens,
            connect_timeout_s=settings.agent_timeout_s,
        )
    if backend == "bedrock":
        from .bedrock import BedrockConverse

        return BedrockConverse(
            settings.agent_model,
            region=settings.agent_region,
            endpoint_url=settings.agent_url,
            max_tokens=settings.agent_max_tokens,
            timeout_s=settings.agent_timeout_s,
        )
    raise ValueError(f"unknown agent_backend {backend!r}; choose one of {', '.join(BACKENDS)}")
