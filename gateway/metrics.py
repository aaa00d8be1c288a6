"""Prometheus metrics, one registry per application (no module-level state).

With several worker processes (``workers``), the supervisor points ``PROMETHEUS_MULTIPROC_DIR``
at a directory it owns before it starts them: every process then keeps its values in files
there, and ``render`` (whichever worker answers) reads them all. Counters and histograms are
summed over every worker that has lived, so totals never drop when one is restarted; gauges
are summed over live workers, or kept per worker (a ``pid`` label) where a sum means nothing.
"""

from __future__ import annotations

import asyncio
import os
import resource
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

TTFB_BUCKETS = (0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def multiprocess() -> bool:
    return bool(os.environ.get(MULTIPROC_ENV))


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.multiprocess = multiprocess()
        total: Final = "livesum"  # gauge modes across workers (ignored in one process)
        each: Final = "liveall"
        self.sessions = Counter("tts_sessions", "Sessions started", ["channel"], registry=r)
        self.active = Gauge(
            "tts_sessions_active", "Sessions in progress", ["channel"], registry=r, multiprocess_mode=total
        )
        self.ttfb = Histogram(
            "tts_time_to_first_audio_seconds",
            "From the input that completed the first segment to the first audio payload",
            ["channel"],
            buckets=TTFB_BUCKETS,
            registry=r,
        )
        self.bytes = Counter(
            "tts_bytes", "Bytes by channel: encoded audio and on the wire", ["channel", "kind"], registry=r
        )
        self.errors = Counter("tts_errors", "Errors sent to clients", ["channel", "code"], registry=r)
        self.segments = Counter("tts_segments", "Segments synthesized", registry=r)
        self.skipped = Counter(
            "tts_segments_skipped",
            "Segments of a reply skipped: nothing speakable in them (no letter or digit)",
            registry=r,
        )
        self.synth_seconds = Histogram("tts_segment_synthesis_seconds", "Engine time per segment", registry=r)
        self.inflight = Gauge(
            "tts_engine_inflight", "Segments being synthesized now", registry=r, multiprocess_mode=total
        )
        self.cache = Counter(
            "tts_synthesis_cache",
            "Segments asked of the synthesis hub: hit (from the "
            "cache), join (shared a synthesis in flight), miss (a new one)",
            ["outcome"],
            registry=r,
        )
        self.cache_bytes = Gauge(
            "tts_synthesis_cache_bytes", "PCM held by the segment cache", registry=r, multiprocess_mode=total
        )
        self.rtf = Gauge(
            "tts_engine_rtf",
            "The engine rate (EngineRate): wall seconds per audio second, smoothed over recent calls",
            ["mode"],
            registry=r,
            multiprocess_mode=each,
        )
        self.engine_work = Gauge(
            "tts_engine_work",
            "The engine's own work since it started, by kind: calls "
            "(model calls: one per piece, or per chunk streaming inside a segment), "
            "memory_releases (idle memory handed back), memory_releases_after_growth (handed "
            "back after a call that grew it)",
            ["kind"],
            registry=r,
            multiprocess_mode=total,
        )
        self.agent_turns = Counter(
            "tts_agent_turns",
            "Prompt turns by agent backend and how they ended: done, "
            "cancelled, agent_error, agent_unavailable, agent_timeout",
            ["backend", "outcome"],
            registry=r,
        )
        self.agent_first_token = Histogram(
            "tts_agent_first_token_seconds",
            "From a prompt to the agent's first token",
            ["backend"],
            buckets=TTFB_BUCKETS,
            registry=r,
        )
        self.queued = Gauge("tts_engine_queued", "Sessions waiting for the engine", registry=r, multiprocess_mode=total)
        self.load = Gauge(
            "tts_engine_load",
            "Engine-seconds per second the admitted listeners need while "
            "they play (engine rate x safety, over the engine's slots); 1 = fully booked",
            registry=r,
            multiprocess_mode=each,
        )
        self.backlog = Gauge(
            "tts_engine_backlog_seconds",
            "Forecast engine work queued for the admitted listeners",
            registry=r,
            multiprocess_mode=each,
        )
        # leak detectors for the soak benchmark: both must return to their idle level
        self.tasks = Gauge(
            "tts_asyncio_tasks", "asyncio tasks alive in the gateway's loop", registry=r, multiprocess_mode=each
        )
        self.rss = Gauge(
            "tts_process_rss_bytes", "Resident memory of the gateway process", registry=r, multiprocess_mode=each
        )
        if not self.multiprocess:  # read at each scrape; across workers refresh() writes them
            self.tasks.set_function(_task_count)
            self.rss.set_function(rss_bytes)

    def refresh(self) -> None:
        """Write this process's own readings (the files of other workers are read as they are)."""
        self.tasks.set(_task_count())
        self.rss.set(rss_bytes())

    def render(self) -> bytes:
        if not self.multiprocess:
            return generate_latest(self.registry)
        self.refresh()
        merged = CollectorRegistry()
        MultiProcessCollector(merged)
        return generate_latest(merged)


def _task_count() -> float:
    try:
        return float(len(asyncio.all_tasks()))
    except RuntimeError:  # no running loop (a scrape outside the server)
        return 0.0


def rss_bytes() -> int:
    """This process's resident memory (0 where ``/proc`` has no ``statm``): the gauge, and the
    embedded engine's hand-back after a call that grew it."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * resource.getpagesize()
    except (OSError, IndexError, ValueError):
        return 0
