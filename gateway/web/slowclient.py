"""The limits on a client that stops reading, for the HTTP streams (SSE, streamed speech).

The WebSocket channel enforces the same two settings on its own sends (``transports/ws.py``):
a client more than ``send_queue_bytes`` behind, or one that takes longer than
``send_timeout_s`` to accept one message, is too slow. Such a client can take no error event,
so the stream is cut (the transport aborted) and counted under ``tts_errors{code="slow_client"}``;
its session ends, which stops its synthesis and frees its admission slot.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

from ..errors import SlowClient
from .state import GATEWAY


@contextlib.asynccontextmanager
async def send_limits(request: web.Request) -> AsyncIterator[None]:
    """Around one write: ``SlowClient`` if the client is already too far behind, or if the
    write does not complete within ``send_timeout_s``."""
    settings = request.app[GATEWAY].settings
    transport = request.transport
    backlog = transport.get_write_buffer_size() if transport is not None else 0
    if backlog > settings.send_queue_bytes:
        raise SlowClient(f"client is {backlog} bytes behind")
    try:
        async with asyncio.timeout(settings.send_timeout_s):
            yield
    except TimeoutError:
        raise SlowClient(f"client accepted nothing for {settings.send_timeout_s:g} s") from None


def cut_off(request: web.Request, channel: str, exc: SlowClient) -> None:
    """Count a slow client under ``channel`` and drop its connection and what it never read."""
    request.app[GATEWAY].metrics.errors.labels(channel, exc.code).inc()
    if request.transport is not None:
        request.transport.abort()
