"""The default agent behind ``prompt``: a deterministic, offline stand-in for a streaming LLM.

It answers from a small set of agent-like replies chosen by the prompt, token by token, with a
first-token delay and a token rate that default to a typical hosted LLM (about 350 ms to the
first token, then about 60 tokens a second). It lets the agent case be demonstrated and
measured with no external service.
"""

from __future__ import annotations

import asyncio
import re
import zlib
from collections.abc import AsyncIterator

from .base import Message

REPLIES = (
    "Sure, I can help with that. Your order shipped this morning and should arrive on Thursday. "
    "You can track it from the link in your confirmation e-mail. Is there anything else you need?",
    "Good question. The meeting was moved to 3:30 p.m. on Friday, in room B. "
    "I have updated the invitation for everyone on the list. Dr. Chen will join remotely.",
    "Here is a quick summary. Revenue grew by 12 percent compared with last quarter, "
    "mostly from new subscriptions. Costs stayed flat. "
    "The team expects a similar result next quarter, if the launch goes to plan.",
    "Of course. To reset your password, open the settings page and choose security. "
    "Then pick reset password and follow the steps in the e-mail we send you. "
    "The link expires after thirty minutes, so use it soon.",
    "Absolutely, let me check. The weather in Seattle today is cloudy with light rain, "
    "and a high of 54 degrees. Tomorrow looks drier. Bring a jacket either way!",
)

_TOKEN = re.compile(r"\s*\S{1,6}")  # about how an LLM tokenizer cuts English: short pieces


def pick_reply(prompt: str) -> str:
    return REPLIES[zlib.crc32(prompt.strip().lower().encode()) % len(REPLIES)]


def tokenize(text: str) -> list[str]:
    return _TOKEN.findall(text)


class SimulatedAgent:
    """Streams a canned reply to the last user message token by token, paced like a hosted LLM."""

    backend = "simulated"
    label = "simulated"

    def __init__(self, *, first_token_ms: float = 350.0, tokens_per_s: float = 60.0) -> None:
        self.first_token_ms = first_token_ms
        self.tokens_per_s = tokens_per_s

    async def aclose(self) -> None:
        pass

    async def stream(self, messages: list[Message]) -> AsyncIterator[str]:
        prompt = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
        tokens = tokenize(pick_reply(prompt))
        loop = asyncio.get_running_loop()
        start = loop.time() + self.first_token_ms / 1000
        gap = 1 / self.tokens_per_s if self.tokens_per_s > 0 else 0.0
        for n, token in enumerate(tokens):
            # pace against the clock, not with fixed sleeps, so slow scheduling does not drift
            delay = start + n * gap - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            yield token
