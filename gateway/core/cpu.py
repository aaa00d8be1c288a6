"""Other processes' CPU while an engine call runs (the DEBUG trace of ``EngineRate.observe``).

A call over its forecast is either a slower machine (a core busy for the whole reply: the
calls after it run over too) or a moment of someone else's work (the first press in Chromium on
the same cores: its first call 1.2-1.6x, the calls after it on time). The call's time alone
cannot tell them apart; the cores other processes used while it ran may: about one core for a
busy one. Linux only (``/proc/stat``); elsewhere None.
"""

from __future__ import annotations

import os
import resource
import time


def _busy_s() -> float | None:
    """CPU seconds the whole machine spent busy since boot (steal counts: someone else's)."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            ticks = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    if len(ticks) < 8:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = ticks
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _own_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of this process
    return usage.ru_utime + usage.ru_stime


class CpuShare:
    """Started with a call; ``others()``: the cores other processes kept busy since, on average."""

    def __init__(self) -> None:
        self.t0, self.busy0, self.own0 = time.perf_counter(), _busy_s(), _own_s()

    def others(self) -> float | None:
        wall, busy = time.perf_counter() - self.t0, _busy_s()
        if busy is None or self.busy0 is None or wall <= 0:
            return None
        return max(0.0, (busy - self.busy0) - (_own_s() - self.own0)) / wall
