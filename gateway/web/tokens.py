"""Short-lived browser tokens: ``POST /v1/tokens`` mints them, every /v1 route accepts them.

A browser cannot keep a secret, so a page never gets the server's ``auth_token``: the page's
own server mints a token with it and hands that over. A token is stateless, so every worker and
every instance that shares ``auth_token`` accepts it with no store behind it::

    v1.<expires_at>.<scope>.<nonce>.<signature>

``expires_at`` is Unix seconds; ``scope`` the routes it opens joined by ``-`` (``ws-sse``) or
``all``; ``nonce`` 96 random bits (every token differs); ``signature`` HMAC-SHA256 over
everything before it, base64url, with a key derived from ``auth_token`` (never the token
itself), compared in constant time. Every character is URL-safe and valid in a WebSocket
subprotocol. Faults: 401 ``invalid_token`` (malformed, tampered, another key), 401
``token_expired``, 403 ``insufficient_scope`` (a route outside its scope, minting included).

Being stateless, a token is reusable until it expires, not single-use: its replay window is its
``ttl_s`` (docs/PROTOCOL.md, "Token request"); rotating ``auth_token`` revokes every token.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

from aiohttp import web

from ..errors import BadRequest, Forbidden, Unauthorized, quoted
from .jsonbody import decode_object
from .state import GATEWAY

VERSION = "v1"
SCOPES = ("ws", "sse", "speech", "voices")
ROUTE_SCOPES = {"/v1/stream/ws": "ws", "/v1/stream/sse": "sse", "/v1/audio/speech": "speech", "/v1/voices": "voices"}
DEFAULT_TTL_S, MAX_TTL_S = 300, 3600
_KEY_LABEL = b"kokoro-gateway browser token v1"


@dataclass(frozen=True, slots=True)
class Grant:
    """What a valid token allows: its routes until ``expires_at`` (Unix seconds)."""

    expires_at: int
    scope: frozenset[str]


def derive_key(auth_token: str) -> bytes:
    """The signing key: HMAC(auth_token, label), so a token reveals nothing usable as the master."""
    return hmac.new(auth_token.encode(), _KEY_LABEL, hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _sign(key: bytes, body: str) -> str:
    return _b64(hmac.new(key, body.encode("ascii"), hashlib.sha256).digest())


def mint(
    key: bytes, *, ttl_s: float = DEFAULT_TTL_S, scope: frozenset[str] = frozenset(SCOPES), now: float | None = None
) -> tuple[str, int]:
    """A signed token for ``scope`` that expires ``ttl_s`` from ``now``: (token, expires_at)."""
    expires_at = int((time.time() if now is None else now) + ttl_s)
    names = "all" if set(scope) >= set(SCOPES) else "-".join(s for s in SCOPES if s in scope)
    body = f"{VERSION}.{expires_at}.{names}.{_b64(secrets.token_bytes(12))}"
    return f"{body}.{_sign(key, body)}", expires_at


def is_token(text: str) -> bool:
    return text.startswith(VERSION + ".")


def verify(key: bytes, token: str, *, now: float | None = None) -> Grant:
    """The grant of a genuine, unexpired token; ``Unauthorized`` otherwise (the token never
    appears in the message)."""
    body, _, signature = token.rpartition(".")
    parts = body.split(".")
    if (
        not token.isascii()
        or len(parts) != 4
        or parts[0] != VERSION
        or not hmac.compare_digest(signature.encode("ascii"), _sign(key, body).encode("ascii"))
    ):
        raise Unauthorized("the token is malformed, altered or signed with another key", code="invalid_token")
    _, expires, names, _nonce = parts
    if not (expires.isascii() and expires.isdigit()):
        raise Unauthorized("the token is malformed", code="invalid_token")
    if int(expires) <= (time.time() if now is None else now):
        raise Unauthorized("the token has expired; mint a new one (POST /v1/tokens)", code="token_expired")
    return Grant(int(expires), frozenset(SCOPES) if names == "all" else frozenset(names.split("-")))


def check_scope(grant: Grant, path: str) -> None:
    """``Forbidden`` (403 ``insufficient_scope``) unless ``path`` is one of the grant's routes."""
    scope = ROUTE_SCOPES.get(path)
    if scope is None:
        raise Forbidden(
            f"a browser token does not open {quoted(path)}; it needs the server's auth_token", code="insufficient_scope"
        )
    if scope not in grant.scope:
        raise Forbidden(
            f"this token's scope ({', '.join(sorted(grant.scope))}) does not include {quoted(scope)}",
            code="insufficient_scope",
        )


def parse_request(body: object) -> tuple[float, frozenset[str]]:
    """``{"ttl_s": 300, "scope": ["ws", "sse"]}`` (both optional) -> (ttl_s, scope)."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object", code="invalid_json")
    ttl = body.get("ttl_s", DEFAULT_TTL_S)
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 1 <= ttl <= MAX_TTL_S:
        raise BadRequest(f"ttl_s must be a number of seconds from 1 to {MAX_TTL_S}", code="invalid_option")
    scope = body.get("scope", list(SCOPES))
    if isinstance(scope, str):
        scope = [scope]
    if not isinstance(scope, list) or not scope or any(s not in SCOPES for s in scope):
        raise BadRequest(f"scope must be a non-empty list of {', '.join(SCOPES)}", code="invalid_option")
    return float(ttl), frozenset(scope)


async def handle_mint(request: web.Request) -> web.Response:
    """``POST /v1/tokens``: the auth middleware let only the server's own ``auth_token`` in."""
    settings = request.app[GATEWAY].settings
    if not settings.auth_token:
        raise BadRequest(
            "browser tokens need auth_token set on the server (without it every route is open)", code="auth_disabled"
        )
    raw = await request.read()
    body = decode_object(raw) if raw.strip() else {}
    ttl_s, scope = parse_request(body)
    token, expires_at = mint(derive_key(settings.auth_token), ttl_s=ttl_s, scope=scope)
    return web.json_response(
        {
            "token": token,
            "expires_at": expires_at,
            "expires_in": int(ttl_s),
            "scope": [s for s in SCOPES if s in scope],
        },
        headers={"Cache-Control": "no-store"},
    )
