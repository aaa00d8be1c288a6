"""Every HTTP error in one shape, ``{"error": {"code", "message"}}``, aiohttp's own included.

Errors raised inside the application (``GatewayError``, aiohttp's ``HTTPException``: 404, 405,
413 ...) are translated by the middleware in ``app.py`` through ``http_exception_response``.
A request aiohttp cannot parse (a request line or header over 8190 bytes, too many headers,
bytes that are not HTTP) never reaches the application: the connection's ``RequestHandler``
answers it from ``handle_error`` with plain text. ``GatewayRunner`` serves the application
through a ``RequestHandler`` whose ``handle_error`` answers in the JSON shape instead; aiohttp
offers no public hook for this, so the subclass is kept to that one method (and tested against
the pinned aiohttp in tests/test_production.py).
"""

from __future__ import annotations

import re
from http import HTTPStatus
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage, HttpProcessingError, LineTooLong
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from .accesslog import FORMAT, ClientAccessLogger, redact

_CODES = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
    414: "uri_too_long",
    431: "headers_too_large",
    500: "internal_error",
    504: "timeout",
}
# the parser quotes the start of the line it refused: the request target (or the whole request
# line) starts with "/" after an optional method; a header's name or value does not
SERVER = "kokoro-gateway"  # not aiohttp's default, which names the Python and aiohttp versions
MESSAGE_CHARS = 200  # of aiohttp's explanation, which quotes the client's bytes (up to 8 kB)
_TARGET = re.compile(rb"^(?:[A-Z]+ )?(?:/|\*|https?://)")


def error_body(code: str, message: str) -> dict[str, dict[str, str]]:
    return {"error": {"code": code, "message": message}}


def error_response(status: int, code: str, message: str, headers: Any = None) -> web.Response:
    return web.json_response(error_body(code, message), status=status, headers=headers)


def http_exception_response(request: web.Request, exc: web.HTTPException) -> web.Response:
    """aiohttp's 4xx/5xx exceptions (no route, wrong method, body too large ...) as JSON."""
    status = exc.status
    code = _CODES.get(status) or exc.reason.lower().replace(" ", "_")
    if status == 404:
        message = f"no such resource: {request.method} {request.path}"
    elif status == 405:
        message = f"{request.method} is not allowed on {request.path}; allowed: {exc.headers.get('Allow', '')}"
    elif exc.text and not exc.text.startswith(f"{status}:"):
        message = exc.text  # aiohttp's own explanation ("Maximum request body size ...")
    else:
        message = exc.reason
    allow = exc.headers.get("Allow")
    return error_response(status, code, message, {"Allow": allow} if allow else None)


def protocol_error(status: int, exc: BaseException | None) -> tuple[int, str, str]:
    """(status, code, message) for an error aiohttp's connection handler answers itself."""
    if isinstance(exc, LineTooLong):
        line, limit = exc.args[0], exc.args[1]
        raw = bytes(line) if isinstance(line, (bytes, bytearray)) else str(line).encode()
        if _TARGET.match(raw):
            return 414, _CODES[414], f"the request line is longer than {limit} bytes"
        return 431, _CODES[431], f"a request header is longer than {limit} bytes"
    if isinstance(exc, BadHttpMessage):
        if "too many headers" in exc.message.lower():
            return 431, _CODES[431], "too many request headers"
        return 400, _CODES[400], f"malformed HTTP request: {_cut(redact(exc.message))}"
    if status == 504:
        return 504, _CODES[504], "the request took too long"
    if status >= 500:
        return 500, _CODES[500], "internal server error"
    return status, _CODES.get(status, "bad_request"), HTTPStatus(status).phrase


def _cut(text: str) -> str:
    return text if len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS] + "…"


async def name_server(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: every response names the product, not its software's versions."""
    response.headers["Server"] = SERVER


class JsonErrorHandler(RequestHandler):
    """aiohttp's connection handler, answering the errors it handles itself as JSON."""

    def handle_error(
        self, request: BaseRequest, status: int = 500, exc: BaseException | None = None, message: str | None = None
    ) -> web.StreamResponse:
        if isinstance(exc, HttpProcessingError):  # the client's mistake: no traceback
            self.logger.info("refused a malformed request from %s: %s", request.remote, redact(exc.message))
        else:  # logs the traceback; raises ConnectionError once response bytes went out
            super().handle_error(request, status, exc, message)
        status, code, text = protocol_error(status, exc)
        response = error_response(status, code, text, {"Server": SERVER})
        response.force_close()
        return response


class JsonErrorServer(web.Server):
    def __call__(self) -> RequestHandler:
        return JsonErrorHandler(self, loop=self._loop, **self._kwargs)


class GatewayRunner(web.AppRunner):
    """``web.AppRunner`` whose connections answer parser errors as JSON and log the client."""

    def __init__(self, app: web.Application, **kwargs: Any) -> None:
        kwargs.setdefault("access_log_class", ClientAccessLogger)
        kwargs.setdefault("access_log_format", FORMAT)
        super().__init__(app, **kwargs)

    async def _make_server(self) -> web.Server:
        base = await super()._make_server()
        return JsonErrorServer(
            base.request_handler,
            request_factory=base.request_factory,
            handler_cancellation=base.handler_cancellation,
            loop=base._loop,
            **base._kwargs,
        )
