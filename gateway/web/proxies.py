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
https by a TLS-terminating proxy. The host it asked for (``X-Forwarded-Host``, or ``host=``)
becomes ``request.host``, so a proxy that rewrites ``Host`` (to an upstream's name) does not
make the page cross-origin; a value that is not a plain ``host[:port]`` is ignored.
"""

from __future__ import annotations

import ipaddress
import re
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
# host[:port]: a DNS name or an IPv4 address, or an IPv6 address in brackets; nothing else
_HOST = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]{0,252})(?::(\d{1,5}))?")

# the request as the handlers saw it (client address and all), for the access log
CLIENT_VIEW = web.RequestKey("client_view", web.BaseRequest)


@dataclass(frozen=True, slots=True)
class Forwarding:
    """What the proxies in front said about the request: the hops (client first) and, for
    each, the scheme it used where known (``protos`` aligned with ``hops``, or one value for
    all of them)."""

    hops: tuple[str | None, ...]
    protos: tuple[str | None, ...]
    hosts: tuple[str | None, ...] = ()  # the Host each asked for, aligned as ``protos``


@dataclass(frozen=True, slots=True)
class Resolved:
    """The request as the client made it: its address, and the scheme and host it used where
    a trusted proxy said so (None: the connection's own)."""

    client: str | None
    scheme: str | None = None
    host: str | None = None


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


def valid_host(text: str | None) -> str | None:
    """``text`` when it is a plain ``host[:port]`` (the form of a Host header), else None."""
    text = (text or "").strip().strip('"')
    match = _HOST.fullmatch(text) if text.isascii() else None
    if match is None or (match.group(1) is not None and not 0 < int(match.group(1)) < 65536):
        return None
    if text.startswith("["):
        try:
            ipaddress.IPv6Address(text[1:].partition("]")[0])
        except ValueError:
            return None
    return text.lower()


def _aligned(values: list[str], hops: int) -> tuple[str, ...]:
    """One value (ALB, nginx's ``$scheme`` / ``$host``) is what the client used; a list as long
    as the hops is read like them; otherwise the last (what the nearest proxy saw)."""
    return tuple(values) if len(values) == hops or not values else (values[-1],)


def _pick(values: tuple[str | None, ...], index: int) -> str | None:
    if len(values) == 1:
        return values[0]
    return values[index] if values and index < len(values) else None


def forwarding(request: web.BaseRequest, header: str) -> Forwarding:
    """The hops and schemes of ``header`` alone (``forwarded_header``); the other is ignored."""
    if header == FORWARDED:
        elements = request.forwarded
        return Forwarding(
            tuple(e.get("for") for e in elements),
            tuple(e.get("proto") for e in elements),
            tuple(e.get("host") for e in elements),
        )
    hops = tuple(hop for value in request.headers.getall("X-Forwarded-For", ()) for hop in value.split(","))

    def listed(name: str) -> tuple[str, ...]:
        return _aligned([v.strip() for value in request.headers.getall(name, ()) for v in value.split(",")], len(hops))

    return Forwarding(hops, listed("X-Forwarded-Proto"), listed("X-Forwarded-Host"))


def resolve_client(peer: str | None, hops: Sequence[str | None], trusted: Sequence[Network]) -> str | None:
    """The client's address: ``peer``'s own, or, when ``peer`` is trusted, the right-most hop
    of ``hops`` (the forwarded chain, client first) that is not a trusted proxy."""
    return resolve(peer, Forwarding(tuple(hops), ()), trusted)[0]


def resolve(peer: str | None, fwd: Forwarding, trusted: Sequence[Network]) -> tuple[str | None, str | None]:
    """(client address, the scheme it used or None when unknown) as ``resolve_client`` says."""
    resolved = resolve_request(peer, fwd, trusted)
    return resolved.client, resolved.scheme


def resolve_request(peer: str | None, fwd: Forwarding, trusted: Sequence[Network]) -> Resolved:
    """The client's address as ``resolve_client`` says, and the scheme and host it used as
    the proxy that took its request said (None when unknown, not valid, or not trusted)."""
    client = _address(peer)
    if not _trusted(client, trusted):
        return Resolved(peer)
    index = len(fwd.hops)
    for index in range(len(fwd.hops) - 1, -1, -1):
        ip = _address(fwd.hops[index])
        if ip is None:
            index += 1  # what is left of it cannot be read: the proxy that added it is the client
            break
        client = ip
        if not _trusted(ip, trusted):
            break
    proto = (_pick(fwd.protos, index) or "").strip().strip('"').lower()
    return Resolved(str(client), proto if proto in SCHEMES else None, valid_host(_pick(fwd.hosts, index)))


def client_middleware(trusted: Sequence[Network], header: str = XFF) -> Middleware:
    @web.middleware
    async def forwarded_client(request: web.Request, handler: Handler) -> web.StreamResponse:
        seen = resolve_request(request.remote, forwarding(request, header), trusted)
        changes: dict[str, Any] = {}  # clone()'s keywords
        if seen.client != request.remote and seen.client is not None:
            changes["remote"] = seen.client
        if seen.scheme is not None and seen.scheme != request.scheme:
            changes["scheme"] = {"ws": "http", "wss": "https"}.get(seen.scheme, seen.scheme)
        if seen.host is not None and seen.host != request.host:
            changes["host"] = seen.host
        if changes:
            view = request.clone(**changes)
            request[CLIENT_VIEW] = view
            return await handler(view)
        return await handler(request)

    return forwarded_client
