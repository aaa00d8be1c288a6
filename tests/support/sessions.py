"""A stream session spoken to its end in-process (no transport): what core tests drive."""

from __future__ import annotations

from typing import Any

from gateway.core.events import Event
from gateway.core.stream import StreamSession


async def spoken(session: StreamSession, text: str) -> tuple[dict[str, Any], list[Event]]:
    """``session``'s ``ready`` fields, then ``text`` as its whole reply: every event to the
    end. The session is closed whatever happens."""
    try:
        ready = session.ready_fields()
        session.push_text(text)
        session.end()
        return ready, [e async for e in session.events()]
    finally:
        await session.aclose()
