"""Production on one machine (issue 18): workers on one port, metrics across them, the client
behind trusted proxies, every HTTP error in the JSON shape, nothing to speak.

Servers are real: ``run_gateway.py`` in a subprocess (bench/procs.py) for the workers and for
aiohttp's own parser errors, the in-process gateway for the rest; the fake engine throughout.
"""

from __future__ import annotations

import asyncio
import io
import os
import signal
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
import yarl
from prometheus_client.parser import text_string_to_metric_families

from bench.client import sse_stream, ws_stream
from bench.procs import ServerProcess
from gateway.engines.fake import FakeEngine
from gateway.ops.workers import WORKER_HEADER
from gateway.text.speakable import speakable
from gateway.web.proxies import parse_trusted, resolve_client

from .conftest import Server, fake_settings
from .support.handshake import ws_with_headers

FAKE = ("--engine", "fake")
QUIET = ["speed_warmup_text="]


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


async def until(condition: Callable[[], Awaitable[bool] | bool], timeout: float, what: str) -> None:
    """Poll ``condition`` until it holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if await result if asyncio.iscoroutine(result) else result:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


async def ws_session(url: str, text: str = "Hello there. How are you?") -> tuple[int, dict]:
    """One WebSocket session to its end, on a connection of its own: (the pid of the worker
    that served it, from the handshake's headers, and its ``done``)."""
    async with ws_with_headers(url.replace("http://", "ws://") + "/v1/stream/ws") as (ws, handshake):
        pid = int(handshake[WORKER_HEADER])
        await ws.send_json({"type": "start", "format": "pcm"})
        await ws.send_json({"type": "text", "text": text})
        await ws.send_json({"type": "end"})
        audio = 0
        async for msg in ws:
            if msg.type == aiohttp.WSMsgType.BINARY:
                audio += len(msg.data)
            elif msg.type == aiohttp.WSMsgType.TEXT and msg.json()["type"] in ("done", "error"):
                body = msg.json()
                assert body["type"] == "done" and audio and body["audio_bytes"] == audio, body
                return pid, body
    raise AssertionError("the session ended without done")


def counters(text: str) -> dict[str, float]:
    """Every counter sample (``name{labels}`` -> value) of a /metrics page."""
    out = {}
    for family in text_string_to_metric_families(text):
        if family.type == "counter":
            for s in family.samples:
                if s.name.endswith("_total"):
                    out[s.name + str(sorted(s.labels.items()))] = s.value
    return out


async def scrape_all_workers(url: str, workers: int) -> dict[int, list[dict[str, float]]]:
    """/metrics over several connections at once (the kernel spreads them by their ports)
    until every worker has answered at least twice."""
    by_pid: dict[int, list[dict[str, float]]] = {}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, force_close=True)) as http:

        async def one() -> None:
            async with http.get(url + "/metrics") as r:
                by_pid.setdefault(int(r.headers[WORKER_HEADER]), []).append(counters(await r.text()))

        async def enough() -> bool:
            await asyncio.gather(*(one() for _ in range(8)))
            return len(by_pid) == workers and all(len(v) >= 2 for v in by_pid.values())

        await until(enough, 30, "every worker to answer /metrics")
    return by_pid


@pytest.fixture
def two_workers() -> ServerProcess:
    with ServerProcess("serve", *FAKE, "--workers", "2", settings=QUIET) as server:
        yield server


async def test_two_workers_share_sessions_and_metrics_agree(two_workers: ServerProcess) -> None:
    url, sessions = two_workers.url, 24
    served = await asyncio.gather(*(ws_session(url) for _ in range(sessions)))
    pids = {pid for pid, _ in served}
    assert len(pids) == 2, f"all {sessions} sessions went to {pids}"
    assert all(parent_of(pid) == two_workers.proc.pid for pid in pids)  # the supervisor's workers
    audio = sum(done["audio_bytes"] for _, done in served)
    scrapes = await scrape_all_workers(url, 2)
    assert set(scrapes) == pids
    pages = [page for pages in scrapes.values() for page in pages]
    assert all(page == pages[0] for page in pages), "totals differ between scrapes"
    assert pages[0]["tts_sessions_total[('channel', 'ws')]"] == sessions
    assert pages[0]["tts_bytes_total[('channel', 'ws'), ('kind', 'audio')]"] == audio


async def test_a_killed_worker_comes_back_and_the_port_keeps_serving(two_workers: ServerProcess) -> None:
    url = two_workers.url
    before = await asyncio.gather(*(ws_session(url) for _ in range(12)))
    pids = {pid for pid, _ in before}
    victim = min(pids)
    os.kill(victim, signal.SIGKILL)
    await until(
        lambda: any(f"worker {victim} exited" in line for line in list(two_workers.tail)),
        30,
        "the supervisor to see the worker die",
    )
    seen: set[int] = set()

    async def replaced() -> bool:  # every session in the meantime is served, by someone
        served = await asyncio.gather(*(ws_session(url) for _ in range(4)))
        seen.update(pid for pid, _ in served)
        return bool(seen - pids)

    await until(replaced, 60, "a new worker to serve")
    new = seen - pids
    assert victim not in seen and all(parent_of(pid) == two_workers.proc.pid for pid in new)
    scrapes = await scrape_all_workers(url, 2)
    total = next(iter(scrapes.values()))[0]["tts_sessions_total[('channel', 'ws')]"]
    assert total >= len(before) + 4  # the dead worker's sessions still count


async def test_sigterm_drains_every_worker() -> None:
    server = ServerProcess("serve", *FAKE, "--workers", "2", settings=[*QUIET, "fake_rtf=0.5"])
    try:
        async with ws_with_headers(server.url.replace("http://", "ws://") + "/v1/stream/ws") as (ws, handshake):
            worker = int(handshake[WORKER_HEADER])
            await ws.send_json({"type": "start", "format": "pcm"})
            await ws.send_json({"type": "text", "text": "One two three four five six. Seven eight nine ten."})
            await ws.send_json({"type": "end"})
            first = await ws.receive()
            while first.type != aiohttp.WSMsgType.BINARY:
                first = await ws.receive()
            server.proc.send_signal(signal.SIGTERM)  # mid-reply: the reply still finishes
            events = [m.json()["type"] async for m in ws if m.type == aiohttp.WSMsgType.TEXT]
        assert events[-1] == "done", events
        assert await asyncio.to_thread(server.proc.wait, 60) == 0
        assert not Path(f"/proc/{worker}").exists()
    finally:
        server.stop()


# -- behind a proxy ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "peer,hops,trusted,client",
    [
        ("203.0.113.9", ["198.51.100.1"], "", "203.0.113.9"),  # nobody trusted: headers ignored
        ("203.0.113.9", ["198.51.100.1"], "10.0.0.0/8", "203.0.113.9"),  # peer not trusted
        ("10.0.0.2", ["198.51.100.1"], "10.0.0.0/8", "198.51.100.1"),
        ("10.0.0.2", ["6.6.6.6", "198.51.100.1", "10.0.0.7"], "10.0.0.0/8", "198.51.100.1"),  # right-most untrusted
        ("10.0.0.2", ["10.0.0.5", "10.0.0.7"], "10.0.0.0/8", "10.0.0.5"),  # all trusted: the first
        ("10.0.0.2", ["198.51.100.1", "unknown"], "10.0.0.0/8", "10.0.0.2"),  # unreadable hop: the proxy
        ("10.0.0.2", ['"[2001:db8::1]:4711"'], "10.0.0.0/8", "2001:db8::1"),
        ("10.0.0.2", ["192.0.2.60:5060"], "10.0.0.2", "192.0.2.60"),
        ("::ffff:10.0.0.2", ["192.0.2.60"], "10.0.0.0/8", "192.0.2.60"),  # v4 peer on a v6 socket
        ("10.0.0.2", [], "10.0.0.0/8", "10.0.0.2"),
    ],
)
def test_resolve_client(peer: str, hops: list[str], trusted: str, client: str) -> None:
    assert resolve_client(peer, hops, parse_trusted(trusted)) == client


def test_trusted_proxies_must_parse() -> None:
    with pytest.raises(ValueError, match="'10.0.0.300'"):
        parse_trusted("10.0.0.1, 10.0.0.300")


@pytest.mark.parametrize(
    "trusted,header,second_admitted",
    [
        ("127.0.0.1", "X-Forwarded-For", True),
        ("127.0.0.0/8, ::1", "Forwarded", True),
        ("10.0.0.0/8", "X-Forwarded-For", False),  # loopback is not trusted: one client, the proxy
    ],
)
async def test_forwarded_client_counts_only_from_trusted_peers(
    start_server: Callable[..., Awaitable[Server]], trusted: str, header: str, second_admitted: bool
) -> None:
    header_setting = {"forwarded_header": "forwarded"} if header == "Forwarded" else {}
    server = await start_server(
        fake_settings(trusted_proxies=trusted, max_sessions_per_client=1, fake_hang=True, **header_setting)
    )

    def claim(ip: str) -> dict[str, str]:
        return {header: f"for={ip}" if header == "Forwarded" else f"{ip}, 127.0.0.1"}

    async with aiohttp.ClientSession() as http:
        url = server.url + "/v1/stream/sse?text=Hello%20there."
        async with http.get(url, headers=claim("198.51.100.1")) as first:  # held open: the engine hangs
            assert first.status == 200
            async with http.get(url, headers=claim("198.51.100.2")) as other:
                assert (other.status == 200) is second_admitted, other.status
            async with http.get(url, headers=claim("198.51.100.1")) as same:
                assert same.status == 429 and (await same.json())["error"]["code"] == "too_many_sessions"


async def test_the_access_log_names_the_forwarded_client() -> None:
    with ServerProcess("serve", *FAKE, settings=[*QUIET, "trusted_proxies=127.0.0.1"]) as server:
        async with aiohttp.ClientSession() as http:
            async with http.ws_connect(
                server.url.replace("http://", "ws://") + "/v1/stream/ws", headers={"X-Forwarded-For": "198.51.100.23"}
            ) as ws:
                await ws.send_json({"type": "text", "text": "Hello there."})
                await ws.send_json({"type": "end"})
                events = [m.json()["type"] async for m in ws if m.type == aiohttp.WSMsgType.TEXT]
            assert events[-1] == "done", events  # a WebSocket on the request with the client's address
            async with http.get(
                server.url + "/v1/stream/sse?text=Hi%20there.", headers={"X-Forwarded-For": "198.51.100.23"}
            ) as r:
                assert r.status == 200 and b"event: done" in await r.read()
            async with http.get(server.url + "/healthz", headers={"X-Forwarded-For": "[2001:db8::7]:80"}) as r:
                assert r.status == 200

        def logged(client: str, path: str) -> bool:
            return any(
                "aiohttp.access" in line and f": {client} [" in line and path in line for line in list(server.tail)
            )

        await until(
            lambda: (
                logged("198.51.100.23", "/v1/stream/sse")
                and logged("2001:db8::7", "/healthz")
                and logged("198.51.100.23", '/v1/stream/ws HTTP/1.1" 101 ')
            ),
            10,
            "the access log lines:\n" + "\n".join(list(server.tail)[-6:]),
        )


# -- every error in one shape -------------------------------------------------------------
def raw_exchange(port: int, data: bytes) -> tuple[int, bytes]:
    """Send raw bytes, read the answer to the end (the server closes): (status, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


@pytest.fixture(scope="module")
def one_process() -> ServerProcess:
    with ServerProcess("serve", *FAKE, settings=QUIET) as server:
        yield server


def assert_shape(status: int, body: bytes | dict, want_status: int, want_code: str) -> None:
    import json

    parsed = json.loads(body) if isinstance(body, bytes) else body
    assert status == want_status, (status, parsed)
    assert set(parsed) == {"error"} and set(parsed["error"]) == {"code", "message"}, parsed
    assert parsed["error"]["code"] == want_code and parsed["error"]["message"], parsed


@pytest.mark.parametrize(
    "request_bytes,status,code",
    [
        (b"GET /healthz?q=" + b"a" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414, "uri_too_long"),
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n", 431, "headers_too_large"),
        (
            b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: a\r\n" % i for i in range(200)) + b"\r\n",
            431,
            "headers_too_large",
        ),
        (b"GARBAGE\r\n\r\n", 400, "bad_request"),
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n", 400, "bad_request"),
        (
            b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
            400,
            "bad_request",
        ),
    ],
    ids=["query-20kB", "header-9kB", "200-headers", "not-http", "bad-content-length", "bad-chunk"],
)
def test_parser_errors_answer_json(one_process: ServerProcess, request_bytes: bytes, status: int, code: str) -> None:
    assert_shape(*raw_exchange(one_process.port, request_bytes), status, code)


async def test_routing_errors_answer_json(one_process: ServerProcess) -> None:
    url = one_process.url
    async with aiohttp.ClientSession() as http:
        async with http.get(url + "/no/such/route") as r:
            assert_shape(r.status, await r.json(), 404, "not_found")
        async with http.delete(url + "/healthz") as r:
            assert_shape(r.status, await r.json(), 405, "method_not_allowed")
            assert "GET" in r.headers["Allow"]
        async with http.post(
            url + "/v1/audio/speech",
            data=io.BytesIO(b"{" + b" " * (1 << 20) + b"}"),
            headers={"Content-Type": "application/json"},
        ) as r:
            assert_shape(r.status, await r.json(), 413, "too_large")
        for path in ("/static/missing.js", "/static/..%2fREADME.md"):  # and nothing outside static/
            async with http.get(yarl.URL(url + path, encoded=True)) as r:
                assert_shape(r.status, await r.json(), 404, "not_found")
        async with http.get(url + "/static/app.js") as r:
            assert r.status == 200 and "javascript" in r.headers["Content-Type"]
        async with http.get(url + "/v1/stream/ws") as r:  # not a WebSocket upgrade
            assert r.status == 400 and (await r.json())["error"]["code"]


@pytest.mark.parametrize("text", ["😀🎉 👍", "\x00\x01\x07\x1b", "... !!! ---", " \u200b\u2063 ?"])
@pytest.mark.parametrize("stream", [False, True])
async def test_nothing_to_speak_is_a_400_before_synthesis(
    fake_server: Server, http: aiohttp.ClientSession, text: str, stream: bool
) -> None:
    async with http.post(fake_server.url + "/v1/audio/speech", json={"input": text, "stream": stream}) as r:
        assert_shape(r.status, await r.json(), 400, "nothing_to_speak")  # stream: before any header
    assert fake_server.engine.calls == 0  # decided before synthesis


@pytest.mark.parametrize(
    "text,expected",
    [
        ("Hello", True),
        ("42", True),
        ("日本語", True),
        ("é", True),
        ("😀 1", True),
        ("😀", False),
        ("...", False),
        ("\x00\x1b", False),
        ("_ _", False),
        ("", False),
        ("— «» ¿?", False),
    ],
)
def test_speakable(text: str, expected: bool) -> None:
    assert speakable(text) is expected


class SilentOn(FakeEngine):
    """The fake engine, except that a segment holding ``marker`` yields no audio at all (as a
    real voice does with letters its G2P cannot read)."""

    marker = "Zzyzx"

    async def synthesize(self, text: str, **kwargs: object):  # type: ignore[override]
        if self.marker in text:
            return
        async for chunk in super().synthesize(text, **kwargs):  # type: ignore[arg-type]
            yield chunk


@pytest.mark.parametrize("tokens", [["😀🎉 👍"], ["😀", " 🎉", " ..."], ["\x00\x07 ---"]])
async def test_a_reply_with_nothing_to_speak_is_an_error_on_both_channels(
    fake_server: Server, http: aiohttp.ClientSession, tokens: list[str]
) -> None:
    ws = await ws_stream(http, fake_server.ws_url, tokens=tokens, options={"format": "pcm"})
    assert ws.error is not None and ws.error["code"] == "nothing_to_speak" and ws.done is None
    assert not ws.payloads and ws.close_code == 1008
    sse = await sse_stream(http, fake_server.url + "/v1/stream/sse", text="".join(tokens), format="pcm")
    assert sse.error is not None and sse.error["code"] == "nothing_to_speak" and not sse.payloads


async def test_a_segment_with_nothing_to_say_is_skipped_and_counted(start_server, http: aiohttp.ClientSession) -> None:
    settings = fake_settings()
    server = await start_server(settings, SilentOn(settings))
    r = await ws_stream(
        http,
        server.ws_url,
        text="First one here. Zzyzx road sign. Last one now.",
        options={"format": "pcm", "envelope": "msgpack"},
    )
    assert r.done is not None and r.error is None
    assert [e["text"] for e in r.of("sentence")] == ["First one here.", "Zzyzx road sign.", "Last one now."]
    assert {p["sentence"] for p in r.of("audio")} == {0, 2}  # nothing for the one in the middle
    async with http.get(server.url + "/metrics") as resp:
        assert counters(await resp.text())["tts_segments_skipped_total[]"] == 1
