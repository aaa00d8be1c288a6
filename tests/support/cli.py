"""Starting the gateway's command line as a user would, for checks on what it refuses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def refused_at_start(cwd: Path, *settings: str) -> str:
    """The one line ``run_gateway.py --port 0 --set S ...`` writes before it exits non-zero
    (asserted: a failure, and one line of stderr, not a traceback)."""
    argv = [sys.executable, str(ROOT / "run_gateway.py"), "--port", "0"]
    for s in settings:
        argv += ["--set", s]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=cwd)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode != 0 and len(lines) == 1, proc.stderr
    return lines[0]
