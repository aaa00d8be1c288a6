"""Start a gateway or container as a child process and wait for its "listening on" line.

Benchmarks and tests run servers in subprocesses so their load does not share an event loop
with the clients. The child's output is drained by a thread for its whole life: a pipe that
nobody reads fills up, and the child then blocks on its next log line (the access log under
load) and stops serving.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """``python run_gateway.py <command> ... --port P``, drained; ``url`` once it listens."""

    def __init__(self, command: str, *args: str, settings: list[str] | None = None,
                 python: str = sys.executable, timeout: float = 120.0) -> None:
        self.port = free_port()
        argv = [python, "run_gateway.py", command, *args, "--port", str(self.port)]
        for item in settings or []:
            argv += ["--set", item]
        self.proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
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

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
