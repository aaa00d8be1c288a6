"""The events a reply's pipeline puts out (``Pipeline.out``) and the queue each segment's
audio passes through: what the channels (WebSocket, SSE, batch, the model container) send."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from ..errors import GatewayError
from ..kokoro.timestamps import WordTimes

log = logging.getLogger(__name__)

OUT_EVENTS = 8  # events between the encoder and the channel


@dataclass(frozen=True, slots=True)
class Event:
    """One core event. ``fields`` is what JSON carries; ``audio`` holds an audio payload."""

    type: str
    fields: dict[str, Any] = field(default_factory=dict)
    audio: bytes = b""
    cause: BaseException | None = None  # an ``error``'s exception, for an edge that raises it
    end_ms: float = 0.0  # an ``audio`` payload's end on the reply's timeline (not on the wire)
    start_at: float | None = None  # a ``sentence``'s start offer (listener clock; ``start_in_ms``)


# a segment: its sentence Event, then WordTimes and bytes (PCM), then None or an exception
SegmentQueue: TypeAlias = asyncio.Queue[Event | WordTimes | bytes | BaseException | None]


def error_event(exc: BaseException) -> Event:
    if isinstance(exc, GatewayError):
        return Event("error", exc.to_dict(), cause=exc)
    log.error("synthesis failed", exc_info=exc)
    return Event("error", {"code": "internal_error", "message": "synthesis failed"}, cause=exc)
