"""Admission control and per-client limits for streaming sessions.

The engine can only synthesize so much at once. Rather than letting every session slow down
together, a session (a WebSocket, an SSE stream, a ``POST /v1/audio/speech``) takes an *active*
slot for its lifetime; past ``max_active`` it waits in a bounded queue, first come first
served, and past ``max_queued`` (or after ``queue_timeout_s`` in the queue) it is refused with
``Overloaded``: 503 + Retry-After on HTTP, ``error`` + close 1013 on the WebSocket.

The limits hold over the counts ``slots`` keeps (``limits.py``): this process's, or, with
``workers > 1``, every worker's on the port. A slot freed here goes to the first session
waiting here; one freed in another worker is seen by the first waiter here, which looks every
``POLL_S``. ``active`` is this process's own sessions (what a shutdown waits for). Taking a
count may wait (on the loop) for the workers' lock; a session waits for it at most
``queue_timeout_s`` (a worker stopped while it holds it), then is refused as ``Overloaded``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Coroutine

from ..errors import Overloaded, ShuttingDown, TooManySessions
from ..metrics import Metrics
from .limits import LocalSlots, Slots

POLL_S = 0.05  # how often the first waiter looks for a slot freed in another worker


class Admission:
    def __init__(
        self,
        *,
        max_active: int,
        max_queued: int,
        queue_timeout_s: float,
        per_client: int,
        metrics: Metrics,
        slots: Slots | None = None,
    ) -> None:
        self.max_active = max(1, max_active)
        self.max_queued = max(0, max_queued)
        self.queue_timeout_s = queue_timeout_s
        self.per_client = per_client
        self.metrics = metrics
        self.slots: Slots = slots or LocalSlots()
        self.active = 0  # this process's sessions holding a slot
        self.draining = False
        # waiters in order; a freed slot is handed to the first by resolving its future, so a
        # waiter cancelled in the tick it was handed one passes it on (an ``asyncio.Condition``
        # dropped that wake-up on Python 3.11 and the next waiter was refused with none active)
        self._queue: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        return len(self._queue)

    def _retry_after(self) -> float:
        return max(1.0, min(30.0, self.queue_timeout_s))

    @contextlib.asynccontextmanager
    async def session(self, client: str) -> AsyncIterator[None]:
        """Hold an active slot (and one of ``client``'s) for the body's duration."""
        if self.draining:
            raise ShuttingDown("the gateway is shutting down; retry on another instance")
        if self.per_client and not await self._counted(self.slots.take_client(client, self.per_client)):
            raise TooManySessions(f"at most {self.per_client} concurrent sessions per client")
        try:
            await self._acquire()
            try:
                yield
            finally:
                self._release()
        finally:
            if self.per_client:
                self.slots.release_client(client)

    async def _acquire(self) -> None:
        if not self._queue and await self._counted(self.slots.take_active(self.max_active)):
            self.active += 1
            self.metrics.queued.set(self.waiting)
            return
        if self.waiting >= self.max_queued:
            raise Overloaded(
                f"{self.slots.active()} sessions active and {self.waiting} queued; retry shortly",
                retry_after=self._retry_after(),
            )
        granted = asyncio.get_running_loop().create_future()
        self._queue.append(granted)
        self.metrics.queued.set(self.waiting)
        try:
            async with asyncio.timeout(self.queue_timeout_s):
                await self._wait(granted)
        except TimeoutError:
            if not _handed(granted):
                raise Overloaded(
                    f"no synthesis slot within {self.queue_timeout_s:g} s; retry shortly",
                    retry_after=self._retry_after(),
                ) from None
            # the slot came in the same tick as the deadline: it is ours, go on
        except BaseException:
            if _handed(granted):  # cancelled in the tick the slot came: it goes to the next in line
                self._release()
            raise
        finally:
            with contextlib.suppress(ValueError):
                self._queue.remove(granted)
            self.metrics.queued.set(self.waiting)

    async def _wait(self, granted: asyncio.Future[None]) -> None:
        """Until ``granted`` is set: by ``_release``, which hands its slot over (``active``
        counts it already), or here, when it is first in line and a slot is free (one that
        another worker freed)."""
        while not granted.done():
            await asyncio.wait([granted], timeout=POLL_S)
            first = next((w for w in self._queue if not w.done()), None)
            if first is granted and await self.slots.take_active(self.max_active):
                if granted.done():  # handed one by ``_release`` while it took this: one is enough
                    self.slots.release_active()
                    continue
                self.active += 1
                granted.set_result(None)

    async def _counted(self, take: Coroutine[None, None, bool]) -> bool:
        """``take``'s answer, within the queue timeout (its lock held by a stopped worker)."""
        try:
            async with asyncio.timeout(self.queue_timeout_s):
                return await take
        except TimeoutError:
            raise Overloaded(
                "the workers' session counts stayed locked; retry shortly", retry_after=self._retry_after()
            ) from None

    def _release(self) -> None:
        """Hand the slot to the first waiter still waiting, or free it."""
        while self._queue:
            waiter = self._queue.popleft()
            if not waiter.done():  # one that timed out or was cancelled is passed over
                waiter.set_result(None)
                return
        self.active -= 1
        self.slots.release_active()


def _handed(granted: asyncio.Future[None]) -> bool:
    return granted.done() and not granted.cancelled()
