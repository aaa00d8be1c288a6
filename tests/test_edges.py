"""The edges of issue 22 that are about who the client is and what the logs keep: the one
forwarded header a deployment trusts (finding 2), the scheme a TLS-terminating proxy saw for
the origin check (finding 12), credentials redacted everywhere (finding 3), and WebSocket
sessions in the access log.

Real gateways on loopback (fake engine), served by the product's runner (``GatewayRunner``, as
``run_gateway.py`` serves them), the log captured as it is written.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable

import aiohttp
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bench.client import sse_stream, ws_stream

from .conftest import Server, fake_settings

ServerFactory = Callable[..., Awaitable[Server]]
SSE = "/v1/stream/sse?text=Hello%20there."


def behind(header: str, **settings: object) -> dict[str, object]:
    """Settings for a gateway that trusts loopback's ``header`` (the default left unset)."""
    return {**settings, **({} if header == "x-forwarded-for" else {"forwarded_header": header})}


def access_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "aiohttp.access"]


async def until_logged(caplog: pytest.LogCaptureFixture, pattern: str) -> str:
    """The access-log line matching ``pattern`` (it is written as the response ends)."""
    for _ in range(200):
        found = [line for line in access_lines(caplog) if re.search(pattern, line)]
        if found:
            return found[0]
        await asyncio.sleep(0.02)
    raise AssertionError(f"no access-log line matches {pattern!r}:\n" + "\n".join(access_lines(caplog)))


# -- finding 2: one trusted header ------------------------------------------------------------
@pytest.mark.parametrize(
    "header,real,forged",
    [
        ("x-forwarded-for", {"X-Forwarded-For": "198.51.100.1"}, {"Forwarded": "for=203.0.113.7"}),
        ("forwarded", {"Forwarded": "for=198.51.100.1"}, {"X-Forwarded-For": "203.0.113.7"}),
    ],
)
async def test_a_client_cannot_choose_its_address_with_the_other_header(
    start_server: ServerFactory,
    caplog: pytest.LogCaptureFixture,
    header: str,
    real: dict[str, str],
    forged: dict[str, str],
) -> None:
    """Finding 2: behind a proxy that appends to X-Forwarded-For, a client's own ``Forwarded``
    used to replace its address, dodging ``max_sessions_per_client`` and forging the access
    log. Only ``forwarded_header`` is read now."""
    caplog.set_level(logging.INFO, logger="aiohttp.access")
    server = await start_server(
        fake_settings(**behind(header, trusted_proxies="127.0.0.1", max_sessions_per_client=1, fake_hang=True))
    )
    async with aiohttp.ClientSession() as http:
        async with http.get(server.url + SSE, headers=real) as first:  # held: the engine hangs
            assert first.status == 200
            async with http.get(server.url + SSE, headers={**real, **forged}) as second:
                assert second.status == 429, second.status
                assert (await second.json())["error"]["code"] == "too_many_sessions"
        async with http.get(server.url + "/healthz", headers={**real, **forged}) as r:
            assert r.status == 200
    line = await until_logged(caplog, r"GET /healthz ")
    assert line.startswith("198.51.100.1 ") and "203.0.113.7" not in line, line


@pytest.mark.parametrize(
    "peer,hops,protos,client,scheme",
    [
        ("10.0.0.2", ["198.51.100.1"], ["https"], "198.51.100.1", "https"),
        ("10.0.0.2", ["6.6.6.6", "198.51.100.1", "10.0.0.7"], ["http"], "198.51.100.1", "http"),
        # Forwarded: the proto of the element whose for= is the client (its proxy wrote both)
        ("10.0.0.2", ["6.6.6.6", "198.51.100.1", "10.0.0.7"], ["ftp", "https", "http"], "198.51.100.1", "https"),
        ("10.0.0.2", ["198.51.100.1"], ["gopher"], "198.51.100.1", None),  # not a scheme
        ("203.0.113.9", ["198.51.100.1"], ["https"], "203.0.113.9", None),  # peer untrusted
        ("10.0.0.2", [], [], "10.0.0.2", None),
    ],
)
def test_resolve_client_and_scheme(
    peer: str, hops: list[str], protos: list[str], client: str, scheme: str | None
) -> None:
    from gateway.web.proxies import Forwarding, parse_trusted, resolve

    assert resolve(peer, Forwarding(tuple(hops), tuple(protos)), parse_trusted("10.0.0.0/8")) == (client, scheme)


async def test_forwarded_header_must_be_one_of_two(start_server: ServerFactory) -> None:
    with pytest.raises(ValueError, match="forwarded_header"):
        await start_server(fake_settings(trusted_proxies="127.0.0.1", forwarded_header="x-real-ip"))


async def both_channels(http: aiohttp.ClientSession, server: Server, headers: dict[str, str]) -> tuple[int, bool]:
    """The SSE route's status and whether the WebSocket upgraded, for a page sending ``headers``
    (a refused upgrade must be a 403)."""
    async with http.get(server.url + SSE, headers=headers) as r:
        status = r.status
        await r.read()
    try:
        async with http.ws_connect(server.ws_url, headers=headers) as ws:
            await ws.close()
        return status, True
    except aiohttp.WSServerHandshakeError as exc:
        assert exc.status == 403
        return status, False


# -- finding 12: the scheme a TLS-terminating proxy saw ----------------------------------------
@pytest.mark.parametrize(
    "header,forwarded",
    [
        ("x-forwarded-for", {"X-Forwarded-For": "198.51.100.1", "X-Forwarded-Proto": "https"}),
        ("forwarded", {"Forwarded": "for=198.51.100.1;proto=https"}),
    ],
)
async def test_a_same_origin_page_behind_a_tls_proxy_is_allowed(
    start_server: ServerFactory, header: str, forwarded: dict[str, str]
) -> None:
    """Finding 12: the page https://tts.example.com, served through a proxy that ends TLS, was
    refused 403 on both channels: the origin check compared it with the request's own scheme
    (http, so port 80). A trusted proxy's X-Forwarded-Proto / ``proto=`` gives the scheme now;
    from anyone else it is ignored."""
    page = {"Host": "tts.example.com", "Origin": "https://tts.example.com"}
    proxied = await start_server(fake_settings(**behind(header, trusted_proxies="127.0.0.1")))
    direct = await start_server(fake_settings(**behind(header)))  # nobody trusted
    async with aiohttp.ClientSession() as http:
        for server, allowed in ((proxied, True), (direct, False)):
            status, upgraded = await both_channels(http, server, {**page, **forwarded})
            assert (status == 200) is allowed, (server.settings.trusted_proxies, status)
            assert upgraded is allowed


PROXIED_PAGE = {"Host": "10.0.0.9:8000", "Origin": "https://tts.example.com", "X-Forwarded-Proto": "https"}


@pytest.mark.parametrize(
    "header,forwarded",
    [
        ("x-forwarded-for", {"X-Forwarded-For": "198.51.100.1", "X-Forwarded-Host": "tts.example.com"}),
        ("forwarded", {"Forwarded": "for=198.51.100.1;proto=https;host=tts.example.com"}),
    ],
)
async def test_a_same_origin_page_behind_a_proxy_that_rewrites_host_is_allowed(
    start_server: ServerFactory, header: str, forwarded: dict[str, str]
) -> None:
    """A proxy that sends the upstream's own name as Host (nginx's default ``proxy_pass``
    Host, an ALB to a target IP) made the page https://tts.example.com cross-origin (403): the
    origin check read Host only. A trusted proxy's X-Forwarded-Host / ``host=`` names the host
    the browser used now; from anyone else, or when it is not a plain host[:port], it is ignored."""
    proxied = await start_server(fake_settings(**behind(header, trusted_proxies="127.0.0.1")))
    direct = await start_server(fake_settings(**behind(header)))  # nobody trusted: a forgery
    forged = {
        k: v.replace("tts.example.com", '"tts.example.com/x"' if k == "Forwarded" else "tts.example.com/x")
        for k, v in forwarded.items()
    }
    async with aiohttp.ClientSession() as http:
        for server, headers, allowed in (
            (proxied, forwarded, True),
            (direct, forwarded, False),
            (proxied, forged, False),
        ):
            status, upgraded = await both_channels(http, server, {**PROXIED_PAGE, **headers})
            assert (status == 200) is allowed, (server.settings.trusted_proxies, headers, status)
            assert upgraded is allowed, headers


@pytest.mark.parametrize(
    "peer,hosts,host",
    [
        ("10.0.0.2", ["tts.example.com"], "tts.example.com"),
        ("10.0.0.2", ["TTS.example.com:8443"], "tts.example.com:8443"),
        ("10.0.0.2", ["[2001:db8::1]:443"], "[2001:db8::1]:443"),
        ("203.0.113.9", ["tts.example.com"], None),  # peer untrusted
        ("10.0.0.2", ["tts.example.com/path"], None),
        ("10.0.0.2", ["user@tts.example.com"], None),
        ("10.0.0.2", ["tts.example.com:99999"], None),
        ("10.0.0.2", ["tts example.com"], None),
        ("10.0.0.2", ["[not-v6]:80"], None),
        ("10.0.0.2", ["tts.\u00e9xample.com"], None),
        ("10.0.0.2", [""], None),
    ],
)
def test_forwarded_host_only_from_trusted_proxies_and_only_a_host(
    peer: str, hosts: list[str], host: str | None
) -> None:
    from gateway.web.proxies import Forwarding, parse_trusted, resolve_request

    fwd = Forwarding(("198.51.100.1",), (), tuple(hosts))
    assert resolve_request(peer, fwd, parse_trusted("10.0.0.0/8")).host == host


# -- finding 3: no credential in any log line, error text or metric -----------------------------
async def test_tokens_in_the_query_are_redacted_everywhere(
    start_server: ServerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Finding 3: ``?access_token=`` (right and wrong guesses alike) was written to the access
    log. Every line now shows ``access_token=***`` / ``token=***``, and neither the server's
    token nor a guess appears in any log line, error body or the metrics."""
    caplog.set_level(logging.INFO)
    secret, guess, browser = "s3cret-master-token", "wrong-guess-4711", "v1.4102444800.all.bm9uY2U.c2lnbmF0dXJl"
    server = await start_server(fake_settings(auth_token=secret))
    async with aiohttp.ClientSession() as http:
        bodies = []
        for query in (
            f"access_token={secret}",
            f"access_token={guess}",
            f"token={secret}",
            f"token={browser}",
            f"voice=nope&token={guess}",
        ):
            async with http.get(f"{server.url}/v1/voices?{query}") as r:
                bodies.append(await r.text())
        sse = await sse_stream(http, f"{server.url}/v1/stream/sse?token={guess}", text="Hi there.")
        assert sse.error and sse.error["status"] == 401
        done = await ws_stream(http, f"{server.ws_url}?access_token={secret}", text="Hi there.")
        assert done.done is not None
        async with http.get(server.url + "/metrics") as r:
            metrics = await r.text()
    await until_logged(caplog, r"GET /metrics ")
    for text in (caplog.text, *bodies, metrics, *(str(e) for e in sse.events)):
        assert secret not in text and guess not in text and browser not in text
    await until_logged(caplog, r"GET /v1/stream/ws\?access_token=\*\*\* .* 101 ")  # the socket's line
    lines = access_lines(caplog)
    assert sum("access_token=***" in line for line in lines) == 3, lines
    assert sum("token=***" in line and "access_token" not in line for line in lines) == 4, lines
    assert secret not in caplog.text


@pytest.mark.parametrize(
    "text,expected",
    [
        ("GET /v1/stream/ws?token=v1.1.all.n.s HTTP/1.1", "GET /v1/stream/ws?token=*** HTTP/1.1"),
        ("GET /x?voice=a&access_token=abc&b=c HTTP/1.1", "GET /x?voice=a&access_token=***&b=c HTTP/1.1"),
        ("GET /x?%74oken=abc HTTP/1.1", "GET /x?%74oken=*** HTTP/1.1"),  # the key as the server decodes it
        ("GET /x?tokens=1&my_token=2 HTTP/1.1", "GET /x?tokens=1&my_token=2 HTTP/1.1"),
        ("/healthz", "/healthz"),
    ],
)
def test_redact(text: str, expected: str) -> None:
    from gateway.web.accesslog import redact

    assert redact(text) == expected


# -- WebSocket sessions in the access log ------------------------------------------------------
async def test_websocket_sessions_reach_the_access_log(
    start_server: ServerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """A WebSocket session was never in the access log (its handler is cancelled when the client
    drops the connection after the close handshake). Now one line when it closes: status 101,
    the session's duration, the client named by a trusted proxy."""
    caplog.set_level(logging.INFO, logger="aiohttp.access")
    server = await start_server(fake_settings(trusted_proxies="127.0.0.1", fake_rtf=0.2))
    async with aiohttp.ClientSession(headers={"X-Forwarded-For": "198.51.100.23"}) as http:
        done = await ws_stream(http, server.ws_url, text="Hello there. A second sentence takes a while.")
        assert done.done is not None and done.close_code == 1000
        async with http.ws_connect(server.ws_url) as ws:  # a client that leaves without a word
            await ws.close()
    line = await until_logged(caplog, r"GET /v1/stream/ws HTTP/1.1\" 101 ")
    fields = re.match(r'^(\S+) \[[^\]]+\] "GET /v1/stream/ws HTTP/1.1" 101 \d+ ([0-9.]+)s ', line)
    assert fields, line
    assert fields.group(1) == "198.51.100.23"
    # the whole session, not just the upgrade: the fake engine alone slept 0.2 s per audio second
    assert float(fields.group(2)) >= done.done["audio_ms"] * 0.2 / 1000 * 0.5
    for _ in range(200):  # the second session's line, written as its handler ends
        ws_lines = [line for line in access_lines(caplog) if "GET /v1/stream/ws" in line]
        if len(ws_lines) >= 2:
            break
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.2)  # and no third line (aiohttp's own) after it
    ws_lines = [line for line in access_lines(caplog) if "GET /v1/stream/ws" in line]
    assert len(ws_lines) == 2, ws_lines  # one per session, never twice


# -- the parsers under generated input (bounded: the suite stays fast) ---------------------------
_hop = st.one_of(
    st.ip_addresses().map(str), st.text(max_size=12), st.sampled_from(["unknown", "_hidden", '"[::1]:80"'])
)


@settings(max_examples=150, deadline=None)
@given(
    peer=st.ip_addresses().map(str),
    hops=st.lists(_hop, max_size=5),
    protos=st.lists(st.text(max_size=6), max_size=5),
    trusted=st.sampled_from(["", "10.0.0.0/8", "0.0.0.0/0, ::/0"]),
)
def test_forwarded_parsing_never_invents_a_client(peer: str, hops: list[str], protos: list[str], trusted: str) -> None:
    from gateway.web.proxies import Forwarding, parse_trusted, resolve

    nets = parse_trusted(trusted)
    client, scheme = resolve(peer, Forwarding(tuple(hops), tuple(protos)), nets)
    readable = {str(a) for a in (_as_ip(h) for h in [peer, *hops]) if a is not None}
    assert client == peer or client in readable  # the peer or an address some hop named
    if not any(_as_ip(peer) in net for net in nets):
        assert (client, scheme) == (peer, None)  # nothing forwarded is believed from anyone else
    assert scheme in (None, "http", "https", "ws", "wss")


def _as_ip(text: str):  # the parser's own reading of a hop
    from gateway.web.proxies import _address

    return _address(text)


@settings(max_examples=150, deadline=None)
@given(
    key=st.sampled_from(["token", "access_token", "%74oken", "voice", "tokens"]),
    value=st.text(
        alphabet=st.characters(blacklist_characters="&;#\"' \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0"),
        min_size=1,
        max_size=20,
    ),
    before=st.sampled_from(["", "voice=a&", "x=1;"]),
)
@example(key="token", value="\u1680", before="")  # a Unicode space once ended the hidden value
def test_redacted_lines_keep_no_credential(key: str, value: str, before: str) -> None:
    from gateway.web.accesslog import redact

    line = f"GET /v1/stream/ws?{before}{key}={value} HTTP/1.1"
    out = redact(line)
    if key in ("token", "access_token", "%74oken"):
        assert out == f"GET /v1/stream/ws?{before}{key}=*** HTTP/1.1"
    else:
        assert out == line
    assert redact(out) == out


@settings(max_examples=200, deadline=None)
@given(
    token=st.one_of(
        st.text(max_size=80), st.builds(lambda a, b: f"v1.{a}.{b}", st.text(max_size=20), st.text(max_size=60))
    )
)
def test_any_string_as_a_token_is_refused_cleanly(token: str) -> None:
    from gateway.errors import Unauthorized
    from gateway.web import tokens

    with pytest.raises(Unauthorized) as info:
        tokens.verify(tokens.derive_key("k"), token)
    assert info.value.code == "invalid_token"
    assert len(token) < 8 or token not in info.value.message  # never echoed
