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

A take (a check, then the count) holds a lock shared by the workers for a few microseconds: an
exclusive ``flock`` on a file the supervisor makes, which each process opens for itself (its
name carries the supervisor's pid: one killed by SIGKILL leaves it, and the next removes it). The
event loop never waits on it: a take tries it without blocking and, while another process holds
it, tries again after ``asyncio.sleep`` (``Admission`` bounds that wait by the queue timeout).
The kernel frees a ``flock`` when its holder dies, so a worker killed while it held the lock
leaves nothing taken; one stopped while it holds it (SIGSTOP, a debugger) holds up only the
takes, on every worker, until it goes on or dies: the sessions already open are served as ever.

A release and a read take no lock: each cell has one writer (its worker; a dead worker's, the
supervisor, before the replacement starts), an aligned 8-byte cell is read and written whole,
and a take that sees a count a moment before its release only refuses what it would have a
moment earlier. So a dead worker takes nothing with it: the supervisor zeroes its column
(``clear_worker``) before the replacement starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import glob
import hashlib
import logging
import multiprocessing
import os
import tempfile
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any, Protocol

log = logging.getLogger(__name__)

CLIENT_SLOTS = 4096
PROBES = 64
RETRY_S = (0.001, 0.05)  # a busy lock is tried again after the first, doubling up to the second


class Slots(Protocol):
    def active(self) -> int:
        """Sessions holding an active slot, over every process that shares these counts."""
        ...

    async def take_active(self, limit: int) -> bool: ...

    def release_active(self) -> None: ...

    async def take_client(self, client: str, limit: int) -> bool: ...

    def release_client(self, client: str) -> None: ...


class LocalSlots:
    """One process's counts: a single gateway, the model container, tests."""

    def __init__(self) -> None:
        self._active = 0
        self._clients: Counter[str] = Counter()

    def active(self) -> int:
        return self._active

    async def take_active(self, limit: int) -> bool:
        if self._active >= limit:
            return False
        self._active += 1
        return True

    def release_active(self) -> None:
        self._active -= 1

    async def take_client(self, client: str, limit: int) -> bool:
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


LOCK_PREFIX = "gateway-limits-"  # + the supervisor's pid: its lock file, in the temp folder


def sweep_stale_locks(folder: str | None = None) -> list[str]:
    """Remove the lock files of supervisors that are gone (one killed by SIGKILL cannot remove
    its own: each left a file in the temp folder); returns their paths."""
    folder = folder or tempfile.gettempdir()
    gone = []
    for path in glob.glob(os.path.join(glob.escape(folder), f"{LOCK_PREFIX}*-*.lock")):
        pid = os.path.basename(path)[len(LOCK_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
                gone.append(path)
    return gone


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


class SharedLimits:
    """The table in shared memory; made by the supervisor, handed to each worker at its start
    (``spawn`` pickles the arrays into the child as shared, not as copies, and the lock file's
    path, which each process opens for itself). ``close`` removes the lock file."""

    def __init__(self, workers: int, clients: int = CLIENT_SLOTS) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.workers, self.clients = workers, clients
        sweep_stale_locks()
        fd, self.lock_path = tempfile.mkstemp(prefix=f"{LOCK_PREFIX}{os.getpid()}-", suffix=".lock")
        os.close(fd)
        self._fd: int | None = None  # this process's own open file: a flock is per open file,
        self._fd_pid = 0  # so a forked child, which shares its parent's, opens its own
        self.active_by_worker: Any = ctx.RawArray("q", workers)
        self.keys: Any = ctx.RawArray("q", clients)  # 0: a row never used
        self.counts: Any = ctx.RawArray("q", clients * workers)  # row r, worker w: [r * workers + w]

    def for_worker(self, worker: int) -> WorkerSlots:
        if not 0 <= worker < self.workers:
            raise ValueError(f"worker slot {worker} outside 0..{self.workers - 1}")
        return WorkerSlots(self, worker)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_fd": None, "_fd_pid": 0}  # the child opens the file for itself

    def close(self) -> None:
        """Close this process's lock file, and remove it (the supervisor, at exit)."""
        if self._fd is not None and self._fd_pid == os.getpid():
            os.close(self._fd)
        self._fd = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.lock_path)

    def try_lock(self) -> bool:
        """Take the workers' lock if it is free, never waiting."""
        if self._fd is None or self._fd_pid != os.getpid():
            self._fd, self._fd_pid = os.open(self.lock_path, os.O_RDWR | os.O_CLOEXEC), os.getpid()
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def unlock(self) -> None:
        if self._fd is not None and self._fd_pid == os.getpid():
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    @contextlib.asynccontextmanager
    async def locked(self) -> AsyncIterator[None]:
        """Hold the workers' lock; while another process holds it, the loop goes on and the
        lock is tried again a little later (a holder that dies frees it: the kernel's doing)."""
        pause = RETRY_S[0]
        while not self.try_lock():
            await asyncio.sleep(pause)
            pause = min(RETRY_S[1], pause * 2)
        try:
            yield  # the body never awaits: the lock is held for microseconds
        finally:
            self.unlock()

    def clear_worker(self, worker: int) -> None:
        """Forget a dead worker's sessions (its column), before its slot is started again. No
        lock: the column's writer is dead, and a take that sees it half cleared only admits a
        session a moment sooner."""
        self.active_by_worker[worker] = 0
        for row in range(self.clients):
            self.counts[row * self.workers + worker] = 0

    def total_active(self) -> int:
        return int(sum(self.active_by_worker))

    def row_total(self, row: int) -> int:
        return int(sum(self.counts[row * self.workers : (row + 1) * self.workers]))

    def row_of(self, key: int, *, insert: bool) -> int | None:
        """``key``'s row among the first ``PROBES`` from its hash; with ``insert``, the first
        free one there when it has none (None: all busy); call that holding the lock."""
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
        return self.table.total_active()  # a snapshot; a count or two may be a moment old

    async def take_active(self, limit: int) -> bool:
        t = self.table
        async with t.locked():
            if t.total_active() >= limit:
                return False
            t.active_by_worker[self.worker] += 1
            return True

    def release_active(self) -> None:
        t = self.table  # no lock: this worker is its cell's one writer
        t.active_by_worker[self.worker] = max(0, t.active_by_worker[self.worker] - 1)

    async def take_client(self, client: str, limit: int) -> bool:
        t = self.table
        async with t.locked():
            row = t.row_of(client_key(client), insert=True)
            if row is None:
                log.warning("no room to count client %s's sessions across workers: not limited", client[:80])
                return True
            if t.row_total(row) >= limit:
                return False
            t.counts[row * t.workers + self.worker] += 1
            return True

    def release_client(self, client: str) -> None:
        """No lock: this worker is its cells' one writer, and the client's row, which counts a
        session of this worker's, is no other client's until it is released."""
        t = self.table
        row = t.row_of(client_key(client), insert=False)
        cell = None if row is None else row * t.workers + self.worker
        if cell is not None and t.counts[cell] > 0:
            t.counts[cell] -= 1
