"""How much audio a player should hold before it starts: ``preroll_s``.

The forecast: the segments still to synthesize (their audio estimated from their text) are
made one after another, each taking what ``EngineRate`` predicts for it. A segment that the
engine streams inside itself delivers its audio from a measured share of its time on,
evenly; one it makes whole arrives at its end. A player that starts at time S and then plays
in real time never runs dry when every piece of audio arrives before its place in playback:
``arrival <= S + position``. The smallest such S gives the preroll: what the player holds
then, the audio it already had plus what arrived by S.

Compute times are stretched by ``safety`` (machines are noisy), and the forecast covers only
the text known now: a language model's reply can still outrun it, which is why every
``sentence`` event carries a fresh figure for a player that ran dry.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol


class Rate(Protocol):  # what ``engine_rate.EngineRate`` offers a forecast (no import: it imports this module's users)
    def audio_s(self, text: str, speed: float = 1.0) -> float: ...

    def predict(self, mode: str | None, audio_s: float, paced: bool = False) -> float: ...

    def first_fraction(self, mode: str | None, audio_s: float | None = None) -> float: ...


PIECE_S = 0.25  # a streamed segment is modelled as pieces of this much audio
# A playing player does not play its buffer to the last sample: the demo's MediaSource player
# pauses this long before its end (static/players.js ``DRY_S``; Chromium's renderer underflows
# with about 30 ms left) and waits 30 ms more to resume. The engine paces a playing listener's
# chunks on the buffer less this (an arrival 8 ms past the buffer's end was a 108 ms gap).
PLAYER_LEAD_S = 0.06


@dataclass(frozen=True, slots=True)
class Forecast:
    """One segment to come: its audio (s), its compute (s) and the share of that before its
    first audio (1.0: it arrives whole)."""

    audio_s: float
    compute_s: float
    first_fraction: float = 1.0


def arrivals(
    segments: Sequence[Forecast], safety: float = 1.0, peak: float | None = None, held: bool = False
) -> list[tuple[float, float, float]]:
    """(arrival time, audio, playback position) of every piece, from now, segments in order.

    ``peak`` (the most a recent call ran over: ``EngineRate.peak``): the first piece of a
    segment after audio the player holds (a later one, or the first where ``held``) counts as
    arriving later by ``boundary_s``."""
    out: list[tuple[float, float, float]] = []
    t = position = 0.0
    for k, seg in enumerate(segments):
        compute = seg.compute_s * safety
        got = pieces_of(t, compute, seg.audio_s, seg.first_fraction, position)
        if (k or held) and peak is not None:
            at, audio, pos = got[0]
            got[0] = (at + boundary_s(at - t, peak), audio, pos)
        out += got
        t += compute
        position += seg.audio_s
    return out


def boundary_s(first_s: float, peak: float) -> float:
    """What a later segment's first audio (``first_s`` after its call starts) must come before
    its place by, beyond the stretch: the player's lead, and that wait at its ``peak``. The
    stretch is learned on whole replies; the wait for a segment's first audio is short, and on
    a host running beside Chromium one chunk ran up to 1.87x its cost (one in ten over 1.34x)
    where whole calls ran 1.1-1.3x. A player started on "Hello!" (0.58 s) with the next
    sentence's first audio forecast 0.34 s later got it 36-66 ms before it ran dry in Chromium
    here, and ran dry (gaps of 121 and 219 ms) in two full-suite runs, one of them CI's. With
    it, Play both (8 runs against 8) started on "Hello!" in none where 3 did, and ran dry in
    none where 2 did (2020 and 215 ms); in 7 runs after, it started there once (60 ms to spare)
    and never ran dry. Its cost is on whole segments, whose wait is the whole call: a busy
    core's starts came at 8.5-10.0 s where 3.7-5.2 s played through (docs/SCHEDULING.md)."""
    return PLAYER_LEAD_S + peak * first_s


def pieces_of(
    start: float, compute: float, audio: float, first_fraction: float, position: float
) -> list[tuple[float, float, float]]:
    """(arrival, audio, playback position) of one segment's pieces, its call running from
    ``start`` for ``compute`` s: whole at its end, or streamed (``first_fraction`` < 1): the
    first piece of ``PIECE_S`` when that share of its time has passed (the measured first
    audio), the last at its end, the rest evenly between. (Each piece at the end of its share
    of the rest counted one piece too late throughout: listeners beside others started up to
    0.8 s past their oracle at RTF 0.35-0.6 on the replay.)"""
    first = compute * min(1.0, max(0.0, first_fraction))
    n = 1 if first >= compute or audio <= PIECE_S else int(audio / PIECE_S + 0.999)
    return [
        (
            start + first + (compute - first) * k / (n - 1) if n > 1 else start + compute,
            audio / n,
            position + audio * k / n,
        )
        for k in range(n)
    ]


def early_s(compute: float, audio: float, first_fraction: float) -> float:
    """How long before its call ends a segment can be due (its first sample's place in
    playback) and still have every piece in time: 0 for a whole segment; for one streamed
    faster than real time, most of its compute."""
    return compute - max(at - pos for at, _, pos in pieces_of(0.0, compute, audio, first_fraction, 0.0))


def preroll_s(
    segments: Sequence[Forecast], held_s: float = 0.0, safety: float = 1.2, peak: float | None = None
) -> float:
    """Audio to hold before starting (or resuming) so that playback never runs dry.

    ``held_s``: audio the player has now and has not played (placed before the segments).
    0.0 when the forecast says audio keeps ahead from the first piece on. ``peak``: see ``arrivals``.
    """
    return preroll_from(arrivals(segments, safety, peak, held_s > 0), held_s)


def preroll_from(pieces: Sequence[tuple[float, float, float]], held_s: float = 0.0) -> float:
    """The preroll for pieces (arrival, audio, playback position), in arrival order: what the
    player holds at the earliest start every piece arrives in time for."""
    if not pieces:
        return 0.0
    # the earliest start that every piece arrives in time for
    start = max(at - (held_s + position) for at, _, position in pieces)
    first_at = pieces[0][0]
    if start <= first_at and held_s <= 0.0:
        return 0.0  # starting with the first piece is in time for every later one
    if start <= 0.0:
        return 0.0
    # the player counts audio as it arrives; it starts at the first arrival at or after `start`
    held = held_s
    for at, audio, _ in pieces:
        held += audio
        if at >= start - 1e-9:
            return held
    return held


def earliest_start(pieces: Sequence[tuple[float, float, float]], held_s: float = 0.0) -> float:
    """The earliest start (from now) that every piece (arrival, audio, position) arrives in time
    for, ``held_s`` of audio already held: what a player that starts on a clock rather than on
    an arrival (``start_in_ms``) can use. 0.0: now."""
    return max(0.0, max((at - (held_s + position) for at, _, position in pieces), default=0.0))


def start_s(segments: Sequence[Forecast], held_s: float = 0.0, safety: float = 1.2, peak: float | None = None) -> float:
    """When, on the same forecast, a player told ``preroll_s`` starts: the arrival that brings
    its hold (now, when it holds enough already). ``peak``: ``preroll_s``'s."""
    pieces = arrivals(segments, safety, peak, held_s > 0)
    return start_on(pieces, preroll_from(pieces, held_s), held_s)


def start_on(pieces: Sequence[tuple[float, float, float]], hold: float, held_s: float = 0.0) -> float:
    """When a player holding ``held_s`` and told to hold ``hold`` starts on ``pieces``: the
    arrival that brings its hold (now, when it holds enough already)."""
    held = held_s
    if not pieces or (held > 0 and held >= hold - 1e-9):
        return 0.0
    for at, audio, _ in pieces:
        held += audio
        if held >= hold - 1e-9:
            return at
    return pieces[-1][0]


def oracle_start(arrivals: Iterable[tuple[float, float]]) -> float:
    """The earliest start that plays ``arrivals`` (time, audio s), in playback order, without
    a stall: the latest of each payload's arrival minus the audio before it. What a player
    would have needed, known only afterwards: the yardstick for starts and for the margins."""
    start, before = 0.0, 0.0
    for t, audio in arrivals:
        start = max(start, t - before)
        before += audio
    return start


def forecast(
    texts: Sequence[str], modes: Sequence[str | None], rate: Rate, speed: float = 1.0, paced_from: int | None = None
) -> list[Forecast]:
    """Forecasts for ``texts``, each made in its mode of ``modes``, at the engine's ``rate``;
    ``speed`` is the speaking rate asked for (``speed`` option); ``texts[paced_from:]`` are made
    for a playing player (the engine paces them: ``EngineRate.predict``; None: none)."""
    out = []
    for index, (text, mode) in enumerate(zip(texts, modes)):
        audio = rate.audio_s(text, speed)
        if audio > 0:
            paced = paced_from is not None and index >= paced_from
            out.append(Forecast(audio, rate.predict(mode, audio, paced), rate.first_fraction(mode, audio)))
    return out
