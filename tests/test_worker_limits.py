"""Admission limits hold for the port, not per worker: with ``workers = 2`` (a supervisor and
two gateway processes on one SO_REUSEPORT port) ``max_active_sessions`` and
``max_sessions_per_client`` count the sessions of both workers (``gateway/web/limits.py``).

A WebSocket holds its admission slot while it is open, so each test opens sockets one after
another and keeps them open: an admitted one answers ``ping`` with ``pong``, a refused one
gets ``error`` and its close. The kernel spreads the connections over the two workers by their
ports; a test first checks that both workers took some.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator, Iterator

import aiohttp
import pytest

from bench.procs import ServerProcess
from gateway.ops.workers import WORKER_HEADER
from gateway.web.limits import LocalSlots, SharedLimits

from .support.handshake import HandshakeHeaders

SETTINGS = ["speed_warmup_text=", "max_active_sessions=3", "max_queued_sessions=0", "max_sessions_per_client=2"]
TRIES = 8  # sockets per client address: all eight on one worker has odds of 1 in 128


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


def test_shared_counts_and_a_cleared_column() -> None:
    table = SharedLimits(workers=2, clients=8)
    a, b = table.for_worker(0), table.for_worker(1)
    assert a.take_active(2) and b.take_active(2) and not a.take_active(2) and a.active() == 2
    assert a.take_client("10.0.0.1", 2) and b.take_client("10.0.0.1", 2) and not b.take_client("10.0.0.1", 2)
    for n in range(7):  # other clients fill the small table; the first keeps its row
        assert a.take_client(f"10.0.1.{n}", 1)
    assert not a.take_client("10.0.0.1", 2)
    table.clear_worker(1)  # worker 1 died: its session and its client's count are gone
    assert a.active() == 1 and b.take_client("10.0.0.1", 2) and not a.take_client("10.0.0.1", 2)
    a.release_client("10.0.0.1")
    assert a.take_client("10.0.0.1", 2)
    local = LocalSlots()
    assert local.take_client("x", 1) and not local.take_client("x", 1)
    local.release_client("x")
    assert local.take_client("x", 1)
