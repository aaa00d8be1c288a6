"""A listener's conversation with the agent: the history sent with each turn, and each turn's
record of what was streamed, what was spoken and how it ended.

Each ``prompt`` is a ``Turn``. Its request carries the system prompt, the earlier turns (at
most ``agent_history_turns``) and the new user message. When the turn ends, the assistant
message kept for later turns is what the listener heard: the whole reply after ``done``; after
a barge-in, the ``heard_text`` of ``cancelled`` (up to the last word that started before the
client's ``played_ms``); after a failure, the text already sent as audio (the reply's
``Transcript``). A turn nobody heard anything of is dropped whole, so the history always
alternates user / assistant.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from ..agent.base import Agent, AgentError, AgentTimeout, Message
from ..config import Settings
from ..metrics import Metrics
from .heard import Transcript

log = logging.getLogger(__name__)

#: error codes after which a conversation goes on (the socket stays usable for the next turn)
AGENT_CODES = frozenset({"agent_error", "agent_unavailable", "agent_timeout"})


class Conversation:
    def __init__(self, agent: Agent, settings: Settings, metrics: Metrics | None = None) -> None:
        self.agent, self.settings, self.metrics = agent, settings, metrics
        self.history: list[tuple[str, str]] = []  # (user, assistant as heard), oldest first
        self.turns = 0  # turns started

    def messages(self, prompt: str) -> list[Message]:
        """The request for a new turn: system prompt, earlier turns, the new user message."""
        out: list[Message] = []
        if self.settings.agent_system_prompt:
            out.append({"role": "system", "content": self.settings.agent_system_prompt})
        for user, assistant in self.history:
            out += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
        return out + [{"role": "user", "content": prompt}]

    def start(self, prompt: str, transcript: Transcript | None = None) -> Turn:
        self.turns += 1
        return Turn(self, prompt, transcript)

    def keep(self, prompt: str, heard: str) -> None:
        if not heard.strip():
            return
        self.history.append((prompt, heard.strip()))
        limit = max(0, self.settings.agent_history_turns)
        del self.history[: max(0, len(self.history) - limit)]


class Turn:
    """One prompt and its reply. ``observe`` sees every event the channel sends for it."""

    def __init__(self, conversation: Conversation, prompt: str, transcript: Transcript | None = None) -> None:
        self.conversation, self.prompt = conversation, prompt
        self.transcript = transcript  # the reply's: what was sent, and when each word is heard
        self.reply: list[str] = []  # the deltas, as they came
        self.sentences: dict[int, str] = {}  # segments announced to the client
        self.heard_through = -1  # the last segment with audio sent
        self.outcome = ""  # done | cancelled | an agent error code

    async def deltas(self) -> AsyncIterator[str]:
        """The agent's reply, delta by delta; ``AgentTimeout`` when no token comes within
        ``agent_timeout_s``, ``AgentError`` for anything else that goes wrong upstream."""
        conv = self.conversation
        timeout = conv.settings.agent_timeout_s
        started = time.perf_counter()
        stream = aiter(conv.agent.stream(conv.messages(self.prompt)))
        try:
            while True:
                try:
                    async with asyncio.timeout(timeout if timeout > 0 else None):
                        delta = await anext(stream)
                except StopAsyncIteration:
                    return
                except TimeoutError:
                    where = "the first token" if not self.reply else "the next token"
                    raise AgentTimeout(
                        f"the agent ({conv.agent.label}) sent no token for {timeout:g} s waiting for {where}"
                    ) from None
                except AgentError:
                    raise
                except Exception:  # a bug or an unexpected answer: logged here, a clean error out
                    log.exception("agent %s failed", conv.agent.label)
                    raise AgentError(f"the agent ({conv.agent.label}) failed") from None
                if not self.reply and conv.metrics is not None:
                    conv.metrics.agent_first_token.labels(conv.agent.backend).observe(time.perf_counter() - started)
                self.reply.append(delta)
                yield delta
        finally:
            await stream.aclose()  # type: ignore[attr-defined]

    def observe(self, kind: str, fields: dict[str, Any]) -> None:
        if kind == "sentence":
            self.sentences[fields["index"]] = fields["text"]
        elif kind == "audio":
            self.heard_through = max(self.heard_through, fields.get("sentence", 0))
        elif kind == "done":
            self.finish("done", "".join(self.reply))
        elif kind == "error":
            self.finish(str(fields.get("code")), self.heard_text())

    def heard_text(self) -> str:
        """What was sent of this reply as audio (word by word where the engine gives word
        times); without a transcript, the segments whose audio was sent, whole."""
        if self.transcript is not None:
            return self.transcript.heard()
        return " ".join(self.sentences[i] for i in sorted(self.sentences) if i <= self.heard_through)

    def cancel(self, heard: str | None = None) -> None:
        """Barge-in: keep ``heard`` (the ``heard_text`` of ``cancelled``), else what was sent."""
        self.finish("cancelled", self.heard_text() if heard is None else heard)

    def finish(self, outcome: str, kept: str) -> None:
        if self.outcome:
            return
        self.outcome = outcome
        conv = self.conversation
        conv.keep(self.prompt, kept)
        if conv.metrics is not None:
            conv.metrics.agent_turns.labels(conv.agent.backend, outcome).inc()
