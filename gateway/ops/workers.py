"""Several processes serving one port (``workers``): a supervisor and its workers.

Each worker is a whole gateway (its own event loop, engine, cache and admission control) that
binds the port with ``SO_REUSEPORT``; the kernel spreads new connections over the listening
sockets by a hash of their addresses, evenly and without a shared accept queue (one shared
socket, as with fork-and-accept, lets the busiest loop take most connections). A connection
stays with the worker that accepted it, so a WebSocket session lives in one process.

The supervisor (this process) owns no socket: it starts the workers (``spawn``: nothing of its
own state is copied), logs one "listening on" line once all are ready, restarts a worker that
dies (logged, with a back-off when one dies young), and on SIGTERM or SIGINT sends SIGTERM to
every worker, each of which drains as a single process does, then waits for them. It also owns
the directory where the workers keep their Prometheus values (``metrics.py``), created at start
and removed at exit, and the table of session counts in shared memory (``web/limits.py``) that
makes ``max_active_sessions`` and ``max_sessions_per_client`` hold for the port, not per worker:
each worker counts in its own column (its slot), which is zeroed when the slot's worker dies.
A worker whose supervisor has gone (killed) sees its pipe close and drains.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

from aiohttp import web

from ..config import Settings
from ..metrics import MULTIPROC_ENV
from ..web.limits import SharedLimits
from .logs import apply as apply_log_level

log = logging.getLogger(__name__)

PROXY_ENGINES = frozenset({"container", "sagemaker"})  # the model runs elsewhere: CPU is I/O
WORKER_HEADER = "X-Gateway-Worker"  # each response names the worker (pid) that served it
WORKER_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s"
GAUGE_REFRESH_S = 2.0
YOUNG_S = 10.0  # a worker that dies younger than this is restarted after a growing pause
MAX_BACKOFF_S = 30.0


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def worker_count(settings: Settings) -> int:
    """``workers``: ``auto`` (1 where the model runs in the process, one per core for the proxy
    engines), ``0`` (one per core) or a count; ``ValueError`` otherwise."""
    raw = settings.workers.strip().lower()
    if raw == "auto":
        return cores() if settings.engine in PROXY_ENGINES else 1
    if not raw.isdigit():
        raise ValueError(f"workers must be auto, 0 (one per core) or a count, got {settings.workers!r}")
    return int(raw) or cores()


@dataclass(slots=True)
class _Worker:
    process: Any  # multiprocessing's SpawnProcess
    pipe: Connection  # the worker sends its state once ready; closed when either side goes
    started: float = field(default_factory=time.monotonic)
    ready: bool = False
    state: str = "starting"  # its word on its engine once ready


class Supervisor:
    def __init__(self, settings: Settings, count: int) -> None:
        self.settings, self.count = settings, count
        self.ctx = multiprocessing.get_context("spawn")  # never fork a loaded process
        self.limits = SharedLimits(count)  # before any worker starts: each gets it at its start
        self.workers: dict[int, _Worker] = {}
        self.due: dict[int, float] = {}  # slot -> when its replacement starts
        self.backoff: dict[int, float] = {}
        self.stopping = False

    def run(self) -> int:
        metrics_dir = tempfile.mkdtemp(prefix="gateway-metrics-")
        os.environ[MULTIPROC_ENV] = metrics_dir  # the workers inherit it
        wake_r, wake_w = socket.socketpair()
        wake_w.setblocking(False)
        previous = signal.set_wakeup_fd(wake_w.fileno())
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)
        try:
            for slot in range(self.count):
                self._start(slot)
            return self._supervise(wake_r)
        finally:
            self._stop_all()
            signal.set_wakeup_fd(previous)
            wake_r.close()
            wake_w.close()
            os.environ.pop(MULTIPROC_ENV, None)
            shutil.rmtree(metrics_dir, ignore_errors=True)
            self.limits.close()  # its lock file
            log.info("stopped")

    def _on_signal(self, signum: int, frame: object) -> None:
        self.stopping = True

    def _start(self, slot: int) -> None:
        parent_end, child_end = self.ctx.Pipe()
        self.limits.clear_worker(slot)  # a dead predecessor's sessions are gone with it
        process = self.ctx.Process(
            target=worker_main,
            args=(self.settings, child_end, self.limits, slot),
            name=f"gateway-worker-{slot}",
            daemon=False,
        )
        process.start()
        child_end.close()
        self.workers[slot] = _Worker(process, parent_end)

    def _supervise(self, wake: socket.socket) -> int:
        announced = False
        while not self.stopping:
            waiting = [
                wake,
                *(w.process.sentinel for w in self.workers.values()),
                *(w.pipe for w in self.workers.values() if not w.ready and not w.pipe.closed),
            ]
            timeout = max(0.0, min(self.due.values()) - time.monotonic()) if self.due else None
            fired = set(wait(waiting, timeout))
            if wake in fired:
                wake.recv(512)
            for slot, worker in list(self.workers.items()):
                if worker.pipe in fired and not worker.ready:
                    self._on_ready(worker, announced)
                if worker.process.sentinel in fired:
                    if not announced:
                        log.error(
                            "worker %d exited (code %s) before the gateway was ready: stopping",
                            worker.process.pid,
                            worker.process.exitcode,
                        )
                        return 1
                    self._on_exit(slot, worker)
            if not announced and len(self.workers) == self.count and all(w.ready for w in self.workers.values()):
                announced = True
                pids = ", ".join(str(w.process.pid) for w in self.workers.values())
                states = "; ".join(sorted({w.state for w in self.workers.values()}))
                log.info(
                    "gateway listening on http://%s:%d (%d workers: %s; %s)",
                    self.settings.host,
                    self.settings.port,
                    self.count,
                    pids,
                    states,
                )
            for slot, when in list(self.due.items()):
                if when <= time.monotonic() and not self.stopping:
                    del self.due[slot]
                    self._start(slot)
        return 0

    def _on_ready(self, worker: _Worker, announced: bool) -> None:
        try:
            worker.state = str(worker.pipe.recv())
        except EOFError:
            worker.pipe.close()  # it died before it was ready; its sentinel says so
            return
        worker.ready = True
        if announced:
            log.info("worker %d ready (%s)", worker.process.pid, worker.state)

    def _on_exit(self, slot: int, worker: _Worker) -> None:
        from prometheus_client import multiprocess

        worker.process.join()
        worker.pipe.close()
        del self.workers[slot]
        multiprocess.mark_process_dead(worker.process.pid)  # its live gauges leave the sums
        lived = time.monotonic() - worker.started
        pause = (
            0.0 if lived >= YOUNG_S and worker.ready else min(MAX_BACKOFF_S, max(0.5, 2 * self.backoff.get(slot, 0.0)))
        )
        self.backoff[slot] = pause
        log.warning(
            "worker %d exited (code %s) after %.1f s; restarting it%s",
            worker.process.pid,
            worker.process.exitcode,
            lived,
            f" in {pause:.1f} s" if pause else "",
        )
        self.due[slot] = time.monotonic() + pause

    def _stop_all(self) -> None:
        live = [w for w in self.workers.values() if w.process.is_alive()]
        if live:
            log.info(
                "shutting down %d workers: no new sessions; %.0f s for those in flight",
                len(live),
                self.settings.shutdown_grace_s,
            )
        for worker in live:
            worker.process.terminate()  # SIGTERM: the worker drains
        deadline = time.monotonic() + self.settings.shutdown_grace_s + 20.0
        for worker in live:
            worker.process.join(max(0.0, deadline - time.monotonic()))
            if worker.process.is_alive():
                log.warning("worker %d did not stop in time: killed", worker.process.pid)
                worker.process.kill()
                worker.process.join()
        for worker in self.workers.values():
            worker.pipe.close()
        self.workers.clear()


def supervise(settings: Settings, count: int) -> int:
    return Supervisor(settings, count).run()


# -- in each worker ------------------------------------------------------------------------
def worker_main(settings: Settings, pipe: Connection, limits: SharedLimits | None = None, slot: int = 0) -> None:
    """A worker process: the gateway on a ``SO_REUSEPORT`` socket, reporting to ``pipe``, its
    sessions counted in column ``slot`` of the port's ``limits``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the supervisor, which sends SIGTERM
    logging.basicConfig(format=WORKER_LOG_FORMAT)
    apply_log_level(settings.log_level)
    from ..web.app import make_app
    from .server import run_loop, serve

    try:
        app = make_app(settings, slots=limits.for_worker(slot) if limits is not None else None)
    except (ValueError, ImportError) as exc:  # e.g. agent_backend=openai without agent_url
        log.error("bad settings: %s", exc)
        raise SystemExit(2) from None
    app.on_response_prepare.append(_name_worker)
    app.cleanup_ctx.append(_refresh_gauges)

    def ready(state: str, stop: asyncio.Event) -> None:
        pipe.send(state)
        loop = asyncio.get_running_loop()

        def supervisor_gone() -> None:  # the pipe reads EOF: nobody would restart or stop us
            loop.remove_reader(pipe.fileno())
            log.warning("the supervisor has gone: stopping")
            stop.set()

        loop.add_reader(pipe.fileno(), supervisor_gone)

    run_loop(serve(settings, app, what=f"worker {os.getpid()}", worker_ready=ready))


async def _name_worker(request: web.Request, response: web.StreamResponse) -> None:
    response.headers[WORKER_HEADER] = str(os.getpid())


async def _refresh_gauges(app: web.Application) -> AsyncIterator[None]:
    """Per-worker gauges (tasks, memory) are written to the shared files now and then, so a
    scrape answered by one worker reads the others' recent values."""
    from ..web.state import GATEWAY

    metrics = app[GATEWAY].metrics

    async def refresh() -> None:
        while True:
            metrics.refresh()
            await asyncio.sleep(GAUGE_REFRESH_S)

    task = asyncio.create_task(refresh())
    yield
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
