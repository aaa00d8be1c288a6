"""Real voice-agent clients (LiveKit Agents, Pipecat), unchanged, against a real gateway.

They need their own venv (``make test-clients`` builds ``.venv-clients`` from
``requirements.txt``): where they are not installed these tests are not collected. The gateway
runs as a subprocess on the project's own venv (``GATEWAY_PYTHON``, default ``.venv``) on the
fake engine, so this venv holds only the clients. Its ``fake_gate_word`` holds the segment that
carries the word "Zebra" until the gate file exists: a test opens the gate when its client hands
it the first audio frame, so first audio before the last segment is synthesized is an event
order, not a timing threshold. Run with ``--confcutdir=tests/clients`` (the suite's own
conftest needs the gateway's dependencies).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


collect_ignore_glob = [] if all(map(_installed, ("livekit.plugins.openai", "pipecat"))) else ["test_*.py"]

ROOT = Path(__file__).resolve().parents[2]
GATE_WORD = "Zebra"
FALLBACK_OPEN_S = 20.0  # a batch gateway never sends audio while the gate is shut: open it then


def gateway_python() -> str:
    if python := os.environ.get("GATEWAY_PYTHON"):
        return python
    venv = ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


@dataclass
class Gate:
    """The file the fake engine waits for before it synthesizes the gated segment."""

    path: Path
    shut_at_first_audio: bool | None = None  # was the gate still shut when the first audio came?

    def first_audio(self) -> None:
        if self.shut_at_first_audio is None:
            self.shut_at_first_audio = not self.path.exists()
            self.path.touch()

    async def open_if_starved(self) -> None:
        """Opens the gate after a while if no audio came, so a batch reply fails the
        event-order assertion instead of hanging."""
        await asyncio.sleep(FALLBACK_OPEN_S)
        self.path.touch()


@dataclass(frozen=True)
class Gateway:
    url: str
    gate_path: Path


@pytest.fixture(scope="session")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    sys.path.insert(0, str(ROOT))
    from bench.procs import ServerProcess

    gate_path = tmp_path_factory.mktemp("gate") / "open"
    settings = [f"fake_gate_word={GATE_WORD}", f"fake_gate_path={gate_path}", "speed_warmup_text=", "cache_mb=0"]
    with ServerProcess("serve", "--engine", "fake", settings=settings, python=gateway_python()) as server:
        yield Gateway(server.url, gate_path)


@pytest.fixture
def gate(gateway: Gateway) -> Iterator[Gate]:
    gateway.gate_path.unlink(missing_ok=True)
    yield Gate(gateway.gate_path)
    gateway.gate_path.touch()  # never leave a segment waiting for the next test


def pytest_configure(config: pytest.Config) -> None:
    # the suite turns warnings into errors; the clients' deprecations are theirs to fix (the
    # gateway runs in another process, so none of its warnings is hidden by this)
    config.addinivalue_line("filterwarnings", "ignore::DeprecationWarning")
