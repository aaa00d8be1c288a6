"""The counts admission limits are checked against: one process's, or all workers' of a port.

``Admission`` (``admission.py``) asks ``take_active`` / ``take_client`` before a session starts
and gives the slot back when it ends. One gateway process keeps the counts in memory
(``LocalSlots``). With ``workers > 1`` every worker is a whole gateway on the same port and the
same cores, so per-process counts would admit N times ``max_active_sessions`` and N times
``max_sessions_per_client`` (a client's connections are spread over the workers by the kernel).
There the supervisor makes one ``SharedLimits`` table in shared memory before it starts the
workers, and each worker counts in it (``WorkerSlots``):

* ``active``: one cell per worker; a session is admitted while the sum is under the limit.
* clients: an open-addressing table of ``CLIENT_SLOTS`` rows, keyed by a 64-bit hash of the
  client's address, with one count per worker in each row; a client is admitted while its
  row's sum is under the limit. A row whose counts are all zero is free for another client;
  a client is looked for (and put) in the first ``PROBES`` rows from its hash only, so a
  lookup never scans the table. Should all of them be busy, that client goes unlimited (and a
  warning says so) rather than refused for others' sake.

Every check and update holds one cross-process lock for a few microseconds. Each worker writes
only its own column, so a worker that dies takes nothing with it: the supervisor zeroes its
column (``clear_worker``) before the replacement starts. A worker killed while it held the lock
would leave it taken; whoever then waits ``LOCK_TIMEOUT_S`` for it goes on and frees it.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import multiprocessing
from collections import Counter
from collections.abc import Iterator
from typing import Any, Protocol

log = logging.getLogger(__name__)

CLIENT_SLOTS = 4096
PROBES = 64
LOCK_TIMEOUT_S = 1.0


class Slots(Protocol):
    def active(self) -> int:
        """Sessions holding an active slot, over every process that shares these counts."""
        ...

    def take_active(self, limit: int) -> bool: ...

    def release_active(self) -> None: ...

    def take_client(self, client: str, limit: int) -> bool: ...

    def release_client(self, client: str) -> None: ...


class LocalSlots:
    """One process's counts: a single gateway, the model container, tests."""

    def __init__(self) -> None:
        self._active = 0
        self._clients: Counter[str] = Counter()

    def active(self) -> int:
        return self._active

    def take_active(self, limit: int) -> bool:
        if self._active >= limit:
            return False
        self._active += 1
        return True

    def release_active(self) -> None:
        self._active -= 1

    def take_client(self, client: str, limit: int) -> bool:
        if self._clients[client] >= limit:
            return False
        self._clients[client] += 1
        return True

    def release_client(self, client: str) -> None:
        self._clients[client] -= 1
        if self._clients[client] <= 0:
            del self._clients[client]


def client_key(client: str) -> int:
    """A 64-bit key for ``client``'s row; never 0 (a row never used)."""
    key = int.from_bytes(
        hashlib.blake2b(client.encode("utf-8", "replace"), digest_size=8).digest(), "little", signed=True
    )
    return key or 1


class SharedLimits:
    """The table in shared memory; made by the supervisor, handed to each worker at its start
    (``spawn`` pickles the lock and arrays into the child as shared, not as copies)."""

    def __init__(self, workers: int, clients: int = CLIENT_SLOTS) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.workers, self.clients = workers, clients
        self.lock: Any = ctx.Lock()
        self.active_by_worker: Any = ctx.RawArray("q", workers)
        self.keys: Any = ctx.RawArray("q", clients)  # 0: a row never used
        self.counts: Any = ctx.RawArray("q", clients * workers)  # row r, worker w: [r * workers + w]

    def for_worker(self, worker: int) -> WorkerSlots:
        if not 0 <= worker < self.workers:
            raise ValueError(f"worker slot {worker} outside 0..{self.workers - 1}")
        return WorkerSlots(self, worker)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        if not self.lock.acquire(timeout=LOCK_TIMEOUT_S):
            # only a holder that died holds it this long: go on, and the release below frees it
            log.error("the workers' shared session counts were locked %g s: taking the lock over", LOCK_TIMEOUT_S)
        try:
            yield
        finally:
            with contextlib.suppress(ValueError):  # released by a taker-over already
                self.lock.release()

    def clear_worker(self, worker: int) -> None:
        """Forget a dead worker's sessions (its column), before its slot is started again."""
        with self.locked():
            self.active_by_worker[worker] = 0
            for row in range(self.clients):
                self.counts[row * self.workers + worker] = 0

    def total_active(self) -> int:
        return int(sum(self.active_by_worker))

    def row_total(self, row: int) -> int:
        return int(sum(self.counts[row * self.workers : (row + 1) * self.workers]))

    def row_of(self, key: int, *, insert: bool) -> int | None:
        """``key``'s row among the first ``PROBES`` from its hash; with ``insert``, the first
        free one there when it has none (None: all busy). Call it holding the lock."""
        free: int | None = None
        start = key % self.clients
        for i in range(min(PROBES, self.clients)):
            row = (start + i) % self.clients
            found = self.keys[row]
            if found == key:
                return row
            if free is None and (found == 0 or not self.row_total(row)):
                free = row
            if found == 0:  # rows are taken in probe order: the key is not further on
                break
        if not insert or free is None:
            return None
        self.keys[free] = key
        return free


class WorkerSlots:
    """One worker's view of the shared table: it counts in its own column."""

    def __init__(self, table: SharedLimits, worker: int) -> None:
        self.table, self.worker = table, worker

    def active(self) -> int:
        with self.table.locked():
            return self.table.total_active()

    def take_active(self, limit: int) -> bool:
        t = self.table
        with t.locked():
            if t.total_active() >= limit:
                return False
            t.active_by_worker[self.worker] += 1
            return True

    def release_active(self) -> None:
        t = self.table
        with t.locked():
            t.active_by_worker[self.worker] = max(0, t.active_by_worker[self.worker] - 1)

    def take_client(self, client: str, limit: int) -> bool:
        t = self.table
        with t.locked():
            row = t.row_of(client_key(client), insert=True)
            if row is None:
                log.warning("no room to count client %s's sessions across workers: not limited", client[:80])
                return True
            if t.row_total(row) >= limit:
                return False
            t.counts[row * t.workers + self.worker] += 1
            return True

    def release_client(self, client: str) -> None:
        t = self.table
        with t.locked():
            row = t.row_of(client_key(client), insert=False)
            cell = None if row is None else row * t.workers + self.worker
            if cell is not None and t.counts[cell] > 0:
                t.counts[cell] -= 1
