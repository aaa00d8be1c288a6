"""The SageMaker model container, and the gateway's ``container`` engine in front of it.

The container runs as a real subprocess (``run_gateway.py container --engine fake``) on a
loopback port; the gateway runs in-process with ``engine=container`` pointing at it. Nothing is
mocked: clients speak real WebSockets to real servers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import aiohttp
import pytest
from aiohttp import web

from bench.client import ws_stream
from bench.servers import serve_app, serve_gateway
from gateway.audio.decode import decode_mp3
from gateway.audio.mp3 import is_whole_frames
from gateway.config import Settings
from gateway.engines.container import START_TIMEOUT_S
from gateway.engines.fake import FakeEngine, fake_duration_s
from gateway.errors import EngineError
from gateway.text.segmenter import split_text
from gateway.web.container import STREAM_PATH, make_container_app
from gateway.web.state import GATEWAY

from .conftest import Server, fake_settings, free_port
from .support.engines import ModalFake, SlowLoadingEngine

ROOT = Path(__file__).resolve().parent.parent
REPLY = "Sure, I can help with that. The train leaves at nine tonight. Does that work for you?"


def expected_seconds(text: str) -> float:
    return sum(fake_duration_s(p) for p in split_text(text, first_clause_words=Settings().first_clause_words))


@dataclass
class Container:
    port: int
    settings: tuple[str, ...] = ()  # --set NAME=VALUE for the container, e.g. ("fake_rtf=1.0",)
    proc: subprocess.Popen[bytes] | None = None
    log: IO[bytes] = field(default_factory=tempfile.TemporaryFile)  # stderr; a pipe could fill up

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}{STREAM_PATH}"

    def start(self) -> Container:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
        self.log.seek(0)
        self.log.truncate()
        sets = [arg for item in self.settings for arg in ("--set", item)]
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "run_gateway.py"),
                "container",
                "--engine",
                "fake",
                *sets,
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=self.log,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen(self.url + "/ping", timeout=1) as resp:
                    if resp.status == 200:
                        return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        self.log.seek(0)
        raise RuntimeError(f"the container did not answer /ping: {self.log.read().decode()[-2000:]}")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


@contextlib.contextmanager
def running_container(*settings: str) -> Iterator[Container]:
    """A container subprocess on a free port (fake engine), stopped and cleaned up after."""
    c = Container(free_port(), settings).start()
    try:
        yield c
    finally:
        c.stop()
        c.log.close()


@pytest.fixture(scope="module")
def container() -> Iterator[Container]:
    with running_container() as c:
        yield c


@pytest.fixture
def own_container() -> Iterator[Container]:
    """A container this test may kill and restart."""
    with running_container() as c:
        yield c


async def gateway_for(start_server, c: Container) -> Server:
    server = await start_server(fake_settings(engine="container", container_url=c.ws_url))
    assert server.app[GATEWAY].load_error is None
    return server


async def read_reply(ws: aiohttp.ClientWebSocketResponse) -> tuple[list[dict[str, Any]], list[bytes]]:
    """Events and audio payloads of one reply on a container socket, up to done/error."""
    events: list[dict[str, Any]] = []
    payloads: list[bytes] = []
    async for msg in ws:
        if msg.type == aiohttp.WSMsgType.BINARY:
            payloads.append(msg.data)
        elif msg.type == aiohttp.WSMsgType.TEXT:
            events.append(json.loads(msg.data))
            if events[-1]["type"] in ("done", "error"):
                break
        else:
            break
    return events, payloads


# -- the container on its own ----------------------------------------------------------------
async def test_ping_and_socket_accepted(container: Container, http: aiohttp.ClientSession) -> None:
    # SageMaker's sidecar wants the socket within 250 ms: the handshake waits on nothing (not
    # even the engine: test_ping_is_503_until_the_engine_is_loaded); its speed is not asserted
    async with http.get(container.url + "/ping") as resp:
        assert resp.status == 200 and (await resp.json())["status"] == "ok"
    for _ in range(5):
        async with http.ws_connect(container.ws_url) as ws:
            await ws.ping()  # and pings are answered (autoping): no close follows
            assert not ws.closed


async def test_invocations_batch(container: Container, http: aiohttp.ClientSession) -> None:
    async with http.post(container.url + "/invocations", json={"text": REPLY, "voice": "tone_b"}) as resp:
        assert resp.status == 200 and resp.content_type == "audio/mpeg"
        audio = await resp.read()
    assert is_whole_frames(audio)
    assert abs(len(decode_mp3(audio)) / 24000 - fake_duration_s(REPLY)) < 0.1
    async with http.post(
        container.url + "/invocations", data="Hello there.", headers={"Content-Type": "text/plain"}
    ) as resp:
        assert resp.status == 200 and resp.content_type == "audio/mpeg"
    async with http.post(container.url + "/invocations", json={"input": "Two words.", "format": "pcm"}) as resp:
        assert resp.status == 200 and resp.content_type == "audio/pcm"
        assert len(await resp.read()) == round(fake_duration_s("Two words.") * 24000) * 2
    async with http.post(container.url + "/invocations", json={"voice": "tone_a"}) as resp:
        assert resp.status == 400 and (await resp.json())["error"]["code"] == "empty_input"
    async with http.post(container.url + "/invocations", json={"text": "Hi.", "voice": "nobody"}) as resp:
        assert resp.status == 400 and (await resp.json())["error"]["code"] == "unknown_voice"


async def test_stream_takes_binary_control_frames_and_keeps_the_socket(
    container: Container, http: aiohttp.ClientSession
) -> None:
    async with http.ws_connect(container.ws_url, max_msg_size=0) as ws:
        for reply in range(2):  # two replies on one socket: done leaves it open
            for message in ({"type": "start", "voice": "tone_a"}, {"type": "text", "text": REPLY}, {"type": "end"}):
                data = json.dumps(message).encode()
                # the sidecar may send either frame type: binary first, text for the second reply
                await (ws.send_bytes(data) if reply == 0 else ws.send_str(data.decode()))
            events, payloads = await read_reply(ws)
            kinds = [e["type"] for e in events]
            assert kinds[0] == "ready" and kinds[-1] == "done", events
            assert [e["text"] for e in events if e["type"] == "sentence"] == [
                "Sure, I can help with that.",
                "The train leaves at nine tonight.",
                "Does that work for you?",
            ]
            assert payloads and all(is_whole_frames(p) for p in payloads)
            audio = b"".join(payloads)
            assert abs(len(decode_mp3(audio)) / 24000 - expected_seconds(REPLY)) < 0.1
            assert events[-1]["audio_bytes"] == len(audio)
        assert not ws.closed
        await ws.send_bytes(b"\xff\xfe not utf-8")
        events, _ = await read_reply(ws)
        assert events[-1]["type"] == "error" and events[-1]["code"] == "invalid_json"


class BrokenEngine(FakeEngine):
    """The fake engine, failing to load as a model folder without weights would."""

    async def start(self) -> None:
        raise EngineError("no .pth weights in /opt/ml/model", code="model_missing")


@contextlib.asynccontextmanager
async def in_process_container(engine: FakeEngine) -> AsyncIterator[tuple[Container, web.Application]]:
    app = make_container_app(engine.settings, engine)
    runner = web.AppRunner(app)
    await runner.setup()
    c = Container(free_port())
    await web.TCPSite(runner, "127.0.0.1", c.port).start()
    try:
        yield c, app
    finally:
        await runner.cleanup()
        c.log.close()


async def test_ping_is_503_until_the_engine_is_loaded(http: aiohttp.ClientSession) -> None:
    engine = SlowLoadingEngine(fake_settings())
    async with in_process_container(engine) as (c, app):
        async with http.get(c.url + "/ping") as resp:
            assert resp.status == 503 and (await resp.json())["status"] == "loading"
        # the handshake never waits for the engine: it completes while the engine cannot load
        # (only this test lets it, below); the timeout is a hang guard, not the assertion
        async with asyncio.timeout(30):
            ws = await http.ws_connect(c.ws_url)
        async with ws:
            assert not engine.loaded.is_set() and not app[GATEWAY].ready.is_set()
            assert not ws.closed
        engine.loaded.set()
        await app[GATEWAY].ready.wait()
        async with http.get(c.url + "/ping") as resp:
            assert resp.status == 200


async def test_container_that_failed_to_load_fails_the_gateway_at_once(
    start_server, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway")
    async with in_process_container(BrokenEngine(fake_settings())) as (c, app):
        await app[GATEWAY].ready.wait()
        async with http.get(c.url + "/ping") as resp:
            body = await resp.json()
            assert resp.status == 503 and body["status"] == "failed" and "no .pth weights" in body["error"]
        async with asyncio.timeout(START_TIMEOUT_S / 2):  # a hang guard: waiting out the start timeout fails
            server = await start_server(fake_settings(engine="container", container_url=c.ws_url))
        error = server.app[GATEWAY].load_error or ""
        # at once: the first /ping's "failed" is final, not retried until the start timeout
        assert "failed to load its engine: EngineError: no .pth weights" in error and "not ready after" not in error, (
            error
        )
        assert not [r for r in caplog.records if "waiting for the container" in r.getMessage()]
        async with http.get(server.url + "/readyz") as resp:
            assert resp.status == 503


# -- the gateway in front of it ----------------------------------------------------------------
async def test_gateway_streams_through_the_container(
    container: Container, start_server, http: aiohttp.ClientSession
) -> None:
    server = await gateway_for(start_server, container)
    async with http.get(server.url + "/v1/voices") as resp:
        body = await resp.json()
        assert body["engine"] == "container" and [v["id"] for v in body["voices"]] == ["tone_a", "tone_b"]
    result = await ws_stream(http, server.ws_url, tokens=re.findall(r"\s*\S+", REPLY), options={"voice": "tone_b"})
    assert result.done is not None, result.events
    sentences = [s["text"] for s in result.of("sentence")]
    assert sentences == split_text(REPLY, first_clause_words=Settings().first_clause_words) and len(sentences) >= 3
    assert all(is_whole_frames(p) for p in result.payloads)
    assert abs(len(decode_mp3(result.audio)) / 24000 - expected_seconds(REPLY)) < 0.1
    engine = server.engine
    assert engine.pool.opened == 1  # every segment after the first reused the pooled socket
    async with http.post(server.url + "/v1/audio/speech", json={"input": REPLY, "response_format": "pcm"}) as resp:
        assert resp.status == 200
        pcm = await resp.read()
    assert abs(len(pcm) / 2 / 24000 - fake_duration_s(REPLY)) < 0.01
    assert engine.pool.opened == 1 and engine.retries == 0


async def test_killed_container_gives_error_then_gateway_recovers(
    own_container: Container, start_server, http: aiohttp.ClientSession
) -> None:
    server = await gateway_for(start_server, own_container)
    first = await ws_stream(http, server.ws_url, text="Hello there.")
    assert first.done is not None
    own_container.kill()  # the pooled socket is now dead, and so is the port

    result = await ws_stream(http, server.ws_url, text="Anyone there?", timeout=30)
    assert result.error is not None and result.error["code"] == "engine_unavailable", result.events
    assert server.engine.retries == 1  # the stale socket was retried once on a fresh connection
    async with http.get(server.url + "/healthz") as resp:
        assert resp.status == 200

    own_container.start()  # same port: the gateway reconnects on its own
    again = await ws_stream(http, server.ws_url, text="Back again.")
    assert again.done is not None and again.error is None
    assert abs(len(decode_mp3(again.audio)) / 24000 - fake_duration_s("Back again.")) < 0.1


MODES = ("frozen-first", "frozen", "exact")


async def test_gateway_forwards_vocoder_and_the_listeners_buffer(http: aiohttp.ClientSession) -> None:
    """The container's engine streams inside a segment only for a listener who waits: the
    gateway in front must tell it the mode asked for and the audio the listener holds."""
    modal = ModalFake(fake_settings(fake_rtf=0.2, fake_chunk_ms=100), MODES)
    # the gateway stops (closing its pooled socket) before the container: a container stopped
    # first waits out its shutdown timeout for that socket (2 minutes of nothing)
    async with serve_app(make_container_app(fake_settings(), modal)) as container_url:
        settings = fake_settings(
            engine="container", container_url=container_url.replace("http://", "ws://") + STREAM_PATH
        )
        async with serve_gateway(settings) as (url, app):
            assert app[GATEWAY].engine.vocoder_modes == MODES
            ws_url = url.replace("http://", "ws://") + "/v1/stream/ws"
            r = await ws_stream(http, ws_url, text=REPLY, options={"vocoder": "frozen", "cache": False})
    assert r.done and r.of("ready")[0]["vocoder"] == "frozen"
    assert [mode for mode, _ in modal.asked] == ["frozen"] * len(r.of("sentence"))
    held = [b for _, b in modal.asked]
    assert held[0] == 0.0 and max(held[1:]) > 0.3  # later segments: the listener holds audio


# -- shutdown: pooled sockets never hold a stop up -----------------------------------------
async def container_streams(http: aiohttp.ClientSession, c: Container) -> float:
    """The container's open stream sockets, from its /metrics."""
    async with http.get(c.url + "/metrics") as resp:
        text = await resp.text()
    found = re.search(r'^tts_sessions_active\{channel="container"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


async def test_container_closes_an_idle_pooled_socket_at_once_on_sigterm(http: aiohttp.ClientSession) -> None:
    # a grace far longer than the guard below: a container that waited for the idle socket as
    # for a reply in flight would hold its stop up for ten minutes
    with running_container("shutdown_grace_s=600") as c:
        async with http.ws_connect(c.ws_url) as ws:
            for message in ({"type": "start", "format": "pcm"}, {"type": "text", "text": "Hello."}, {"type": "end"}):
                await ws.send_str(json.dumps(message))
            events, _ = await read_reply(ws)
            assert events[-1]["type"] == "done"  # the socket stays open for the next reply
            assert c.proc is not None
            c.proc.terminate()
            async with asyncio.timeout(60):  # a hang guard, not a speed figure
                msg = await ws.receive()
                code = await asyncio.to_thread(c.proc.wait)
        assert msg.type == aiohttp.WSMsgType.CLOSE and msg.data == aiohttp.WSCloseCode.GOING_AWAY
        assert code == 0


async def test_gateway_shutdown_closes_its_pooled_sockets_first(
    container: Container, start_server, http: aiohttp.ClientSession
) -> None:
    server = await gateway_for(start_server, container)
    assert (await ws_stream(http, server.ws_url, text="Hello there.")).done is not None
    assert await container_streams(http, container) == 1  # the gateway's pooled idle socket
    await server.app.shutdown()  # on_shutdown: before aiohttp waits for the gateway's handlers
    async with asyncio.timeout(30):  # a hang guard
        while await container_streams(http, container):
            await asyncio.sleep(0.05)
    again = await ws_stream(http, server.ws_url, text="Still here.")  # a segment after it reconnects
    assert again.done is not None and server.engine.pool.opened == 2
