"""The access log: the client behind a trusted proxy, no credential in any line, and one line
per WebSocket session when it ends.

aiohttp logs a request when its handler returns. A WebSocket's handler returns when the socket
closes, and is usually cancelled first instead (the client drops the connection after the close
handshake; the server runs with ``handler_cancellation``), so aiohttp never logs it: the socket
handler logs its own line (``log_websocket``: status 101, the session's whole duration) and
``ClientAccessLogger`` skips the 101 aiohttp would log as well.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote_plus

from aiohttp import web
from aiohttp.web_log import AccessLogger
from aiohttp.web_request import BaseRequest

from .proxies import CLIENT_VIEW

# aiohttp's own format with the time taken after the size: for a WebSocket, the session's length
FORMAT = '%a %t "%r" %s %b %Tfs "%{Referer}i" "%{User-Agent}i"'
SECRET_KEYS = frozenset({"token", "access_token"})  # the query keys that carry a credential
# a value ends at ASCII whitespace only (a request line's separator): Unicode spaces inside a
# credential are hidden with it, never left in the line
_PAIR = re.compile(r"(?<=[?&;])([^=&;?#\s]+)=([^&;#\s\"']*)", re.ASCII)


def _hide(match: re.Match[str]) -> str:
    key = match.group(1)
    return f"{key}=***" if unquote_plus(key).lower() in SECRET_KEYS else match.group(0)


def redact(text: str) -> str:
    """``/v1/stream/ws?token=abc&voice=x`` -> ``/v1/stream/ws?token=***&voice=x``: in a request
    line, a Referer or an error message; keys are matched as the server decodes them
    (``%74oken=`` is ``token=``)."""
    return _PAIR.sub(_hide, text) if "=" in text else text


class ClientAccessLogger(AccessLogger):
    """aiohttp's access log, with the client's address from a trusted proxy where there is
    one and credentials in the query string redacted."""

    def log(self, request: BaseRequest, response: web.StreamResponse, time: float) -> None:
        if response.status == 101:
            return  # a WebSocket: logged by its handler when it closed (log_websocket)
        self.log_line(request, response, time)

    def log_line(self, request: BaseRequest, response: web.StreamResponse, time: float) -> None:
        view = request.get(CLIENT_VIEW) if request is not None else None
        super().log(view or request, response, time)

    def _format_line(
        self, request: BaseRequest, response: web.StreamResponse, time: float
    ) -> Iterable[tuple[Any, Any]]:
        # aiohttp offers no public hook for the values of a line; this one is tested against
        # the pinned aiohttp (tests/test_edges.py)
        return [
            (key, redact(value) if isinstance(value, str) else value)
            for key, value in super()._format_line(request, response, time)
        ]


def log_websocket(request: web.Request, ws: web.WebSocketResponse, duration_s: float) -> None:
    """One access-log line for a WebSocket session that has ended (status 101)."""
    protocol = request.protocol
    logger = getattr(protocol, "access_logger", None)
    if isinstance(logger, ClientAccessLogger) and logger.enabled and ws.prepared:
        logger.log_line(request, ws, duration_s)
