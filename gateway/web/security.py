"""Edge checks: credentials on /v1 routes and /metrics, the Origin allow-list for the channels.

A credential is the server's ``auth_token`` or a browser token minted from it (``tokens.py``),
given as ``Authorization: Bearer <token>``, as ``?token=`` (or the older ``?access_token=``:
browsers cannot set headers on EventSource or WebSocket), or on the WebSocket as the
subprotocols ``token, <token>`` (the server answers ``token``). Query values are redacted in the
access log (``accesslog.py``); no credential ever appears in a response or an error message.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable

from aiohttp import web
from yarl import URL

from ..config import Settings
from ..errors import Forbidden, Unauthorized, quoted
from . import tokens

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

WS_TOKEN_PROTOCOL = "token"  # new WebSocket(url, ["token", browserToken]); the server echoes "token"
MINT_PATH = "/v1/tokens"


def _bearer(request: web.BaseRequest) -> str:
    header = request.headers.get("Authorization", "")
    return header[7:].strip() if header[:7].lower() == "bearer " else ""


def ws_protocol_token(request: web.BaseRequest) -> str:
    """The token offered as the WebSocket subprotocol after ``token`` (``token, <token>``)."""
    offered = [p.strip() for value in request.headers.getall("Sec-WebSocket-Protocol", ()) for p in value.split(",")]
    if WS_TOKEN_PROTOCOL in offered:
        rest = [p for p in offered if p and p != WS_TOKEN_PROTOCOL]
        return rest[0] if rest else ""
    return ""


def credential(request: web.BaseRequest) -> str:
    return (
        _bearer(request)
        or request.query.get("token", "")
        or request.query.get("access_token", "")
        or ws_protocol_token(request)
    )


def _same(given: str, secret: str) -> bool:
    return hmac.compare_digest(given.encode(), secret.encode())


def check_auth(request: web.Request, settings: Settings) -> None:
    """With ``auth_token`` set, /v1 needs it or a browser token scoped to the route (minting
    needs ``auth_token`` itself); with ``metrics_token`` set, /metrics needs it as a bearer
    token. Comparisons are constant-time; a credential never appears in a response."""
    if request.path == "/metrics" and settings.metrics_token:
        if not _same(_bearer(request), settings.metrics_token):
            raise Unauthorized("/metrics needs Authorization: Bearer <metrics_token>")
        return
    if not settings.auth_token or not request.path.startswith("/v1/"):
        return
    given = credential(request)
    if not given:
        raise Unauthorized("a valid bearer token is required (Authorization: Bearer <token>, or ?token=)")
    if _same(given, settings.auth_token):
        return
    if not tokens.is_token(given):
        raise Unauthorized("a valid bearer token is required (Authorization: Bearer <token>, or ?token=)")
    grant = tokens.verify(tokens.derive_key(settings.auth_token), given)
    if request.path == MINT_PATH:
        raise Forbidden("minting a token needs the server's auth_token, not a browser token", code="insufficient_scope")
    tokens.check_scope(grant, request.path)


def check_origin(request: web.Request, settings: Settings) -> None:
    """Browsers send Origin; it must be this host or one of ``allowed_origins``.

    Requests without Origin (curl, SDKs, server-to-server) carry no ambient browser credentials
    and are allowed; cross-site pages are not, which stops cross-site WebSocket hijacking.
    Behind a trusted proxy ``request.scheme`` and ``request.host`` are the client's (``proxies.py``:
    ``X-Forwarded-Proto`` / ``X-Forwarded-Host``).
    """
    origin = request.headers.get("Origin")
    if origin is None:
        return
    allowed = {o.strip().rstrip("/") for o in settings.allowed_origins.split(",") if o.strip()}
    if "*" in allowed or origin.rstrip("/") in allowed:
        return
    try:
        parsed = URL(origin)
    except ValueError:
        parsed = None
    if parsed is not None and parsed.host and request.host and f"{parsed.host}:{parsed.port}" in _own_hosts(request):
        return
    raise Forbidden(f"origin {quoted(origin)} is not allowed; set allowed_origins to permit it")


def _own_hosts(request: web.Request) -> set[str]:
    host = request.host  # Host, or a trusted proxy's X-Forwarded-Host: what the browser used to reach us
    url = URL(f"{request.scheme}://{host}")
    return {f"{url.host}:{url.port}"}
