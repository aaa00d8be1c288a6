"""Micro-batching: jobs from different sessions that wait for one device within a short window
run together, as one call of a blocking batch function on the engine's worker thread.

The rule is Triton's dynamic batcher, told who is coming: a batch closes when it holds
``max_batch`` live jobs, or when nobody else is on the way (no caller inside ``arrival()``,
such as a session whose text is still being phonemized), or when its oldest job has waited
``window_s`` for those on the way. So a lone listener never waits, and jobs that arrive while
a batch runs are taken at once by the next one (under load batches fill by themselves). Each
job's caller awaits its own result:

- a caller that is cancelled while its job waits (a session's ``cancel``, a client leaving)
  takes the job out of the batch; one cancelled while its batch runs just drops its result;
  the other jobs are not touched;
- the batch function returns one result per job, where a result may be an exception of that
  job alone (such as non-finite audio); if the batch function itself raises, every caller in
  that batch gets an ``EngineError`` of its own that says so.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ..errors import EngineError, GatewayError, NotReady

log = logging.getLogger(__name__)
J = TypeVar("J")
R = TypeVar("R")


def batch_size(requested: int, device: str) -> int:
    """A ``max_batch`` setting resolved (0 = auto): a GPU gains from batching (its kernels are
    far from full on one segment), a CPU does not (its cores already are)."""
    if requested < 0:
        raise ValueError("max_batch must be 0 (auto) or more")
    return requested or (8 if device.startswith("cuda") else 1)


@dataclass(frozen=True, slots=True)
class BatchStats:
    """What batching has done: forward passes, the segments they carried, the largest."""

    batches: int = 0
    segments: int = 0
    largest: int = 0
    dropped: int = 0  # jobs whose callers left before their batch ran

    def after(self, size: int, dropped: int) -> BatchStats:
        return BatchStats(
            self.batches + (size > 0), self.segments + size, max(self.largest, size), self.dropped + dropped
        )


@dataclass(slots=True)
class _Waiting(Generic[J]):
    job: J
    future: asyncio.Future[Any]
    since: float = field(default=0.0)


class MicroBatcher(Generic[J, R]):
    """Collects jobs and runs ``run_batch(jobs) -> [result or exception per job]`` on
    ``executor``, one batch at a time."""

    def __init__(
        self,
        run_batch: Callable[[list[J]], Sequence[R | BaseException]],
        executor: concurrent.futures.Executor,
        *,
        max_batch: int,
        window_s: float,
        name: str = "engine",
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self.run_batch, self.executor, self.name = run_batch, executor, name
        self.max_batch, self.window_s = max_batch, max(0.0, window_s)
        self.stats = BatchStats()
        self._queue: asyncio.Queue[_Waiting[J]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._forming: list[_Waiting[J]] = []  # taken from the queue, not yet run
        self._arriving = 0  # callers inside arrival(): their jobs may join the batch being formed
        self._changed = asyncio.Event()  # a job came or an arrival ended

    @contextlib.contextmanager
    def arrival(self) -> Iterator[None]:
        """Around a caller's work before its ``submit`` (the G2P): the batch being formed waits
        for it (at most ``window_s``). End it right before ``submit``, with no await between."""
        self._arriving += 1
        try:
            yield
        finally:
            self._arriving -= 1
            self._changed.set()

    @property
    def waiting(self) -> int:
        """Jobs queued for the next batch (cancelled ones included until it closes)."""
        return self._queue.qsize()

    async def submit(self, job: J) -> R:
        """``job``'s result once its batch has run; cancelling the caller withdraws the job."""
        loop = asyncio.get_running_loop()
        if self._task is None:
            self._task = loop.create_task(self._dispatch(), name=f"{self.name}-batcher")
        future: asyncio.Future[R] = loop.create_future()
        self._queue.put_nowait(_Waiting(job, future, loop.time()))
        self._changed.set()
        return await future  # a cancelled caller cancels the future: its job is skipped

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        left, self._forming = self._forming, []
        while not self._queue.empty():
            left.append(self._queue.get_nowait())
        self._fail(left, NotReady(f"the {self.name} engine is shutting down"))

    async def _dispatch(self) -> None:
        while True:
            batch = await self._collect()
            self._forming = []
            live = [w for w in batch if not w.future.done()]
            self.stats = self.stats.after(len(live), len(batch) - len(live))
            if live:
                await self._run(live)

    async def _collect(self) -> list[_Waiting[J]]:
        """The next batch: up to ``max_batch`` live jobs, closed when full, when nobody is on
        the way, or when the oldest has waited ``window_s``."""
        loop = asyncio.get_running_loop()
        batch = self._forming = [await self._queue.get()]
        deadline = batch[0].since + self.window_s
        while True:
            live = sum(not w.future.done() for w in batch)
            while live < self.max_batch and not self._queue.empty():
                batch.append(self._queue.get_nowait())
                live += not batch[-1].future.done()
            wait = deadline - loop.time()
            if live >= self.max_batch or not self._arriving or wait <= 0:
                return batch
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), wait)
            except TimeoutError:
                return batch

    async def _run(self, live: list[_Waiting[J]]) -> None:
        try:
            running: concurrent.futures.Future[Any] = self.executor.submit(self.run_batch, [w.job for w in live])
        except RuntimeError:  # the worker was shut down under us
            self._fail(live, NotReady(f"the {self.name} engine is shutting down"))
            return
        try:
            results = list(await asyncio.wrap_future(running))
            if len(results) != len(live):
                raise EngineError(f"{len(results)} results for {len(live)} segments")
        except asyncio.CancelledError:
            self._fail(live, NotReady(f"the {self.name} engine is shutting down"))
            raise
        except Exception as exc:
            log.warning("%s: a batch of %d segments failed: %s", self.name, len(live), exc)
            self._fail(live, exc)
            return
        for w, result in zip(live, results):
            if w.future.done():
                continue  # its caller left while the batch ran: the audio is dropped
            if isinstance(result, BaseException):
                w.future.set_exception(result)
            else:
                w.future.set_result(result)

    def _fail(self, live: list[_Waiting[J]], exc: Exception) -> None:
        """Every caller still waiting gets an error of its own (one exception object raised in
        several tasks would collect all their tracebacks)."""
        for w in live:
            if w.future.done():
                continue
            if isinstance(exc, NotReady):
                error: Exception = NotReady(exc.message)
            else:
                code = exc.code if isinstance(exc, GatewayError) else "engine_error"
                error = EngineError(
                    f"a batch of {len(live)} segments on the {self.name} engine failed: {exc}", code=code
                )
            error.__cause__ = exc
            w.future.set_exception(error)
