"""What a client gets for bytes aiohttp's HTTP parser refuses, read off a raw socket.

Such a request never reaches the application: aiohttp's connection handler answers it. The
product's runner (``GatewayRunner``, ``gateway/web/httperrors.py``) has that answer in the JSON
error shape of docs/PROTOCOL.md. aiohttp answers on the status line of the request it could not
parse, which it takes as HTTP/1.0: so the status line says ``HTTP/1.0`` and the connection is
closed after the answer (nothing pipelined behind the bad bytes is served). The gateway, and the
sessions open on it, go on. These tests pin all of that, byte by byte where it matters.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from http import HTTPStatus

import aiohttp
import pytest
from multidict import CIMultiDict

from .conftest import Server

CASES = [
    ("not-http", b"GARBAGE\r\n\r\n", 400, "bad_request"),
    ("bad-version", b"GET /healthz HTTP/9.x\r\nHost: x\r\n\r\n", 400, "bad_request"),
    ("bad-header-name", b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Name: 1\r\n\r\n", 400, "bad_request"),
    ("nul-in-header", b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n", 400, "bad_request"),
    (
        "header-9kB",
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n",
        431,
        "headers_too_large",
    ),
    ("line-20kB", b"GET /healthz?q=" + b"a" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414, "uri_too_long"),
    # a valid request pipelined behind the bad bytes: the connection closes before it
    ("pipelined", b"GARBAGE\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 400, "bad_request"),
]


async def raw_exchange(port: int, data: bytes) -> bytes:
    """Send ``data`` on a fresh connection; everything the server sends until it closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 30)  # to EOF; a hang guard, not a timing
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


def parse(answer: bytes) -> tuple[str, CIMultiDict[str], bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    return status_line, CIMultiDict(line.split(": ", 1) for line in lines), body


async def ping(ws: aiohttp.ClientWebSocketResponse) -> str:
    await ws.send_json({"type": "ping"})
    return str((await ws.receive_json(timeout=30))["type"])  # a hang guard


@pytest.mark.parametrize("name,request_bytes,status,code", CASES, ids=[c[0] for c in CASES])
async def test_refused_bytes_get_json_then_the_connection_closes(
    fake_server: Server, http: aiohttp.ClientSession, name: str, request_bytes: bytes, status: int, code: str
) -> None:
    port = int(fake_server.url.rsplit(":", 1)[1])
    async with http.ws_connect(fake_server.ws_url) as ws:  # a session open all along
        assert await ping(ws) == "pong"
        answer = await raw_exchange(port, request_bytes)  # read() returned: the server closed it
        assert answer.count(b"HTTP/1.") == 1, answer  # one answer; the pipelined request unserved
        status_line, headers, body = parse(answer)
        assert status_line == f"HTTP/1.0 {status} {HTTPStatus(status).phrase}"
        assert headers["Content-Type"] == "application/json; charset=utf-8"
        assert headers["Server"] == "kokoro-gateway"  # no Python or aiohttp versions given away
        assert int(headers["Content-Length"]) == len(body)
        error = json.loads(body)
        assert set(error) == {"error"} and set(error["error"]) == {"code", "message"}
        assert error["error"]["code"] == code and error["error"]["message"]
        assert await ping(ws) == "pong"  # the open session goes on
    async with http.get(fake_server.url + "/healthz") as resp:  # and new requests are served
        assert resp.status == 200
        assert resp.headers["Server"] == "kokoro-gateway"


async def test_a_long_bad_header_is_quoted_in_part(fake_server: Server) -> None:
    """aiohttp's explanation quotes the client's bytes; the answer carries at most a few hundred."""
    port = int(fake_server.url.rsplit(":", 1)[1])
    name = b"Bad" + b"x" * 7000 + b" Name"
    answer = await raw_exchange(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + name + b": 1\r\n\r\n")
    status_line, _, body = parse(answer)
    assert status_line == "HTTP/1.0 400 Bad Request"
    message = json.loads(body)["error"]["message"]
    assert message.startswith("malformed HTTP request") and len(message) <= 300, len(message)
