"""The engine's live rate: seconds of compute per second of audio, learned from every synthesis.

Machines of one kind differ (the embedded model ran at RTF 0.31-0.35 on one, 0.88 on
another) and a shared machine changes speed from one minute to the next, so nothing that
schedules audio may rely on a constant: it asks ``EngineRate``. Every synthesis the gateway
runs (a "flight", see ``synthesis.py``) reports its wall time, the audio it made and when its
first audio came; recent calls weigh most (each call counts ``forget`` times less than the
next one).

Per vocoder mode, because an engine that streams inside a segment pays for it in compute.
The wall time counts from the moment the call has one of the engine's slots (``scheduler.py``):
waiting behind other sessions is the budget's to forecast, not the engine's rate.

The margin forecasts are stretched by is learned from what replies' arrivals needed
(``margins.py``), per mode, from the first reply on (drawn towards the rule before learning
while few replies were seen); before that it follows the calls' overruns.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..kokoro.vocoder.modes import VocoderMode
from ..kokoro.vocoder.pacing import CostModel
from .margins import START, Margins
from .schedule import forecast, preroll_s

log = logging.getLogger(__name__)
DEFAULT = "default"  # the key of engines without vocoder modes (and of an unnamed mode)
PRIOR_RTF = 1.0  # before any measurement: assume real time, the pessimistic side of most hosts
PRIOR_OVERRUN = 0.3  # see EngineRate._prior
PEAK_FORGET = 0.9  # per call, see EngineRate.peak
PRIOR_S_PER_CHAR = 0.065  # audio seconds per character of English at speed 1 (Kokoro, measured)


@dataclass(slots=True)
class _Mode:
    costs: CostModel  # wall seconds against audio seconds, a line (fixed + per second)
    wall: float = 0.0  # decayed sums, for the published ratio
    audio: float = 0.0
    first_frac: float = 1.0  # decayed mean share of a call's time before its first audio
    weight: float = 0.0
    calls: int = 0
    lined: int = 0  # calls its line was fitted on (``EngineRate._line``)


class EngineRate:
    """The engine's smoothed rate (RTF) per mode, and how much audio a character of text makes
    at a speaking ``speed``."""

    def __init__(self, forget: float = 0.8, prior_rtf: float = PRIOR_RTF, exact_below_s: float = 0.0) -> None:
        self.forget = forget
        self.prior_rtf = prior_rtf
        # the engine makes a segment with less audio than this whole in every vocoder mode
        # (``Capabilities.exact_below_s``): its first audio comes at its end
        self.exact_below_s = exact_below_s
        self._modes: dict[str, _Mode] = {}
        self._paced: dict[str, _Mode] = {}  # per streaming mode, the line of its ``paced`` streams
        self._chars = [0.0, 0.0]  # decayed audio seconds x speed, characters
        # decayed mean square of how far calls of any mode ran over their forecast (0.2: 20%
        # slower): the machine's state, so a slowdown seen in one mode counts for all
        self._overrun = [0.0, 0.0]  # weight, sum of squares
        # until calls say otherwise (or the start-up warm-up measured them: ``settle``), assume
        # they overrun by PRIOR_OVERRUN (one pseudo-call, decaying as the calls do): a reply
        # planned on no measurement at all is the one whose player cannot be corrected in time
        self._prior = [1.0, PRIOR_OVERRUN**2]
        self.margins = Margins()
        self._latest = (0.0, 0.0)  # how far the latest two calls ran over their forecast (0.3: 30%)
        self._typical = [0.0, 0.0]  # decayed weight and sum of the calls' forecast seconds
        self._peak = 0.0  # the most a recent call ran over its forecast (``peak``)

    def observe(
        self,
        mode: str | None,
        audio_s: float,
        wall_s: float,
        first_s: float,
        *,
        chars: int = 0,
        speed: float = 1.0,
        paced: bool = False,
        others: float | None = None,
    ) -> None:
        """One finished synthesis: ``audio_s`` of audio in ``wall_s``, the first after ``first_s``;
        ``paced``: for a player holding audio, whose first chunk the engine sized to that buffer
        (not the smallest), so its first audio says nothing of how soon one can come; ``others``:
        the cores other processes used meanwhile (``cpu.CpuShare``, traced only)."""
        if audio_s <= 0 or wall_s <= 0:
            return
        m = self._modes.setdefault(mode or DEFAULT, _Mode(CostModel(self.forget)))
        line = self._modes.setdefault(self._line(mode, audio_s), _Mode(CostModel(self.forget)))
        f = self.forget
        predicted = max(self.predict(mode, audio_s, paced), 1e-6)
        counted = self._lined(line)
        if counted:  # how wrong the forecast was, before this call moves it
            tw, tp = self._typical
            self._typical = [tw * f + 1.0, tp * f + predicted]
            over = max(0.0, wall_s / predicted - 1.0)
            w, sq = self._overrun
            self._overrun = [w * f + 1.0, sq * f + over * over]
            # for clock starts, the seconds it ran over as a share of the typical call's forecast
            # where it was shorter: a short call's fixed cost is noise there (a 0.3 s call 50%
            # over held back every clock start of a reply beside 1 s calls on time); the margins
            # take every call's share in full (shrunk, a busy core's short calls widened them too
            # little: ``bench playback`` stalled 3.2 s)
            shrunk = max(0.0, wall_s - predicted) / max(predicted, self._typical[1] / self._typical[0])
            self._latest = (shrunk, self._latest[0])
            self._peak = max(over, self._peak * PEAK_FORGET)
            self._prior = [self._prior[0] * f, self._prior[1]]
        if paced and self._line(mode, audio_s) != VocoderMode.EXACT:  # streamed for a playing player
            line = self._paced.setdefault(mode or DEFAULT, _Mode(CostModel(self.forget)))
        line.costs.observe(audio_s, wall_s)  # type: ignore[arg-type]  # the line takes any number
        line.lined += 1
        m.wall, m.audio = m.wall * f + wall_s, m.audio * f + audio_s
        # (a shorter one came whole: it says nothing of how the mode streams; a paced one came as
        # late as the buffer allowed: counted, the shares of one 2.6-3.1 s sentence ran 0.18-0.97)
        if audio_s >= self.exact_below_s and not paced:
            m.first_frac = (m.first_frac * m.weight * f + min(1.0, first_s / wall_s)) / (m.weight * f + 1.0)
            m.weight = m.weight * f + 1.0
        m.calls += 1
        if self.tracing():
            log.debug(
                "call %s%s: %.2f s of audio in %.2f s (first at %.2f s), %.2fx its forecast%s; noise %.2f, peak %.2f%s",
                mode or DEFAULT, " paced" if paced else "", audio_s, wall_s, first_s, wall_s / predicted,
                "" if counted else " (not counted)", self.noise(), self._peak,
                "" if others is None else f"; other processes {others:.2f} cores",
            )  # fmt: skip
        if chars > 0:
            a, c = self._chars
            self._chars = [a * f + audio_s * speed, c * f + chars]

    @staticmethod
    def tracing() -> bool:
        """Are calls traced (this module's logger at DEBUG)? Then the caller measures ``others``."""
        return log.isEnabledFor(logging.DEBUG)

    def _lined(self, line: _Mode) -> bool:
        """Was a call on ``line`` forecast on a fitted line (two calls or more)? Its own, or, while
        it has one call, the one ``_predict`` bounds it below by. (Its own alone: the warm-up
        leaves ``frozen-first``'s line one streamed call, so on a cold press streams for a playing
        player ran 1.6x and 2.0x their forecast and moved no overrun: the stretch stayed 1.15 and
        the player ran dry.) A line's first call was forecast on another mode's: not counted."""
        return line.lined > 1 or (line.lined == 1 and any(o.lined > 1 for o in self._modes.values()))

    def _line(self, mode: str | None, audio_s: float) -> str:
        """Whose line costs a call of ``audio_s`` in ``mode``: exact's where the engine makes the
        segment whole in a streaming mode (under ``exact_below_s``: the same work as an exact
        call's); else the mode's own. Fitted together, a streaming mode's line bent: its short
        calls (made whole) ran at a median 1.24x their forecast and 1-2 s ones at 0.89x."""
        if mode and mode != VocoderMode.EXACT and audio_s < self.exact_below_s:
            return VocoderMode.EXACT
        return mode or DEFAULT

    def _mode(self, mode: str | None) -> _Mode | None:
        """The mode's measurements; another mode's while this one has none (same engine)."""
        m = self._modes.get(mode or DEFAULT)
        if (m is None or not m.calls) and self._modes:
            m = max(self._modes.values(), key=lambda x: x.calls)
        return m

    def seen(self, mode: str | None) -> bool:
        """Has ``mode`` itself made anything (not only another mode of the engine)?"""
        m = self._modes.get(mode or DEFAULT)
        return m is not None and m.calls > 0

    def rtf(self, mode: str | None = None) -> float:
        """Recent wall seconds per audio second (the prior until something was measured)."""
        m = self._mode(mode)
        return m.wall / m.audio if m is not None and m.audio > 0 else self.prior_rtf

    def streaming_too_slow(self, floor: float) -> bool:
        """Is streaming inside a segment (``frozen-first``), stretched, no faster than real time?"""
        return self.rtf(VocoderMode.FROZEN_FIRST) * self.safety(floor) >= 1.0

    def predict(self, mode: str | None, audio_s: float, paced: bool = False) -> float:
        """``_predict``; ``paced``: a segment streamed for a playing player, on the line of such
        streams where it has one (never below the mode's). With well under a second held, the
        vocoder can neither take larger chunks nor hand over to the exact rest, so such a stream
        costs the frozen chunks' own rate: Play both's streams after a start on "Hello!" ran
        1.4-1.5x the mode's line, which streams that hand over make, and the player ran dry."""
        own = self._predict(mode, audio_s)
        streamed = self._line(mode, audio_s) != VocoderMode.EXACT
        if paced and streamed and (p := self._paced.get(mode or DEFAULT)) is not None and p.lined >= 2:
            return max(own, p.costs.predict(audio_s))  # type: ignore[arg-type]
        return own

    def _predict(self, mode: str | None, audio_s: float) -> float:
        """Seconds one call takes for ``audio_s`` of audio: the fitted line where it has one. A
        mode measured once has no line, only a cost per second, so no fixed cost: it is forecast
        no cheaper than the mode with a line (the cost of a call's text, encoder and session is
        every mode's). The warm-up measures ``frozen-first`` on one long sentence, and the first
        reply's "Hello!" then took 0.54-1.08 s against forecasts of 0.28-0.50 s in 12 of 12
        browser runs: the 100% "overrun" widened the next holds to 2-3.9 s."""
        m = self._modes.get(self._line(mode, audio_s))
        if m is None or not m.lined:
            m = self._mode(mode)
        if m is None:
            return self.prior_rtf * audio_s
        own = max(m.costs.predict(audio_s), 0.0) if m.lined else 0.0  # type: ignore[arg-type]
        if m.lined < 2 and (lined := [o for o in self._modes.values() if o.lined >= 2 - (not m.lined)]):
            other = max(lined, key=lambda o: o.lined)
            own = max(own, other.costs.predict(audio_s))  # type: ignore[arg-type]
        return own if own > 0 else self.rtf(mode) * audio_s

    def overrun(self, prior: bool = True) -> float:
        """RMS of how far recent calls (any mode) ran over their forecast: 0.0 when on time.
        ``prior``: with the prior's pseudo-call (until calls and ``settle`` replace it)."""
        (w, sq), (pw, psq) = self._overrun, self._prior if prior else (0.0, 0.0)
        return ((sq + pw * psq) / (w + pw)) ** 0.5 if w + pw > 0 else 0.0

    def overrun_now(self, prior: bool = True) -> float:
        """What forecasts are widened by: the RMS (``overrun``), or the latest call's overrun
        where that is more. A machine turning slower shows in the latest call first and is
        diluted in the RMS by the calls before it: a busy core's first call 43% over made an
        RMS of 0.20, and the hold it gave started a player that ran dry 1.7 s (``bench
        playback``). (The latest as ``recent_overrun`` counts it: a short call's fixed cost
        against the typical call.) ``prior``: as for ``overrun``."""
        return max(self.overrun(prior), self._latest[0])

    def noise(self) -> float:
        """How far the calls measured run over their forecast now: ``overrun_now`` without the
        prior's pseudo-call (0.0 until two calls of a mode were compared)."""
        return self.overrun_now(prior=False)

    def peak(self) -> float:
        """The most a recent call ran over its forecast (0.25: 25%), each call since making it
        count ``PEAK_FORGET`` times less: the RMS (``noise``) says how far calls run over on
        average, this how far the next one may."""
        return self._peak

    def recent_overrun(self) -> float:
        """How far calls run over their forecast now: the more of the latest two calls'. A
        machine turning slower shows in the latest call first, and a short call on time does
        not clear it. (Not the decayed RMS, ``overrun``: it still held the start-up's first
        calls, 60-97% over on cold caches, when ``bench listeners``' first listener came, and
        kept its clock start back: 2.2 s where 0.98 s played through.)"""
        return max(self._latest)

    def settle(self) -> None:
        """The start-up warm-up is done: the overruns its calls measured (if any) stand for the
        machine from now on, the prior's pseudo-call no longer (with their ``peak``: a few calls
        on time cannot say how noisy the machine is); the stretch its replies needed bounds the
        rule before learning from below (``Margins.settle``)."""
        if self._overrun[0] > 0:
            self._prior = [0.0, 0.0]
        self.margins.settle()

    def safety(self, floor: float, mode: str | None = None) -> float:
        """The factor to stretch forecasts by: what replies' arrivals needed (``margins``) once
        learned for ``mode`` (None: the largest learned; widened by overruns beyond those it
        was learned with: ``margin``); until then ``floor`` on a steady
        machine, more when calls have been running over their forecast (a player's buffer that
        follows the engine, as WebRTC's jitter buffer follows the network): 1 + 2 x their
        overrun, or their recent ``peak`` (the warm-up's calls 3-25% over on a busy host, a first
        reply on their RMS alone ran dry in Chromium), at most 2."""
        if (factor := self.margin(mode)) is not None:
            return factor
        return self._rule(floor, mode, self.overrun_now())

    def _rule(self, floor: float, bucket: str | None, over: float) -> float:
        """The stretch before any margin is learned (``safety``), with the calls' ``over``."""
        return max(min(2.0, max(floor, 1.0 + 2.0 * max(over, self._peak))), self.margins.startup(bucket))

    def learn(self, bucket: str, needed: float, floor: float) -> None:
        """A reply of ``bucket`` needed a stretch of ``needed`` (``margins.needed_stretch``);
        the rule before learning (``safety`` before any margin, on the calls' measured overruns:
        ``floor``, the warm-up's, 1 + 2 x ``noise`` or ``peak``) is what its first reply's margin
        is drawn towards (``Margins.factor``; ``floor`` and the warm-up's alone, a second press
        of Play both ran dry in Chromium on a busy host)."""
        self.margins.observe(bucket, needed, self.overrun_now(), prior=self._rule(floor, bucket, self.noise()))
        if self.tracing():
            log.debug("reply learned (%s): its arrivals needed a stretch of %.2f", bucket, needed)

    def margin(self, bucket: str | None) -> float | None:
        """The stretch replies of ``bucket`` needed (None: the largest of any), widened while
        calls run further over their forecast than when it was learned; None until learned.
        Never below 1 + how far the calls measured run over now (not the prior's): replies that
        needed 1.0 had slack the next may lack (a streamed first segment told 0 on a margin of
        1.0 stalled 0.17 s on ``bench listeners`` while calls ran 10-15% over)."""
        over, m, floor = self.overrun_now(), self.margins, 1.0 + self.noise()
        if bucket is not None:
            return m.factor(bucket, over, floor=floor)
        holds = (b for b in m.buckets() if not b.endswith(START))  # what the holds needed
        return max((f for b in holds if (f := m.factor(b, over, floor=floor)) is not None), default=None)

    def first_fraction(self, mode: str | None, audio_s: float | None = None) -> float:
        """The share of a call's time that passes before its first audio (1: whole segments), for
        a segment of ``audio_s`` (None: a long one). Short segments come whole in every mode:
        counted as streamed at the mode's share (the mean over whole and streamed calls), a reply
        opening on a 0.9 s sentence was forecast to deliver 0.45 s of it early, and the margins
        learned from it that holds needed 1.9-3x their forecast (``bench listeners``)."""
        if audio_s is not None and audio_s < self.exact_below_s:
            return 1.0
        m = self._mode(mode)
        return m.first_frac if m is not None else 1.0

    def preroll_ms(
        self,
        floor: float,
        speed: float,
        texts: Sequence[str],
        held_s: float,
        modes: Sequence[str | None],
        bucket: str | None = None,
        paced_from: int | None = None,
    ) -> int:
        """Audio (ms) a player should hold before it starts or resumes, for ``texts`` still to come
        (each in its mode of ``modes``, at ``speed``) and ``held_s`` it has not heard, stretched by
        the margin learned for replies of ``bucket`` (None: replies starting as ``texts[0]``
        does; ``floor``: ``preroll_safety``, see ``safety``); ``paced_from``: ``forecast``'s."""
        segments = forecast(texts, modes, self, speed, paced_from)
        bucket = bucket or (modes[0] if modes else None) or DEFAULT
        k = self.safety(floor, bucket)
        ms = round(1000 * preroll_s(segments, held_s, k, self.peak()))
        if self.tracing():
            each = (f"{s.audio_s:.2f}/{s.compute_s:.2f}{'' if m is None else ' ' + m}" for s, m in zip(segments, modes))
            log.debug(
                "preroll %d ms: %.2f s held, stretch %.2f (%s), peak %.2f; forecast (audio s, compute s): %s",
                ms, held_s, k, bucket, self._peak, ", ".join(each),
            )  # fmt: skip
        return ms

    def audio_s(self, text: str, speed: float = 1.0) -> float:
        """How much audio ``text`` will make, from the characters per second measured so far."""
        a, c = self._chars
        per_char = a / c if c > 0 else PRIOR_S_PER_CHAR
        return len(text.strip()) * per_char / max(speed, 0.05)

    def snapshot(self) -> dict[str, Any]:
        """For /readyz and /metrics: per mode, the smoothed RTF and the calls it rests on."""
        out: dict[str, Any] = {
            name: {"rtf": round(m.wall / m.audio, 3), "calls": m.calls, "first_fraction": round(m.first_frac, 3)}
            for name, m in self._modes.items()
            if m.audio > 0
        }
        if out:
            out["overrun"] = round(self.overrun(), 3)
        if margins := self.margins.snapshot():
            out["margins"] = margins  # the learned stretch per mode
        if startup := self.margins.startup_snapshot():
            out["startup_margins"] = startup  # what the start-up warm-up's replies needed
        return out
