"""How far ahead of a listener the engine works: at most ``lookahead_s`` beyond what the next
segments are forecast to take, so one listener's text does not take the engine from another's."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .listener import Listener


async def wait_ahead(listener: Listener, pending: Sequence[str]) -> None:
    """Far enough ahead of ``listener`` (``lookahead_s`` beyond what the next of ``pending`` are
    forecast to take): wait until that is no longer so. One timer per segment."""
    settings, rate = listener.settings, listener.engine_rate
    horizon = settings.lookahead_s
    if not listener.live or horizon <= 0 or listener.t_first_audio is None:
        return
    ahead = list(pending)[: max(1, settings.lookahead)]
    need = sum(rate.predict(listener.requested, rate.audio_s(t, listener.options.speed)) for t in ahead)
    excess = listener.buffered_s() - horizon - rate.safety(settings.preroll_safety) * need
    if excess > 0:
        await asyncio.sleep(excess)
