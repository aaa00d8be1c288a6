"""The client's address behind reverse proxies (``trusted_proxies``).

Only when the connection comes from a trusted proxy does the client address come from the
``Forwarded`` header (RFC 7239; ``X-Forwarded-For`` when there is none): its hops are read from
the right, skipping trusted proxies, and the first other one is the client. A hop that is not
an address (``unknown``, an obfuscated name) ends the walk at the proxy that added it. Anyone
else's forwarded headers are ignored, so spoofing them gains nothing. Per-client limits, the
access log and the handlers all see the result as ``request.remote``.
"""
from __future__ import annotations

import ipaddress
from typing import Awaitable, Callable, Sequence

from aiohttp import web

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# the request as the handlers saw it (client address and all), for the access log
CLIENT_VIEW = web.RequestKey("client_view", web.BaseRequest)


def parse_trusted(spec: str) -> tuple[Network, ...]:
    """``"10.0.0.0/8, 192.0.2.7, ::1"`` -> networks; ``ValueError`` naming a bad entry."""
    nets = []
    for item in (part.strip() for part in spec.split(",")):
        if item:
            try:
                nets.append(ipaddress.ip_network(item, strict=False))
            except ValueError:
                raise ValueError(f"trusted_proxies: {item!r} is not an address or a CIDR") from None
    return tuple(nets)


def _address(text: str | None) -> Address | None:
    """An address from a hop: ``1.2.3.4``, ``1.2.3.4:80``, ``2001:db8::1``, ``"[2001:db8::1]:80"``."""
    text = (text or "").strip().strip('"')
    if text.startswith("["):
        text = text[1:].partition("]")[0]
    elif text.count(":") == 1:
        text = text.partition(":")[0]
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return None
    return (ip.ipv4_mapped or ip) if isinstance(ip, ipaddress.IPv6Address) else ip


def _trusted(ip: Address | None, trusted: Sequence[Network]) -> bool:
    return ip is not None and any(ip in net for net in trusted)


def _hops(request: web.BaseRequest) -> list[str | None]:
    """The forwarded chain, client first: ``Forwarded``'s ``for=``, else ``X-Forwarded-For``."""
    if "Forwarded" in request.headers:
        return [element.get("for") for element in request.forwarded]
    return [hop for value in request.headers.getall("X-Forwarded-For", ()) for hop in value.split(",")]


def resolve_client(peer: str | None, hops: Sequence[str | None], trusted: Sequence[Network]) -> str | None:
    """The client's address: ``peer``'s own, or, when ``peer`` is trusted, the right-most hop
    of ``hops`` (the forwarded chain, client first) that is not a trusted proxy."""
    client = _address(peer)
    if not _trusted(client, trusted):
        return peer
    for hop in reversed(hops):
        ip = _address(hop)
        if ip is None:
            break  # what is left of it cannot be read: the proxy that added it is the client
        client = ip
        if not _trusted(ip, trusted):
            break
    return str(client)


def client_middleware(trusted: Sequence[Network]) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
    @web.middleware
    async def forwarded_client(request: web.Request, handler: Handler) -> web.StreamResponse:
        client = resolve_client(request.remote, _hops(request), trusted)
        if client != request.remote:
            view = request.clone(remote=client)
            request[CLIENT_VIEW] = view
            return await handler(view)
        return await handler(request)

    return forwarded_client
