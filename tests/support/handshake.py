"""Response headers of a WebSocket handshake, through aiohttp's public tracing API.

``ClientWebSocketResponse`` keeps the 101 response only in a private attribute; a test that
read it would break silently on an aiohttp upgrade. ``ws_connect`` sends its upgrade through
the session's ``request``, so a ``TraceConfig``'s ``on_request_end`` sees that response.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import aiohttp
from multidict import CIMultiDictProxy


class HandshakeHeaders:
    """Pass ``config`` to a ``ClientSession`` (``trace_configs=[h.config]``); ``last`` is then
    the headers of the latest response the session received (a handshake's 101 right after
    ``ws_connect``)."""

    def __init__(self) -> None:
        self.seen: list[CIMultiDictProxy[str]] = []
        self.config = aiohttp.TraceConfig()
        self.config.on_request_end.append(self._end)

    async def _end(
        self, session: aiohttp.ClientSession, context: SimpleNamespace, params: aiohttp.TraceRequestEndParams
    ) -> None:
        self.seen.append(params.response.headers)

    @property
    def last(self) -> CIMultiDictProxy[str]:
        if not self.seen:
            raise AssertionError("no response has been received on this session yet")
        return self.seen[-1]


@contextlib.asynccontextmanager
async def ws_with_headers(
    url: str, **kwargs: Any
) -> AsyncIterator[tuple[aiohttp.ClientWebSocketResponse, CIMultiDictProxy[str]]]:
    """``ws_connect(url, **kwargs)`` on a session of its own: (the socket, its handshake's
    response headers)."""
    handshake = HandshakeHeaders()
    async with aiohttp.ClientSession(trace_configs=[handshake.config]) as http, http.ws_connect(url, **kwargs) as ws:
        yield ws, handshake.last
