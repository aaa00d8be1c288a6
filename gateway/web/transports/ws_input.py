"""WebSocket client messages (validation, the per-session rate limit, the idle clock) and the
protocol's numbers: close codes for errors, frame header sizes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from aiohttp import WSCloseCode

from ...config import Settings
from ...errors import BadRequest, GatewayError, PayloadTooLarge, quoted
from ..jsonbody import decode_object

CLIENT_TYPES = ("start", "text", "prompt", "flush", "end", "cancel", "ping")


class Fatal(Exception):
    """The session cannot go on: send ``error`` with ``code``, then close with ``close_code``."""

    def __init__(self, close_code: int, code: str, message: str) -> None:
        super().__init__(message)
        self.close_code, self.code, self.message = close_code, code, message

    @property
    def error(self) -> GatewayError:
        return GatewayError(self.message, code=self.code)


class RateLimiter:
    """Token bucket: ``rate`` messages a second on average, bursts up to ``burst``."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate, self.burst = rate, float(burst)
        self.tokens = float(burst)
        self.stamp: float | None = None

    def allow(self, now: float) -> bool:
        if self.rate <= 0:
            return True
        if self.stamp is not None:
            self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


class IdleClock:
    """When a socket has gone ``timeout_s`` with nothing from the client (``touch`` on each of
    its messages) and no reply in progress (``busy``; ``touch`` on each event sent too, so the
    time counts from a reply's last event)."""

    def __init__(self, timeout_s: float, busy: Callable[[], bool]) -> None:
        self.timeout_s, self.busy = timeout_s, busy
        self.loop = asyncio.get_running_loop()
        self.last = self.loop.time()
        self.holds = 0  # client messages being handled

    def touch(self) -> None:
        self.last = self.loop.time()

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """A client message: never idle while it is handled, and the clock restarts after it."""
        self.holds += 1
        self.touch()
        try:
            yield
        finally:
            self.holds -= 1
            self.touch()

    async def expired(self) -> None:
        """Return once the socket is idle (never, with a timeout of 0)."""
        if self.timeout_s <= 0:
            await asyncio.Event().wait()
        while True:
            await asyncio.sleep(max(0.0, self.last + self.timeout_s - self.loop.time()))
            if self.loop.time() - self.last < self.timeout_s:
                continue  # touched meanwhile
            if not self.holds and not self.busy():
                return
            self.touch()  # a reply still at work (a slow segment): look again a timeout later


def parse_message(data: str) -> dict[str, Any]:
    """A text frame as a JSON object; ``invalid_json`` (the session goes on) if it is not one."""
    return decode_object(data, "messages must be JSON objects")


def validate_message(msg: dict[str, Any], settings: Settings) -> str:
    """Check a client message's shape; return its type."""
    kind = msg.get("type")
    if kind not in CLIENT_TYPES:
        raise BadRequest(
            f"unknown message type {quoted(kind)}; expected one of {', '.join(CLIENT_TYPES)}", code="unknown_type"
        )
    if kind == "text":
        text = msg.get("text")
        if not isinstance(text, str):
            raise BadRequest("`text` needs a string field `text`", code="invalid_message")
        if len(text) > settings.max_text_chars:
            raise PayloadTooLarge(f"text is {len(text)} characters; the limit is {settings.max_text_chars}")
    elif kind == "prompt":
        prompt = msg.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise BadRequest("`prompt` needs a non-empty string field `prompt`", code="invalid_message")
        if len(prompt) > settings.max_prompt_chars:
            raise PayloadTooLarge(f"prompt is {len(prompt)} characters; the limit is {settings.max_prompt_chars}")
    elif kind == "cancel" and msg.get("played_ms") is not None:
        played = msg["played_ms"]
        if isinstance(played, bool) or not isinstance(played, (int, float)) or not 0 <= played < 1e9:
            raise BadRequest(
                "`played_ms` must be the playback position in the reply, in ms (>= 0)", code="invalid_message"
            )
    return str(kind)


def close_code_for(exc: GatewayError) -> int:
    if exc.status in (429, 400, 401, 403, 413):
        return WSCloseCode.POLICY_VIOLATION
    if exc.status == 503:
        return WSCloseCode.TRY_AGAIN_LATER
    return WSCloseCode.INTERNAL_ERROR


def frame_overhead(n: int) -> int:
    """Bytes of a server-to-client (unmasked) WebSocket frame header for an n-byte payload."""
    return 2 if n < 126 else 4 if n < 65536 else 10
