"""The gateway's error hierarchy, translated to the wire only at the edges.

HTTP routes turn these into a status and ``{"error": {"code", "message"}}``; the SSE channel
into an ``error`` event; the WebSocket channel into an ``error`` event and, where the session
cannot go on, a close code.
"""

from __future__ import annotations

from typing import Any

# The codes of request faults (400s); an upstream gateway (a model container, SageMaker) that
# answers one of these is passing on the client's fault, not failing itself.
CLIENT_CODES = frozenset(
    {
        "bad_request",
        "empty_input",
        "invalid_option",
        "invalid_speed",
        "too_large",
        "unknown_format",
        "unknown_voice",
        "unsupported_language",
    }
)


QUOTE_CHARS = 80  # of a client's value quoted in an error message


def quoted(value: object, limit: int = QUOTE_CHARS) -> str:
    """``repr(value)`` for an error message, cut to ``limit`` characters with "…" marking the
    cut: an error quotes enough of a bad value to recognise it, never a 100 kB value whole."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


class GatewayError(Exception):
    """Base class. ``code`` is the stable machine-readable name, ``status`` the HTTP status."""

    code = "internal_error"
    status = 500

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


class BadRequest(GatewayError):
    code = "bad_request"
    status = 400


class NothingToSpeak(BadRequest):
    """The whole text (or reply) has nothing a voice can say: never a reply without audio."""

    code = "nothing_to_speak"


class PayloadTooLarge(BadRequest):
    code = "too_large"
    status = 413


class Unauthorized(GatewayError):
    code = "unauthorized"
    status = 401


class Forbidden(GatewayError):
    code = "forbidden"
    status = 403


class Overloaded(GatewayError):
    """The engine's queue is full; the client should retry after ``retry_after`` seconds."""

    code = "overloaded"
    status = 503

    def __init__(self, message: str, *, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "retry_after": max(1, round(self.retry_after))}  # as Retry-After


class TooManySessions(GatewayError):
    code = "too_many_sessions"
    status = 429


class SlowClient(GatewayError):
    """The client stopped reading (``send_timeout_s``, ``send_queue_bytes``): it is cut off."""

    code = "slow_client"
    status = 408


class ShuttingDown(GatewayError):
    code = "shutting_down"
    status = 503


class EngineError(GatewayError):
    code = "engine_error"
    status = 502


class EngineTimeout(EngineError):
    code = "engine_timeout"
    status = 504


class NotReady(GatewayError):
    code = "not_ready"
    status = 503
