"""Start a gateway or container as a child process and wait until it serves.

Benchmarks and tests run servers in subprocesses so their load does not share an event loop
with the clients. ``ServerProcess`` (synchronous, for tests) waits for the "listening on" line
and drains the child's output with a thread for its whole life: a pipe that nobody reads fills
up, and the child then blocks on its next log line (the access log under load) and stops
serving. ``GatewayProcess`` (asynchronous, for benchmarks) logs to a temporary file, waits for
the readiness route and reads the child's CPU from /proc.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path

import aiohttp

from .servers import LOOPBACK, free_port

ROOT = Path(__file__).resolve().parent.parent
# the gateway's own entry point on uvloop's event loop, to measure what the loop costs
UVLOOP_MAIN = "import sys, uvloop; uvloop.install(); from gateway.ops.cli import main; sys.exit(main(sys.argv[1:]))"


class ServerProcess:
    """``python run_gateway.py <command> ... --port P``, drained; ``url`` once it listens."""

    def __init__(
        self,
        command: str,
        *args: str,
        settings: list[str] | None = None,
        python: str = sys.executable,
        timeout: float = 120.0,
    ) -> None:
        self.port = free_port()
        argv = [python, "run_gateway.py", command, *args, "--port", str(self.port)]
        for item in settings or []:
            argv += ["--set", item]
        self.proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.tail: deque[str] = deque(maxlen=200)  # the child's last lines, for error messages
        self._ready = threading.Event()
        threading.Thread(target=self._drain, daemon=True).start()
        if not self._ready.wait(timeout) or self.proc.poll() is not None:
            self.stop()
            raise RuntimeError(f"{command} did not start:\n" + "\n".join(self.tail))
        self.url = f"http://127.0.0.1:{self.port}"

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            self.tail.append(line)
            if "listening on" in line:
                self._ready.set()
        self._ready.set()  # exited: let the waiter see it

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()
        return self.proc.returncode

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _proc(name: str) -> str:
    try:
        return Path(f"/proc/{name}").read_text()
    except (FileNotFoundError, ProcessLookupError):  # a worker that has just exited
        return ""


class GatewayProcess:
    """``run_gateway.py serve`` (or ``container``) in a subprocess on a free loopback port.

    Its log goes to a temporary file (a full pipe would stall it); the tail is quoted when it
    fails to become ready.
    """

    def __init__(
        self,
        engine: str,
        settings: dict[str, str] | None = None,
        *,
        command: str = "serve",
        uvloop: bool = False,
        ready_timeout_s: float = 120.0,
    ) -> None:
        self.engine, self.settings, self.command = engine, dict(settings or {}), command
        self.uvloop = uvloop
        self.ready_timeout_s = ready_timeout_s
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        fd, name = tempfile.mkstemp(prefix=f"{command}-", suffix=".log")
        os.close(fd)
        self.log_path = Path(name)

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def ws_url(self) -> str:
        path = "/invocations-bidirectional-stream" if self.command == "container" else "/v1/stream/ws"
        return f"ws://{LOOPBACK}:{self.port}{path}"

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError("the gateway process has not been started")
        return self.proc.pid

    def pids(self) -> list[int]:
        """The gateway's processes: itself and, with ``workers``, the workers it supervises."""
        children = Path(f"/proc/{self.pid}/task/{self.pid}/children")
        return [self.pid, *(int(x) for x in children.read_text().split())] if children.exists() else [self.pid]

    def runqueue_seconds(self) -> float:
        """Seconds the event-loop threads have waited for a CPU while runnable (schedstat): how
        much the scheduler, not the gateway, held them back (summed over the workers)."""
        stats = (_proc(f"{pid}/task/{pid}/schedstat") for pid in self.pids())
        return sum(int(text.split()[1]) / 1e9 for text in stats if text)

    def cpu_seconds(self) -> float:
        """User + system CPU the process (and its workers) used so far (from /proc, so no psutil
        needed). A worker that exits between two readings takes its CPU with it."""
        ticks = 0
        for text in filter(None, (_proc(f"{pid}/stat") for pid in self.pids())):
            fields = text.rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])
        return ticks / os.sysconf("SC_CLK_TCK")

    async def __aenter__(self) -> GatewayProcess:
        entry = ["-c", UVLOOP_MAIN] if self.uvloop else [str(ROOT / "run_gateway.py")]
        args = [
            sys.executable,
            *entry,
            self.command,
            "--engine",
            self.engine,
            "--host",
            LOOPBACK,
            "--port",
            str(self.port),
        ]
        for name, value in self.settings.items():
            args += ["--set", f"{name}={value}"]
        with self.log_path.open("wb") as out:
            self.proc = subprocess.Popen(args, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        try:
            await self._wait_ready()
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def _wait_ready(self) -> None:
        path = "/ping" if self.command == "container" else "/readyz"
        deadline = time.monotonic() + self.ready_timeout_s
        async with aiohttp.ClientSession() as http:
            while time.monotonic() < deadline:
                if self.proc is not None and self.proc.poll() is not None:
                    raise RuntimeError(f"{self.command} exited ({self.proc.returncode}):\n{self.log_tail()}")
                try:
                    async with http.get(self.url + path) as resp:
                        if resp.status == 200:
                            return
                        error = (await resp.json(content_type=None)).get("error") if path == "/readyz" else None
                        if error:  # the engine failed to load: it never will (a GPU call must not wait it out)
                            raise RuntimeError(f"{self.command}: the engine failed to load: {error}\n{self.log_tail()}")
                except aiohttp.ClientConnectionError:
                    pass
                await asyncio.sleep(0.1)
        raise TimeoutError(f"{self.command} not ready in {self.ready_timeout_s:g} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    async def __aexit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: the gateway drains and exits
            try:
                await asyncio.to_thread(self.proc.wait, 20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                await asyncio.to_thread(self.proc.wait)
        self.log_path.unlink(missing_ok=True)


def browser_cpu_seconds(word: str = "chrom") -> float:
    """User + system CPU used so far by this process's descendants whose command line holds
    ``word`` (the browser Playwright started: its driver's children), from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (text := _proc(f"{entry.name}/stat")):
            parents[int(entry.name)] = int(text.rsplit(")", 1)[1].split()[1])
    mine, grew = {os.getpid()}, True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in mine} - mine
        grew, mine = bool(more), mine | more
    ticks = 0
    for pid in mine:
        if word in _proc(f"{pid}/cmdline") and (text := _proc(f"{pid}/stat")):
            fields = text.rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


async def browser_quiet(limit_s: float = 3.0, window_s: float = 0.25, most_s: float = 0.02) -> float:
    """Wait until the browser (``browser_cpu_seconds``) used at most ``most_s`` of CPU in the last
    ``window_s`` (its page loaded, drawn and rastered), or ``limit_s``; the seconds waited. After
    the page's scripts said it was ready, headless Chromium still spent 0.3-0.6 s of CPU over the
    next 0.5 s (the renderer off its main thread: the first frame's raster), on the cores the
    engine makes the first sentence on; nobody presses a button before it is drawn."""
    t0 = time.perf_counter()
    before = browser_cpu_seconds()
    while (waited := time.perf_counter() - t0) < limit_s:
        await asyncio.sleep(window_s)
        now = browser_cpu_seconds()
        if now - before <= most_s:
            return waited + window_s
        before = now
    return waited
