"""Admission control and per-client limits for streaming sessions.

The engine can only synthesize so much at once. Rather than letting every session slow down
together, a session takes an *active* slot for its lifetime; past ``max_active`` it waits in a
bounded queue, and past ``max_queued`` (or after ``queue_timeout_s`` in the queue) it is refused
with ``Overloaded``: 503 + Retry-After on HTTP, ``error`` + close 1013 on the WebSocket.
"""
from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from typing import AsyncIterator

from .errors import Overloaded, ShuttingDown, TooManySessions
from .metrics import Metrics


class Admission:
    def __init__(self, *, max_active: int, max_queued: int, queue_timeout_s: float,
                 per_client: int, metrics: Metrics) -> None:
        self.max_active = max(1, max_active)
        self.max_queued = max(0, max_queued)
        self.queue_timeout_s = queue_timeout_s
        self.per_client = per_client
        self.metrics = metrics
        self.active = 0
        self.waiting = 0
        self.draining = False
        self.by_client: Counter[str] = Counter()
        self._freed = asyncio.Condition()

    def _retry_after(self) -> float:
        return max(1.0, min(30.0, self.queue_timeout_s))

    @contextlib.asynccontextmanager
    async def session(self, client: str) -> AsyncIterator[None]:
        """Hold an active slot (and one of ``client``'s) for the body's duration."""
        if self.draining:
            raise ShuttingDown("the gateway is shutting down; retry on another instance")
        if self.per_client and self.by_client[client] >= self.per_client:
            raise TooManySessions(f"at most {self.per_client} concurrent sessions per client")
        self.by_client[client] += 1
        try:
            await self._acquire()
            try:
                yield
            finally:
                await self._release()
        finally:
            self.by_client[client] -= 1
            if not self.by_client[client]:
                del self.by_client[client]

    async def _acquire(self) -> None:
        if self.active < self.max_active and not self.waiting:
            self.active += 1
            self.metrics.queued.set(self.waiting)
            return
        if self.waiting >= self.max_queued:
            raise Overloaded(f"{self.active} sessions active and {self.waiting} queued; retry shortly",
                             retry_after=self._retry_after())
        self.waiting += 1
        self.metrics.queued.set(self.waiting)
        try:
            async with self._freed:
                async with asyncio.timeout(self.queue_timeout_s):
                    await self._freed.wait_for(lambda: self.active < self.max_active)
                self.active += 1
        except TimeoutError:
            raise Overloaded(f"no synthesis slot within {self.queue_timeout_s:g} s; retry shortly",
                             retry_after=self._retry_after()) from None
        finally:
            self.waiting -= 1
            self.metrics.queued.set(self.waiting)

    async def _release(self) -> None:
        self.active -= 1
        async with self._freed:
            self._freed.notify(1)
