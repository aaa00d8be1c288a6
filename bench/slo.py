"""The load test's verdicts: per-session and per-level figures, the service level, the knee
(the highest concurrency that meets it) and the auto-scaling targets derived from it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, slots=True)
class SessionStat:
    ok: bool
    ttfa_ms: float | None = None
    audio_s: float = 0.0
    wall_s: float = 0.0  # from before connecting to the last audio payload
    stalls: int = 0
    stall_s: float = 0.0
    error: str = ""

    @property
    def rtf(self) -> float | None:
        return self.wall_s / self.audio_s if self.audio_s else None


@dataclass(frozen=True, slots=True)
class LevelResult:
    concurrency: int
    sessions: int
    errors: int = 0
    error_codes: dict[str, int] = field(default_factory=dict)
    ttfa_p50_ms: float | None = None
    ttfa_p90_ms: float | None = None
    ttfa_p99_ms: float | None = None
    rtf_p50: float | None = None
    rtf_p90: float | None = None
    stalled_sessions: int = 0
    stalls: int = 0
    rps: float = 0.0  # completed sessions per second
    elapsed_s: float = 0.0

    @property
    def error_rate(self) -> float:
        return self.errors / self.sessions if self.sessions else 1.0

    @property
    def stall_rate(self) -> float:
        ok = self.sessions - self.errors
        return self.stalled_sessions / ok if ok else 0.0


@dataclass(frozen=True, slots=True)
class ServiceLevel:
    ttfa_p90_ms: float = 1000.0
    max_stall_rate: float = 0.0  # share of sessions with at least one stall
    max_error_rate: float = 0.0

    def failures(self, r: LevelResult) -> list[str]:
        """Why ``r`` misses the service level (empty: it meets it)."""
        out = []
        if r.sessions == 0 or r.ttfa_p90_ms is None:
            out.append("no session completed")
        elif r.ttfa_p90_ms > self.ttfa_p90_ms:
            out.append(f"p90 TTFA {r.ttfa_p90_ms:.0f} ms > {self.ttfa_p90_ms:.0f} ms")
        if r.stall_rate > self.max_stall_rate:
            out.append(f"stalls in {r.stall_rate:.0%} of sessions")
        if r.error_rate > self.max_error_rate:
            out.append(f"errors in {r.error_rate:.0%} of sessions")
        return out


@dataclass(frozen=True, slots=True)
class Targets:
    knee: int | None  # the highest concurrency meeting the service level
    max_rps: float  # sessions/s sustained at or below the knee
    concurrent_requests_per_model: int | None
    invocations_per_instance: float | None
    safety: float


def find_knee(levels: Sequence[LevelResult], slo: ServiceLevel) -> LevelResult | None:
    """The highest level at which it and every lower level meet ``slo``; a pass above a
    failure does not count (a noisy lucky level must not set a target)."""
    knee = None
    for level in sorted(levels, key=lambda r: r.concurrency):
        if slo.failures(level):
            break
        knee = level
    return knee


def invocations_per_instance(max_rps: float, safety: float = 0.5) -> float:
    """AWS's load-test rule for SageMakerVariantInvocationsPerInstance (a per-minute metric)."""
    return max_rps * safety * 60


def recommend(levels: Sequence[LevelResult], slo: ServiceLevel, safety: float = 0.7) -> Targets:
    knee = find_knee(levels, slo)
    if knee is None:
        return Targets(None, 0.0, None, None, safety)
    max_rps = max(r.rps for r in levels if r.concurrency <= knee.concurrency)
    return Targets(
        knee.concurrency,
        round(max_rps, 3),
        max(1, math.floor(knee.concurrency * safety)),
        round(invocations_per_instance(max_rps), 1),
        safety,
    )


def playback_stalls(arrivals: Sequence[float], durations: Sequence[float], buffer_s: float = 0.0) -> tuple[int, float]:
    """(stalls, seconds stalled) of a listener who starts ``buffer_s`` after the first payload
    and plays each payload when it has arrived and the previous one has finished."""
    if not arrivals:
        return 0, 0.0
    end = arrivals[0] + buffer_s + durations[0]
    stalls, stalled = 0, 0.0
    for t, d in zip(arrivals[1:], durations[1:]):
        if t > end:
            stalls, stalled = stalls + 1, stalled + t - end
            end = t
        end += d
    return stalls, stalled


def _pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 3) if values else None


def summarize(concurrency: int, stats: list[SessionStat], elapsed_s: float) -> LevelResult:
    ok = [s for s in stats if s.ok]
    ttfa = [s.ttfa_ms for s in ok if s.ttfa_ms is not None]
    rtf = [s.rtf for s in ok if s.rtf is not None]
    codes: dict[str, int] = {}
    for s in stats:
        if not s.ok:
            codes[s.error] = codes.get(s.error, 0) + 1
    return LevelResult(
        concurrency=concurrency,
        sessions=len(stats),
        errors=len(stats) - len(ok),
        error_codes=codes,
        ttfa_p50_ms=_pct(ttfa, 50),
        ttfa_p90_ms=_pct(ttfa, 90),
        ttfa_p99_ms=_pct(ttfa, 99),
        rtf_p50=_pct(rtf, 50),
        rtf_p90=_pct(rtf, 90),
        stalled_sessions=sum(1 for s in ok if s.stalls),
        stalls=sum(s.stalls for s in ok),
        rps=round(len(ok) / elapsed_s, 3) if elapsed_s else 0.0,
        elapsed_s=round(elapsed_s, 2),
    )
