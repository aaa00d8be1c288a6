"""A real-time player that honours the server's ``preroll_ms``, simulated on a session's arrivals.

The player holds back audio until it holds the preroll in force (the latest ``preroll_ms`` of
``ready`` or a ``sentence`` event; missing counts as 0), or until ``done`` if it never gets
there, or, holding some audio, until ``start_in_ms`` after the latest event that carried it
(a time the gateway forecast that start to be safe at: between two whole segments' arrivals);
then it plays in real time. When it runs dry it waits until it holds the preroll in
force again. What it reports: first audio, playback start, stalls after the start (count and
time; the wait before the start is not a stall), audio length and end of playback.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gateway.core.listener import GRACE_S  # as the demo page's players: a newer preroll that follows at once counts
from gateway.core.schedule import oracle_start

SAMPLE_RATE = 24000  # PCM s16le mono unless ``ready`` says otherwise
EPS = 1e-9


@dataclass(frozen=True, slots=True)
class Arrival:
    """Something a player receives at ``t_s`` (seconds from the request): audio, a new
    preroll in force, or the end of the reply."""

    t_s: float
    audio_s: float = 0.0
    preroll_s: float | None = None
    done: bool = False
    start_in_s: float | None = None  # with ``preroll_s``: a start this long after it, holding audio


@dataclass(frozen=True, slots=True)
class Playback:
    first_audio_s: float | None
    start_s: float | None
    end_s: float | None
    audio_s: float
    stalls: int
    stall_s: float
    gaps: tuple[tuple[float, float], ...]  # (ran dry, resumed), after playback started


def _still_met(arrivals: Sequence[Arrival], i: int, held: float, preroll: float, grace_s: float) -> bool:
    """Is the hold met at arrival ``i`` still met once what follows within ``grace_s`` is in
    (the gateway sends the next sentence's preroll right after a segment's last audio)?"""
    for b in arrivals[i + 1 :]:
        if b.t_s > arrivals[i].t_s + grace_s:
            break
        held += b.audio_s
        if b.preroll_s is not None:
            preroll = b.preroll_s
        if b.done:
            return True
    return held >= preroll - EPS


def simulate(arrivals: Sequence[Arrival], tolerance_s: float = 0.0, grace_s: float = GRACE_S) -> Playback:
    """Play ``arrivals`` (in time order) in real time, holding back the preroll in force.

    A rebuffer of ``tolerance_s`` or less delays the rest but is not counted as a stall. When
    an arrival meets the hold, a preroll that arrives within ``grace_s`` after it counts too
    (the start is not moved by the grace: at most 30 ms). A ``start_in_s`` of the latest
    ``ready`` / ``sentence`` starts a player that holds audio at that time even below its hold.
    """
    held = preroll = total = last = 0.0
    playing = done = False
    first = start = dry_at = timer = None
    gaps: list[tuple[float, float]] = []

    def play(at: float) -> None:
        nonlocal playing, start, timer
        playing, timer = True, None
        if start is None:
            start = at
        elif dry_at is not None and at - dry_at > tolerance_s:
            gaps.append((dry_at, at))

    for i, a in enumerate(arrivals):
        if not playing and timer is not None and held > 0 and timer <= a.t_s:
            last = max(timer, last)
            play(last)
        if playing:
            if a.t_s - last > held + EPS:
                playing, dry_at, held = False, last + held, 0.0
            else:
                held = max(0.0, held - (a.t_s - last))
        last = a.t_s
        held += a.audio_s
        total += a.audio_s
        if a.audio_s > 0 and first is None:
            first = a.t_s
        if a.preroll_s is not None:
            preroll = a.preroll_s
            timer = None if a.start_in_s is None else a.t_s + a.start_in_s
        done = done or a.done
        if not playing and held > 0:
            if done or (held >= preroll - EPS and _still_met(arrivals, i, held, preroll, grace_s)):
                play(a.t_s)
            elif timer is not None and timer <= a.t_s + EPS:
                play(a.t_s)
    end = last + held if playing else dry_at
    return Playback(first, start, end, total, len(gaps), sum(b - a for a, b in gaps), tuple(gaps))


def arrivals_of(result: Any) -> list[Arrival]:
    """A PCM session (``StreamResult``) as the player sees it; ``preroll_ms`` missing counts as 0."""
    arrivals, rate, n = [], SAMPLE_RATE, 0
    for t, kind, fields in result.events:
        if kind == "audio":
            seconds = len(result.payloads[n]) / 2 / rate
            arrivals.append(Arrival(result.payload_times[n] - result.t0, audio_s=seconds))
            n += 1
        elif kind in ("ready", "sentence"):
            if kind == "ready":
                if fields.get("format", "pcm") != "pcm":
                    raise RuntimeError(f"the player needs format=pcm, the server sent {fields.get('format')}")
                rate = int(fields.get("sample_rate") or rate)
            arrivals.append(
                Arrival(
                    t - result.t0, preroll_s=float(fields.get("preroll_ms") or 0) / 1000, start_in_s=start_in(fields)
                )
            )
        elif kind == "done":
            arrivals.append(Arrival(t - result.t0, done=True))
        elif kind == "error":
            raise RuntimeError(f"the session failed: {fields}")
    return arrivals


def start_in(fields: dict[str, Any]) -> float | None:
    """An event's ``start_in_ms`` in seconds (None: it has none)."""
    value = fields.get("start_in_ms")
    return None if value is None else float(value) / 1000


def session_run(result: Any) -> dict[str, Any]:
    """One streamed session, played: the figures a row of the table is made of, in ms."""
    if result.error or not result.payloads:
        raise RuntimeError(f"the session failed: {result.error or 'no audio'}")
    arrivals = arrivals_of(result)
    p = simulate(arrivals)
    oracle = oracle_start([(a.t_s, a.audio_s) for a in arrivals if a.audio_s > 0])
    prerolls = [f.get("preroll_ms") for _, k, f in result.events if k in ("ready", "sentence")]
    return {
        "first_audio_ms": _ms(p.first_audio_s),
        "start_ms": _ms(p.start_s),
        "oracle_ms": _ms(oracle),
        "end_ms": _ms(p.end_s),
        "stalls": p.stalls,
        "stall_ms": _ms(p.stall_s),
        "audio_s": round(p.audio_s, 3),
        "preroll_ms": [v for v in prerolls if v is not None],
        "start_in_ms": [round(a.start_in_s * 1000) for a in arrivals if a.start_in_s is not None],
        "gaps_ms": [[_ms(a), _ms(b)] for a, b in p.gaps],
    }


def _ms(seconds: float | None) -> float | None:
    return round(seconds * 1000, 1) if seconds is not None else None
