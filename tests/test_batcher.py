"""The micro-batcher on its own (no model): who shares a batch, who waits, what each caller gets.

``run_batch`` here is a plain function on a real worker thread: each job is a number, its
result ten times it, a negative job fails alone, and job 13 fails the whole batch.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import AsyncIterator

import pytest

from gateway.engines.batcher import MicroBatcher, batch_size
from gateway.errors import EngineError, NotReady

SEEN: list[list[int]] = []


def times_ten(jobs: list[int]) -> list[int | BaseException]:
    SEEN.append(list(jobs))
    if 13 in jobs:
        raise RuntimeError("device lost")
    return [EngineError(f"job {j} failed") if j < 0 else j * 10 for j in jobs]


@pytest.fixture
async def worker() -> AsyncIterator[concurrent.futures.ThreadPoolExecutor]:
    SEEN.clear()
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    yield executor
    executor.shutdown(wait=False, cancel_futures=True)


async def caller(batcher: MicroBatcher[int, int], job: int) -> int:
    with batcher.arrival():
        await asyncio.sleep(0)  # its own work first (the G2P): the batch being formed waits for it
    return await batcher.submit(job)


async def test_callers_on_their_way_share_one_batch_each_with_its_own_result(worker) -> None:
    batcher: MicroBatcher[int, int] = MicroBatcher(times_ten, worker, max_batch=4, window_s=3600)
    try:
        results = await asyncio.gather(*(caller(batcher, j) for j in (1, 2, -3)), return_exceptions=True)
        assert results[:2] == [10, 20] and isinstance(results[2], EngineError)
        assert SEEN == [[1, 2, -3]]
        assert (batcher.stats.batches, batcher.stats.segments, batcher.stats.largest) == (1, 3, 3)
        # a lone caller, nobody on the way: it does not wait for the (hour-long) window
        assert await asyncio.wait_for(batcher.submit(4), 60) == 40
        # more than max_batch at once: full batches first
        assert await asyncio.gather(*(caller(batcher, j) for j in range(5, 11))) == [50, 60, 70, 80, 90, 100]
        assert SEEN[2:] == [[5, 6, 7, 8], [9, 10]]
    finally:
        await batcher.aclose()


async def test_a_failed_batch_fails_each_caller_in_it_with_its_own_engine_error(worker) -> None:
    batcher: MicroBatcher[int, int] = MicroBatcher(times_ten, worker, max_batch=3, window_s=3600, name="t")
    try:
        results = await asyncio.gather(*(caller(batcher, j) for j in (1, 13, 2)), return_exceptions=True)
        assert all(isinstance(r, EngineError) and r.code == "engine_error" for r in results), results
        assert all("a batch of 3 segments on the t engine failed: device lost" in r.message for r in results)
        assert len({id(r) for r in results}) == 3
        assert await batcher.submit(5) == 50  # and it goes on
    finally:
        await batcher.aclose()


async def test_closing_tells_every_caller_still_waiting(worker) -> None:
    gate = threading.Event()
    batcher: MicroBatcher[int, int] = MicroBatcher(times_ten, worker, max_batch=2, window_s=3600)
    try:
        worker.submit(gate.wait)  # the device is busy
        running = asyncio.create_task(batcher.submit(1))
        while batcher.stats.segments < 1:  # its batch went to the busy worker
            await asyncio.sleep(0.01)
        queued = asyncio.create_task(batcher.submit(2))
        while batcher.waiting < 1:
            await asyncio.sleep(0.01)
        await batcher.aclose()
        for task in (running, queued):
            with pytest.raises(NotReady):
                await task
    finally:
        gate.set()


def test_batching_is_on_by_default_only_on_a_gpu() -> None:
    assert (batch_size(0, "cuda"), batch_size(0, "cuda:1"), batch_size(0, "cpu"), batch_size(3, "cpu")) == (8, 8, 1, 3)
    with pytest.raises(ValueError):
        batch_size(-1, "cpu")
