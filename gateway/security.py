"""Edge checks: bearer-token auth on /v1 routes and the Origin allow-list for the channels."""
from __future__ import annotations

import hmac
from typing import Awaitable, Callable

from aiohttp import web
from yarl import URL

from .config import Settings
from .errors import Forbidden, Unauthorized

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def check_auth(request: web.Request, settings: Settings) -> None:
    """With ``auth_token`` set, /v1 needs ``Authorization: Bearer <token>``.

    Browsers cannot set headers on EventSource or WebSocket, so ``?access_token=`` is accepted too.
    The comparison is constant-time; the token never appears in a response.
    """
    if not settings.auth_token or not request.path.startswith("/v1/"):
        return
    header = request.headers.get("Authorization", "")
    given = header[7:].strip() if header[:7].lower() == "bearer " else request.query.get("access_token", "")
    if not given or not hmac.compare_digest(given.encode(), settings.auth_token.encode()):
        raise Unauthorized("a valid bearer token is required (Authorization: Bearer <token>)")


def check_origin(request: web.Request, settings: Settings) -> None:
    """Browsers send Origin; it must be this host or one of ``allowed_origins``.

    Requests without Origin (curl, SDKs, server-to-server) carry no ambient browser credentials
    and are allowed; cross-site pages are not, which stops cross-site WebSocket hijacking.
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
    raise Forbidden(f"origin {origin!r} is not allowed; set allowed_origins to permit it")


def _own_hosts(request: web.Request) -> set[str]:
    host = request.host  # from the Host header: what the browser used to reach us
    url = URL(f"{request.scheme}://{host}")
    return {f"{url.host}:{url.port}"}
