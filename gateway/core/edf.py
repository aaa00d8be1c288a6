"""Earliest deadline first, played out: when each reply's segments would finish on the engine.

The pure part of the real-time budget (``budget.py``): work as ``Stream``s of ``Job``s, the
engine's slots, and ``edf``, which serves them as the scheduler (``scheduler.py``) will;
``forecast`` finds the earliest start a new reply can have without making anyone later.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from .schedule import early_s, pieces_of, preroll_from

log = logging.getLogger(__name__)

HORIZON_S = 600.0  # no forecast looks further ahead than this
TYPICAL_AUDIO_S = 8.0  # a reply whose text is not known yet (a WebSocket before its text)
SEGMENT_S = 3.0  # ... cut into segments of about this much audio
SLACK_S = 0.02  # an admitted listener may be this much later than without the newcomer (a payload's jitter)
TIE_S = 0.25  # deadlines this close may come in either order (estimated from text lengths)


@dataclass(frozen=True, slots=True)
class Job:
    """One segment's engine work: ``work_s`` of compute, needed ``deadline`` s from now;
    ``first_fraction`` (< 1: streamed inside the segment) and ``early_s`` (how long before its
    end it may be due: ``schedule.early_s``) describe how its audio arrives."""

    work_s: float
    deadline: float
    audio_s: float = 0.0
    first_fraction: float = 1.0
    early_s: float = 0.0


def job(work_s: float, deadline: float, audio_s: float, first_fraction: float = 1.0) -> Job:
    """A segment's job, its audio arriving whole at its end or streamed from ``first_fraction`` on."""
    return Job(work_s, deadline, audio_s, first_fraction, early_s(work_s, audio_s, first_fraction))


@dataclass(frozen=True, slots=True)
class Stream:
    """One reply's remaining segments, in order; the first may start ``release`` s from now
    (after its own call that is running). ``hold_s``: a player that has not started yet, which
    starts once that much more audio has come (0: at its first audio); its deadlines, planned
    for a start ``anchor_s`` s from now, move with its real start (None: it plays already)."""

    jobs: tuple[Job, ...]
    release: float = 0.0
    hold_s: float | None = None
    anchor_s: float = 0.0


def reached(start: float, j: Job, need: float) -> float | None:
    """When job ``j``, running from ``start``, has delivered ``need`` s of its audio (None: it
    does not hold that much)."""
    if need > j.audio_s + 1e-9:
        return None
    got = 0.0
    for at, audio, _ in pieces_of(start, j.work_s, j.audio_s, j.first_fraction, 0.0):
        got += audio
        if got >= need - 1e-9:
            return at
    return start + j.work_s


def play(
    streams: Sequence[Stream], free_at: Sequence[float], bias: float = 0.0
) -> tuple[list[list[float]], list[float]]:
    """Finish times (s from now) of every job of ``streams``: non-preemptive earliest deadline
    first on ``len(free_at)`` slots (each free from its time on), a stream's jobs in order; and
    how far each stream's deadlines moved (a player that starts once it holds its preroll starts
    when that audio comes, earlier or later than planned: the scheduler follows it). ``bias``:
    the last stream's deadlines that much earlier in the order (not in its lateness)."""
    free = sorted(free_at) or [0.0]
    nxt = [0] * len(streams)
    ready = [s.release for s in streams]
    need = [s.hold_s for s in streams]
    shift = [0.0] * len(streams)
    done: list[list[float]] = [[] for _ in streams]
    left = sum(len(s.jobs) for s in streams)
    while left:
        t = free[0]
        cands = [i for i, s in enumerate(streams) if nxt[i] < len(s.jobs)]
        now_ready = [i for i in cands if ready[i] <= t + 1e-6]
        if not now_ready:
            t = min(ready[i] for i in cands)
            now_ready = [i for i in cands if ready[i] <= t + 1e-6]
        i = min(
            now_ready,
            key=lambda k: (streams[k].jobs[nxt[k]].deadline + shift[k] + (bias if k == len(streams) - 1 else 0.0), k),
        )
        j = streams[i].jobs[nxt[i]]
        end = t + j.work_s
        if (hold := need[i]) is not None:
            at = reached(t, j, hold)
            need[i] = hold - j.audio_s if at is None else None
            if at is not None or nxt[i] == len(streams[i].jobs) - 1:  # (never: it starts at the end)
                shift[i] = (at if at is not None else end) - streams[i].anchor_s
        done[i].append(end)
        ready[i] = end
        nxt[i] += 1
        left -= 1
        free[0] = end
        free.sort()
    return done, shift


def placed(
    others: Sequence[Stream], mine: Stream, free: Sequence[float], held: float, anchor: float, bias: float = 0.0
) -> list[tuple[float, float, float]]:
    """(arrival, audio, position) of ``mine``'s audio beside ``others`` for a player that has
    not started (holding ``held``, planned to start ``anchor`` s from now): it starts once it
    holds its preroll, whenever that comes, and the scheduler follows; the smallest hold that
    keeps it gapless and the others no later than its planned start does. ``bias``: added to
    its deadlines in the scheduler's order (a near tie taken the other way)."""
    finish, shift = play([*others, mine], free, bias)
    got = pieces(mine, finish[-1])
    base = [late(s, f, d) for s, f, d in zip(others, finish, shift)]
    for _ in range(8):
        hold = preroll_from(got, held)
        stream = replace(mine, hold_s=max(0.0, hold - held), anchor_s=anchor)
        finish, shift = play([*others, stream], free, bias)
        if late(stream, finish[-1], shift[-1]) <= 1e-3 and all(
            late(s, f, d) <= max(b, 0.0) + SLACK_S for s, f, d, b in zip(others, finish, shift, base)
        ):
            break
        later = pieces(mine, finish[-1])
        if preroll_from(later, held) <= hold + 1e-3:
            later = [(at + 0.25, audio, pos) for at, audio, pos in got]  # others: hold longer
        got = later
    return got


def edf(streams: Sequence[Stream], free_at: Sequence[float]) -> list[list[float]]:
    """Finish times of every job of ``streams`` (``play``)."""
    return play(streams, free_at)[0]


def late(stream: Stream, finish: Sequence[float], shift: float = 0.0) -> float:
    """How far the latest job of ``stream`` finishes after its deadline (moved by ``shift``;
    <= 0: none late)."""
    return max((f - j.early_s - j.deadline - shift for j, f in zip(stream.jobs, finish)), default=-math.inf)


def pieces(stream: Stream, finish: Sequence[float]) -> list[tuple[float, float, float]]:
    """(arrival, audio, playback position) of ``stream``'s audio, its jobs ending at ``finish``
    (a streamed segment arrives in pieces from its call's start on)."""
    out: list[tuple[float, float, float]] = []
    position = 0.0
    for j, at in zip(stream.jobs, finish):
        out += pieces_of(at - j.work_s, j.work_s, j.audio_s, j.first_fraction, position)
        position += j.audio_s
    return out


def newcomer(
    work: Sequence[float], audio: Sequence[float], start: float, first_fraction: float | Sequence[float] = 1.0
) -> Stream:
    """A reply that starts playing ``start`` s from now: segment k is due then plus the audio
    before it (each streamed from ``first_fraction`` of its time on, or whole at its end; one
    share for every segment, or one per segment)."""
    shares = [first_fraction] * len(work) if isinstance(first_fraction, (int, float)) else first_fraction
    jobs, pos = [], 0.0
    for w, a, share in zip(work, audio, shares):
        jobs.append(job(w, start + pos, a, share))
        pos += a
    return Stream(tuple(jobs))


def forecast(
    others: Sequence[Stream],
    work: Sequence[float],
    audio: Sequence[float],
    free_at: Sequence[float],
    first_fraction: float | Sequence[float] = 1.0,
) -> tuple[float, float]:
    """(start, start alone): the earliest playback start of a new reply (segments' ``work`` and
    ``audio``) that keeps every other stream no later than it is without it and every one of
    its own segments in time; the same on an idle engine. ``inf`` beyond ``HORIZON_S``."""
    if not work:
        return 0.0, 0.0
    alone_fin = edf([newcomer(work, audio, 0.0, first_fraction)], [0.0] * len(free_at))[0]
    alone = max(0.0, late(newcomer(work, audio, 0.0, first_fraction), alone_fin))
    if not others and not any(free_at):
        return alone, alone
    fin0, shift0 = play(others, free_at)
    base = [max(0.0, late(s, f, d)) for s, f, d in zip(others, fin0, shift0)]

    def fits(start: float) -> bool:
        # deadlines within TIE_S of another's may be taken in either order: the newcomer's
        # planned start is estimated from text lengths, another's deadline from audio made
        # (taken the other way, a listener playing beside a newcomer admitted 0.06 s ahead of
        # it waited for the newcomer's 1.45 s call and stalled 0.8 s on the replay)
        return all(fits_in(start, bias) for bias in (0.0, -TIE_S))

    def fits_in(start: float, bias: float) -> bool:
        mine = newcomer(work, audio, start, first_fraction)
        fin, shift = play([*others, mine], free_at, bias)
        if late(mine, fin[-1]) > 1e-6:
            return False
        # its player starts once it holds the preroll this plan gives, whenever that comes
        mine = replace(mine, hold_s=preroll_from(pieces(mine, fin[-1])), anchor_s=start)
        fin, shift = play([*others, mine], free_at, bias)
        if late(mine, fin[-1], shift[-1]) > 1e-3:
            return False
        return all(late(s, f, d) <= b + SLACK_S for s, f, d, b in zip(others, fin, shift, base))

    lo, hi = alone, alone + sum(work) + sum(sum(j.work_s for j in s.jobs) for s in others) + max(free_at, default=0)
    if fits(lo):
        return lo, alone
    while not fits(hi):
        if hi > HORIZON_S:
            log.debug("no start fits: others %s, free %s, work %s, audio %s", others, free_at, work, audio)
            return math.inf, alone
        hi *= 2
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
        if hi - lo < 0.01:
            break
    return hi, alone


def planned(audio: Sequence[float]) -> list[float]:
    """``audio`` itself, or a nominal reply's segments when it is not known yet."""
    if audio:
        return list(audio)
    n = max(1, round(TYPICAL_AUDIO_S / SEGMENT_S))
    return [TYPICAL_AUDIO_S / n] * n


def still_open(audio: Sequence[float], made_s: float = 0.0) -> list[float]:
    """A reply whose input is still coming (``text`` messages, an agent's tokens): the segments
    known so far (``audio``, after ``made_s`` already made), then as much of the nominal reply
    as they do not cover yet. Counted at its text alone, a reply that streams in looked small
    while others were admitted beside it, then grew and made someone stall."""
    out = list(audio)
    rest = TYPICAL_AUDIO_S - made_s - sum(out)
    while rest > 1e-6:
        out.append(min(SEGMENT_S, rest))
        rest -= SEGMENT_S
    return out
