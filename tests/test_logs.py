"""``log_level``: the root level, then other loggers' own (``INFO,gateway.core=DEBUG``), and the
engine's calls and ``preroll_ms`` traced at DEBUG (what a player was told, and why)."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gateway.core.engine_rate import EngineRate
from gateway.ops.logs import apply, levels

ROOT = Path(__file__).resolve().parent.parent


def test_levels_root_then_named_loggers() -> None:
    assert levels("INFO") == (logging.INFO, {})
    assert levels("warning, gateway.core=debug,aiohttp=ERROR") == (
        logging.WARNING,
        {"gateway.core": logging.DEBUG, "aiohttp": logging.ERROR},
    )
    for bad in ("LOUD", "gateway.core=DEBUG", "INFO,gateway.core", "INFO,=DEBUG", "INFO,x=LOUD", ""):
        with pytest.raises(ValueError, match="log_level"):
            levels(bad)


def test_apply_sets_only_the_named_loggers() -> None:
    root, traced = logging.getLogger(), logging.getLogger("gateway.core.engine_rate")
    before = root.level, traced.level
    try:
        apply("WARNING,gateway.core.engine_rate=DEBUG")
        assert root.level == logging.WARNING
        assert traced.isEnabledFor(logging.DEBUG)
        assert not logging.getLogger("gateway.web").isEnabledFor(logging.INFO)
    finally:  # the root's level and the trace would reach every later test in this process
        root.setLevel(before[0])
        traced.setLevel(before[1])


def test_calls_and_prerolls_are_traced_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    rate = EngineRate(exact_below_s=2.0)
    with caplog.at_level(logging.DEBUG, logger="gateway.core.engine_rate"):
        for audio in (3.5, 1.2, 2.4):
            rate.observe("exact", audio, 0.1 + 0.6 * audio, 0.1 + 0.6 * audio)
        rate.observe("exact", 3.0, 2 * (0.1 + 0.6 * 3.0), 3.8)
        ms = rate.preroll_ms(1.15, 1.0, ["One sentence to come.", "And another one after it."], 0.0, ["exact"] * 2)
        rate.learn("exact", 1.3, 1.15)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("call exact: 3.50 s of audio in 2.20 s") and lines[0].endswith(
        "(not counted); noise 0.00, peak 0.00"
    )
    assert "2.00x its forecast; noise" in lines[3] and "peak 1.00" in lines[3]
    assert lines[4].startswith(f"preroll {ms} ms: 0.00 s held, stretch 2.00 (exact), peak 1.00; forecast")
    assert re.search(r"compute s\): [\d.]+/[\d.]+ exact, [\d.]+/[\d.]+ exact$", lines[4])  # each segment, its mode
    assert lines[5] == "reply learned (exact): its arrivals needed a stretch of 1.30"


def test_a_bad_log_level_is_refused_with_its_name() -> None:
    out = subprocess.run(
        [sys.executable, "run_gateway.py", "serve", "--engine", "fake", "--set", "log_level=INFO,gateway.core"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode != 0 and "bad settings: log_level" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="Linux: /proc/stat")
def test_cpu_share_counts_other_processes_not_this_one() -> None:
    """A child process busy for the call's time is about one core of others'; this process busy
    is none of it (whatever else runs beside the test counts in both, so the difference)."""
    from gateway.core.cpu import CpuShare

    burn = "import time\nt = time.perf_counter()\nwhile time.perf_counter() - t < 0.6: pass"
    share = CpuShare()
    subprocess.run([sys.executable, "-c", burn], check=True, timeout=30)
    child = share.others()
    share = CpuShare()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.6:
        pass
    own = share.others()
    assert child is not None and own is not None
    assert child - own > 0.5, (child, own)


def test_a_traced_call_says_what_other_processes_used(caplog: pytest.LogCaptureFixture) -> None:
    rate = EngineRate()
    with caplog.at_level(logging.DEBUG, logger="gateway.core.engine_rate"):
        assert rate.tracing()
        rate.observe("exact", 2.0, 1.2, 1.2, others=0.93)
        rate.observe("exact", 2.0, 1.2, 1.2)
    first, second = (r.getMessage() for r in caplog.records)
    assert first.endswith("; other processes 0.93 cores") and "other processes" not in second
