"""Admission limits hold for the port, not per worker: with ``workers = 2`` (a supervisor and
two gateway processes on one SO_REUSEPORT port) ``max_active_sessions`` and
``max_sessions_per_client`` count the sessions of both workers (``gateway/web/limits.py``).

A WebSocket holds its admission slot while it is open, so each test opens sockets one after
another and keeps them open: an admitted one answers ``ping`` with ``pong``, a refused one
gets ``error`` and its close. The kernel spreads the connections over the two workers by their
ports; a test first checks that both workers took some.

The workers' lock on their shared counts is held by a second, real process in the last tests:
one stopped while it holds it, then killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest

from bench.procs import ServerProcess
from bench.servers import serve_app
from gateway.ops.workers import WORKER_HEADER
from gateway.web.app import make_app
from gateway.web.limits import LOCK_PREFIX, LocalSlots, SharedLimits
from gateway.web.state import GATEWAY

from .conftest import fake_settings
from .support.handshake import HandshakeHeaders

SETTINGS = ["speed_warmup_text=", "max_active_sessions=3", "max_queued_sessions=0", "max_sessions_per_client=2"]
TRIES = 16  # sockets per client address: all on one worker has odds of 1 in 32,768 (8: 1 in 128, seen once)


@pytest.fixture
def two_workers() -> Iterator[ServerProcess]:
    with ServerProcess("serve", "--engine", "fake", "--workers", "2", settings=SETTINGS) as server:
        yield server


async def outcome(ws: aiohttp.ClientWebSocketResponse) -> str:
    """``admitted``, or the code of the error the refused socket got."""
    await ws.send_json({"type": "ping"})
    msg = await ws.receive_json(timeout=30)  # a hang guard
    return "admitted" if msg["type"] == "pong" else str(msg["code"])


@contextlib.asynccontextmanager
async def sockets(url: str, source: str, n: int) -> AsyncIterator[list[tuple[int, str]]]:
    """``n`` sockets from the address ``source``, opened one by one and held open; yields
    (the worker pid that took each, its outcome)."""
    connector = aiohttp.TCPConnector(limit=0, force_close=True, local_addr=(source, 0))
    handshake = HandshakeHeaders()  # one socket at a time: the latest response is its handshake
    session = aiohttp.ClientSession(connector=connector, trace_configs=[handshake.config])
    async with session as http, contextlib.AsyncExitStack() as stack:
        seen = []
        for _ in range(n):
            ws = await stack.enter_async_context(http.ws_connect(url.replace("http://", "ws://") + "/v1/stream/ws"))
            seen.append((int(handshake.last[WORKER_HEADER]), await outcome(ws)))
        yield seen


async def test_session_limits_hold_across_two_workers(two_workers: ServerProcess) -> None:
    url = two_workers.url
    async with sockets(url, "127.0.0.1", TRIES) as first, sockets(url, "127.0.0.2", TRIES) as second:
        assert len({pid for pid, _ in first + second}) == 2, "the kernel gave every socket to one worker"
        # one client: two sessions on the port, whichever workers its sockets reached
        assert [o for _, o in first].count("admitted") == 2, first
        assert {o for _, o in first} == {"admitted", "too_many_sessions"}
        # another client: its own two would fit, but the port holds three sessions in all
        assert [o for _, o in second].count("admitted") == 1, second
        assert {o for _, o in second} == {"admitted", "overloaded"}
    # all closed: the slots are free again, on both workers
    async with sockets(url, "127.0.0.3", TRIES) as third:
        assert [o for _, o in third].count("admitted") == 2, third


async def worker_pids(url: str, n: int = 16) -> set[int]:
    """The workers that answer ``n`` fresh connections."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, force_close=True)) as http:
        pids = set()
        for _ in range(n):
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(url + "/healthz") as resp:
                    pids.add(int(resp.headers[WORKER_HEADER]))
        return pids


async def test_a_killed_workers_sessions_free_their_slots(two_workers: ServerProcess) -> None:
    url = two_workers.url
    async with sockets(url, "127.0.0.1", TRIES) as held:
        before = {pid for pid, _ in held}
        admitted = [pid for pid, o in held if o == "admitted"]
        assert len(admitted) == 2 and len(before) == 2
        os.kill(admitted[0], signal.SIGKILL)  # its session dies with it, uncounted
    async with asyncio.timeout(60):  # a hang guard: the supervisor restarts the slot
        while not (await worker_pids(url)) - before:
            await asyncio.sleep(0.2)
    # every socket is closed: the restarted slot must not keep the killed worker's count
    async with sockets(url, "127.0.0.1", TRIES) as again:
        assert len({pid for pid, _ in again}) == 2, "the kernel gave every socket to one worker"
        assert [o for _, o in again].count("admitted") == 2, again


@pytest.fixture
def table() -> Iterator[SharedLimits]:
    shared = SharedLimits(workers=2, clients=8)
    yield shared
    shared.close()


async def test_shared_counts_and_a_cleared_column(table: SharedLimits) -> None:
    a, b = table.for_worker(0), table.for_worker(1)
    assert await a.take_active(2) and await b.take_active(2) and not await a.take_active(2) and a.active() == 2
    assert await a.take_client("10.0.0.1", 2) and await b.take_client("10.0.0.1", 2)
    assert not await b.take_client("10.0.0.1", 2)
    for n in range(7):  # other clients fill the small table; the first keeps its row
        assert await a.take_client(f"10.0.1.{n}", 1)
    assert not await a.take_client("10.0.0.1", 2)
    table.clear_worker(1)  # worker 1 died: its session and its client's count are gone
    assert a.active() == 1 and await b.take_client("10.0.0.1", 2) and not await a.take_client("10.0.0.1", 2)
    a.release_client("10.0.0.1")
    assert await a.take_client("10.0.0.1", 2)
    local = LocalSlots()
    assert await local.take_client("x", 1) and not await local.take_client("x", 1)
    local.release_client("x")
    assert await local.take_client("x", 1)


def hold_the_lock(table: SharedLimits, ready: Any) -> None:
    """Worker 1, in its own process: one session counted, then the workers' lock taken and kept."""
    assert asyncio.run(table.for_worker(1).take_active(100))
    assert table.try_lock()
    ready.set()
    time.sleep(600)


@contextlib.asynccontextmanager
async def lock_holder(table: SharedLimits) -> AsyncIterator[multiprocessing.process.BaseProcess]:
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    holder = ctx.Process(target=hold_the_lock, args=(table, ready), daemon=True)
    holder.start()
    try:
        assert await asyncio.to_thread(ready.wait, 60), "the holder never took the lock"
        yield holder
    finally:
        holder.kill()
        await asyncio.to_thread(holder.join, 30)


async def test_a_lock_held_by_a_stopped_then_killed_worker(table: SharedLimits) -> None:
    """Worker 0 (this process's gateway) goes on serving while worker 1 holds the lock, stopped;
    a session that needs the lock waits for it, on the loop, and is admitted once the holder is
    killed; the counts stay right (the holder's session counted until its column is cleared)."""
    settings = fake_settings(max_active_sessions=3, max_queued_sessions=0, queue_timeout_s=120)
    app = make_app(settings, slots=table.for_worker(0))
    async with serve_app(app) as url, aiohttp.ClientSession() as http, contextlib.AsyncExitStack() as stack:
        await app[GATEWAY].ready.wait()
        ws_url = url.replace("http://", "ws://") + "/v1/stream/ws"

        async def connect() -> aiohttp.ClientWebSocketResponse:
            return await stack.enter_async_context(http.ws_connect(ws_url))

        first = await connect()
        assert await outcome(first) == "admitted"
        async with lock_holder(table) as holder:
            assert holder.pid is not None
            os.kill(holder.pid, signal.SIGSTOP)
            waiting = asyncio.create_task(outcome(await connect()))
            assert await outcome(first) == "admitted"  # the open session is served
            async with http.get(url + "/healthz") as resp:
                assert resp.status == 200
            assert not waiting.done()  # no take while a live worker holds the lock
            holder.kill()  # SIGKILL: the kernel frees its lock
        assert await waiting == "admitted"
        assert table.for_worker(0).active() == 3  # two here, and the dead worker's, not yet cleared
        assert await outcome(await connect()) == "overloaded"
        table.clear_worker(1)  # as the supervisor does before the slot's next worker starts
        assert await outcome(await connect()) == "admitted"
        assert await outcome(await connect()) == "overloaded"


def test_a_killed_supervisors_lock_file_is_swept_by_the_next_one(tmp_path: Any, monkeypatch: Any) -> None:
    """A supervisor killed by SIGKILL cannot remove its lock file; the next one removes the
    files whose supervisor is gone (the pid in the name) and keeps a live one's."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.Popen(["true"])
    dead.wait()  # its pid is free now (reused only after the kernel's pid range wraps)
    stale = tmp_path / f"{LOCK_PREFIX}{dead.pid}-abc123.lock"
    live = tmp_path / f"{LOCK_PREFIX}{os.getpid()}-def456.lock"
    other = tmp_path / "gateway-limits-notapid.lock"
    for f in (stale, live, other):
        f.write_text("")
    table = SharedLimits(workers=2, clients=8)
    try:
        assert not stale.exists() and live.exists() and other.exists()
        assert os.path.dirname(table.lock_path) == str(tmp_path)
        assert os.path.basename(table.lock_path).startswith(f"{LOCK_PREFIX}{os.getpid()}-")
    finally:
        table.close()
    assert not os.path.exists(table.lock_path)
