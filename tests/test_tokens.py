"""Browser tokens (``POST /v1/tokens``) and ``metrics_token`` (issue 22, "What to build" 2 and 4).

Real gateways on loopback with the fake engine; the two-worker test runs ``run_gateway.py``
in a subprocess as tests/test_production.py does. Expired and foreign tokens are minted with
``gateway.web.tokens`` itself, as another instance sharing (or not sharing) the key would.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import aiohttp
import pytest

from bench.client import sse_stream, ws_stream
from bench.procs import ServerProcess
from gateway.ops.workers import WORKER_HEADER
from gateway.web import tokens

from .conftest import Server, fake_settings
from .support.handshake import ws_with_headers
from .test_production import FAKE, QUIET, until

ServerFactory = Callable[..., Awaitable[Server]]
MASTER = "master-key-for-tests"
BEARER = {"Authorization": f"Bearer {MASTER}"}


async def mint(http: aiohttp.ClientSession, url: str, **body: object) -> dict:
    async with http.post(url + "/v1/tokens", json=body, headers=BEARER) as r:
        assert r.status == 200, await r.text()
        assert r.headers["Cache-Control"] == "no-store"
        return await r.json()


async def status_of(http: aiohttp.ClientSession, method: str, url: str, **kwargs: object) -> tuple[int, str | None]:
    """(status, error code or None) of one request."""
    async with http.request(method, url, **kwargs) as r:
        body = await r.json() if r.content_type == "application/json" else None
        return r.status, (body or {}).get("error", {}).get("code") if isinstance(body, dict) else None


async def ws_refusal(http: aiohttp.ClientSession, url: str, **kwargs: object) -> int:
    with pytest.raises(aiohttp.WSServerHandshakeError) as info:
        await http.ws_connect(url, **kwargs)
    return info.value.status


@pytest.fixture
async def server(start_server: ServerFactory) -> Server:
    return await start_server(fake_settings(auth_token=MASTER))


async def test_mint_needs_the_master_key_and_checks_its_body(server: Server, http: aiohttp.ClientSession) -> None:
    url = server.url + "/v1/tokens"
    assert await status_of(http, "POST", url) == (401, "unauthorized")
    assert await status_of(http, "POST", url, headers={"Authorization": "Bearer nope"}) == (401, "unauthorized")
    before = time.time()
    minted = await mint(http, server.url)
    assert set(minted) >= {"token", "expires_at"} and minted["scope"] == list(tokens.SCOPES)
    assert before + 299 <= minted["expires_at"] <= time.time() + 301  # 5 minutes by default
    assert (await mint(http, server.url, ttl_s=3600, scope=["ws"]))["scope"] == ["ws"]
    assert minted["token"] != (await mint(http, server.url))["token"]  # a nonce: every token differs
    for body in ({"ttl_s": 3601}, {"ttl_s": 0}, {"ttl_s": "long"}, {"scope": ["admin"]}, {"scope": []}):
        assert await status_of(http, "POST", url, json=body, headers=BEARER) == (400, "invalid_option"), body
    assert await status_of(http, "POST", url, data=b"[1", headers=BEARER) == (400, "invalid_json")
    # a browser token cannot mint more of itself
    browser = {"Authorization": f"Bearer {minted['token']}"}
    assert await status_of(http, "POST", url, headers=browser) == (403, "insufficient_scope")


async def test_a_token_opens_every_route(server: Server, http: aiohttp.ClientSession) -> None:
    token = (await mint(http, server.url))["token"]
    assert (await status_of(http, "GET", f"{server.url}/v1/voices?token={token}"))[0] == 200
    assert (await status_of(http, "GET", server.url + "/v1/voices", headers={"Authorization": f"Bearer {token}"}))[
        0
    ] == 200
    async with http.post(
        server.url + "/v1/audio/speech",
        json={"input": "Hello there.", "response_format": "pcm"},
        params={"token": token},
    ) as r:
        assert r.status == 200 and len(await r.read()) > 1000
    sse = await sse_stream(http, f"{server.url}/v1/stream/sse?token={token}", text="Hello there.", format="pcm")
    assert sse.done is not None and sse.audio
    ws = await ws_stream(http, f"{server.ws_url}?token={token}", text="Hello there.", options={"format": "pcm"})
    assert ws.done is not None and ws.audio
    # reusable until it expires, by design (docs/PROTOCOL.md): the same token opens the channel again
    again = await ws_stream(http, f"{server.ws_url}?token={token}", text="Hello again.", options={"format": "pcm"})
    assert again.done is not None and again.audio
    # and nothing without one
    assert await status_of(http, "GET", server.url + "/v1/voices") == (401, "unauthorized")
    assert await ws_refusal(http, server.ws_url) == 401


async def test_the_websocket_subprotocol_form(server: Server, http: aiohttp.ClientSession) -> None:
    """``new WebSocket(url, ["token", token])``: the server answers the subprotocol ``token``
    (a browser drops a socket whose answer names none of the protocols it offered)."""
    token = (await mint(http, server.url, scope=["ws"]))["token"]
    async with ws_with_headers(server.ws_url, protocols=("token", token)) as (ws, handshake):
        assert ws.protocol == "token"
        assert handshake["Sec-WebSocket-Protocol"] == "token"  # never the token itself
        await ws.send_json({"type": "text", "text": "Hello there."})
        await ws.send_json({"type": "end"})
        events = [m.json()["type"] async for m in ws if m.type == aiohttp.WSMsgType.TEXT]
    assert events[-1] == "done", events
    assert await ws_refusal(http, server.ws_url, protocols=("token", token + "x")) == 401
    assert await ws_refusal(http, server.ws_url, protocols=("token",)) == 401


async def test_expired_tampered_foreign_and_out_of_scope_tokens(server: Server, http: aiohttp.ClientSession) -> None:
    key = tokens.derive_key(MASTER)
    expired, _ = tokens.mint(key, ttl_s=60, now=time.time() - 120)
    foreign, _ = tokens.mint(tokens.derive_key("another-servers-key"))
    ws_only = (await mint(http, server.url, scope=["ws"]))["token"]
    good = (await mint(http, server.url))["token"]
    body, _, signature = good.rpartition(".")
    _, exp, scope, nonce = body.split(".")
    tampered = {
        "signature": f"{body}.{signature[:-2]}{'AA' if signature[-2:] != 'AA' else 'BB'}",
        "expiry": f"v1.{int(exp) + 3600}.{scope}.{nonce}.{signature}",
        "scope": ws_only.replace(".ws.", ".all.", 1),
        "truncated": body,
        "not a token": "v1.garbage",
        "not ascii": f"v1.{exp}.{scope}.é.{signature}",  # once a 500 (found by tests/test_edges.py)
    }
    voices = server.url + "/v1/voices"
    assert await status_of(http, "GET", voices, params={"token": expired}) == (401, "token_expired")
    assert await ws_refusal(http, f"{server.ws_url}?token={expired}") == 401
    assert await status_of(http, "GET", voices, params={"token": foreign}) == (401, "invalid_token")
    for what, token in tampered.items():
        assert await status_of(http, "GET", voices, params={"token": token}) == (401, "invalid_token"), what
    # wrong scope: 403 insufficient_scope on every route outside it, the WebSocket still open to it
    assert await status_of(http, "GET", voices, params={"token": ws_only}) == (403, "insufficient_scope")
    assert await status_of(http, "GET", server.url + "/v1/stream/sse", params={"token": ws_only, "text": "Hi."}) == (
        403,
        "insufficient_scope",
    )
    assert await status_of(
        http, "POST", server.url + "/v1/audio/speech", params={"token": ws_only}, json={"input": "Hi."}
    ) == (403, "insufficient_scope")
    sse_only = (await mint(http, server.url, scope=["sse"]))["token"]
    assert await ws_refusal(http, f"{server.ws_url}?token={sse_only}") == 403
    assert (await ws_stream(http, f"{server.ws_url}?token={ws_only}", text="Hi there.")).done is not None


async def test_minting_without_auth_token_is_refused(fake_server: Server, http: aiohttp.ClientSession) -> None:
    assert await status_of(http, "POST", fake_server.url + "/v1/tokens") == (400, "auth_disabled")


async def test_another_worker_accepts_the_token() -> None:
    """Stateless tokens: minted by one worker, accepted by every worker sharing the key."""
    with ServerProcess("serve", *FAKE, "--workers", "2", settings=[*QUIET, f"auth_token={MASTER}"]) as server:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, force_close=True)) as http:
            async with http.post(server.url + "/v1/tokens", json={"scope": ["voices"]}, headers=BEARER) as r:
                minter, token = int(r.headers[WORKER_HEADER]), (await r.json())["token"]
            accepted: set[int] = set()

            async def both_accept() -> bool:
                async with http.get(server.url + "/v1/voices", params={"token": token}) as resp:
                    assert resp.status == 200, await resp.text()
                    accepted.add(int(resp.headers[WORKER_HEADER]))
                return len(accepted) == 2

            await until(both_accept, 30, "both workers to answer")
    assert minter in accepted and len(accepted) == 2


async def test_metrics_token(start_server: ServerFactory, http: aiohttp.ClientSession) -> None:
    server = await start_server(fake_settings(metrics_token="scrape-me", auth_token=MASTER))
    url = server.url + "/metrics"
    assert await status_of(http, "GET", url) == (401, "unauthorized")
    for wrong in ("Bearer nope", f"Bearer {MASTER}", "scrape-me"):  # not the master key, nor a bare value
        assert await status_of(http, "GET", url, headers={"Authorization": wrong}) == (401, "unauthorized"), wrong
    assert await status_of(http, "GET", url, params={"token": "scrape-me"}) == (401, "unauthorized")
    async with http.get(url, headers={"Authorization": "Bearer scrape-me"}) as r:
        assert r.status == 200 and "tts_sessions_total" in await r.text()
    for open_route in ("/healthz", "/readyz", "/"):  # probes and the page stay open
        async with http.get(server.url + open_route) as r:
            assert r.status == 200, open_route
