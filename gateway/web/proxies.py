"""The client's address and scheme behind reverse proxies (``trusted_proxies``).

Only when the connection comes from a trusted proxy is anything forwarded believed, and then
only the one header the proxies in front are known to set (``forwarded_header``):
``X-Forwarded-For`` (the default: ALB, nginx, HAProxy append to it) or RFC 7239 ``Forwarded``.
The other header is ignored, because a proxy that appends to one passes the client's own copy of
the other through untouched: reading both let a client pick its own address. The hops are read
from the right, skipping trusted proxies, and the first other one is the client. A hop that is
not an address (``unknown``, an obfuscated name) ends the walk at the proxy that added it.
Per-client limits, the access log and the handlers all see the result as ``request.remote``.

The scheme the client used (``X-Forwarded-Proto``, or ``proto=`` of the client's ``Forwarded``
element) becomes ``request.scheme``, so the Origin check knows that a page was served over
https by a TLS-terminating proxy.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

XFF, FORWARDED = "x-forwarded-for", "forwarded"
SCHEMES = frozenset({"http", "https", "ws", "wss"})

# the request as the handlers saw it (client address and all), for the access log
CLIENT_VIEW = web.RequestKey("client_view", web.BaseRequest)


@dataclass(frozen=True, slots=True)
class Forwarding:
    """What the proxies in front said about the request: the hops (client first) and, for
    each, the scheme it used where known (``protos`` aligned with ``hops``, or one value for
    all of them)."""

    hops: tuple[str | None, ...]
    protos: tuple[str | None, ...]


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


def parse_header(name: str) -> str:
    """``forwarded_header``: ``x-forwarded-for`` or ``forwarded`` (any case); ``ValueError`` else."""
    header = name.strip().lower()
    if header not in (XFF, FORWARDED):
        raise ValueError(f"forwarded_header must be {XFF} or {FORWARDED}, got {name!r}")
    return header


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


def forwarding(request: web.BaseRequest, header: str) -> Forwarding:
    """The hops and schemes of ``header`` alone (``forwarded_header``); the other is ignored."""
    if header == FORWARDED:
        elements = request.forwarded
        return Forwarding(tuple(e.get("for") for e in elements), tuple(e.get("proto") for e in elements))
    hops = tuple(hop for value in request.headers.getall("X-Forwarded-For", ()) for hop in value.split(","))
    protos = [p.strip() for value in request.headers.getall("X-Forwarded-Proto", ()) for p in value.split(",")]
    # one value (ALB, nginx's $scheme) is what the client used; a list is read like the hops
    return Forwarding(hops, tuple(protos) if len(protos) == len(hops) or not protos else (protos[-1],))


def resolve_client(peer: str | None, hops: Sequence[str | None], trusted: Sequence[Network]) -> str | None:
    """The client's address: ``peer``'s own, or, when ``peer`` is trusted, the right-most hop
    of ``hops`` (the forwarded chain, client first) that is not a trusted proxy."""
    return resolve(peer, Forwarding(tuple(hops), ()), trusted)[0]


def resolve(peer: str | None, fwd: Forwarding, trusted: Sequence[Network]) -> tuple[str | None, str | None]:
    """(client address, the scheme it used or None when unknown) as ``resolve_client`` says."""
    client = _address(peer)
    if not _trusted(client, trusted):
        return peer, None
    proto, index = None, len(fwd.hops)
    for index in range(len(fwd.hops) - 1, -1, -1):
        ip = _address(fwd.hops[index])
        if ip is None:
            index += 1  # what is left of it cannot be read: the proxy that added it is the client
            break
        client = ip
        if not _trusted(ip, trusted):
            break
    if len(fwd.protos) == 1:
        proto = fwd.protos[0]
    elif fwd.protos and index < len(fwd.protos):
        proto = fwd.protos[index]
    proto = (proto or "").strip().strip('"').lower()
    return str(client), proto if proto in SCHEMES else None


def client_middleware(trusted: Sequence[Network], header: str = XFF) -> Middleware:
    @web.middleware
    async def forwarded_client(request: web.Request, handler: Handler) -> web.StreamResponse:
        client, scheme = resolve(request.remote, forwarding(request, header), trusted)
        changes: dict[str, Any] = {}  # clone()'s keywords
        if client != request.remote and client is not None:
            changes["remote"] = client
        if scheme is not None and scheme != request.scheme:
            changes["scheme"] = {"ws": "http", "wss": "https"}.get(scheme, scheme)
        if changes:
            view = request.clone(**changes)
            request[CLIENT_VIEW] = view
            return await handler(view)
        return await handler(request)

    return forwarded_client
