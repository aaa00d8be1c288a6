"""A reply as a member of the engine's real-time budget (``budget.py``): the pipeline's side.

``Pipeline`` inherits this: what work it still needs (``stream``, read by the budget and the
scheduler's forecasts), the verdict on the session it opens (``admitted``) and the wait in the
queue before its first segment (``enter_budget``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .budget import ADMIT, ShareKey, Stream, Verdict, share_key, still_open

if TYPE_CHECKING:
    from ..config import Settings
    from .listener import Listener
    from .options import StreamOptions
    from .synthesis import SynthesisHub


class BudgetMember:
    hub: SynthesisHub
    listener: Listener
    settings: Settings
    t_input: float | None
    ended: bool  # no more input will come
    current: str | None  # the segment being synthesized
    planned: list[float]  # audio (s) per segment the budget admitted it for
    verdict: Verdict | None  # the budget's, for a reply that opens a session
    planned_key: ShareKey | None  # the share key of the text it was admitted with
    options: StreamOptions
    deferred = False  # admitted on a nominal reply it would not fit: decided on its first text

    def _forecast_texts(self, current: str | None) -> list[str]:
        raise NotImplementedError

    def share_key(self) -> ShareKey | None:
        """What this reply's remaining work is shared on with identical replies (the hub's
        flights), None before its text comes or with ``cache`` off."""
        if self.t_input is None:  # admitted, its text not fed yet: the text it was admitted with
            return self.planned_key
        o = self.options
        return share_key(o.voice, o.speed, self.listener.requested, self._forecast_texts(self.current), o.cache)

    def stream(self, now: float, running: float | None) -> Stream:
        """The engine work this reply still needs; before any input, the reply it was admitted
        for; while its input is open, its text so far and at least the nominal reply (``still_open``)."""
        if self.t_input is None and self.planned:
            return self.listener.stream(self.planned, now, None, current=False)
        return self.listener.stream(self.forecast_audio(), now, running, current=self.current is not None)

    def forecast_audio(self, current: bool = True) -> list[float]:
        """Audio (s) of the segments still to make (the one being made first, when ``current``)."""
        listener = self.listener
        audio = listener.audio_of(self._forecast_texts(self.current if current else None))
        if self.ended:
            return audio
        made = listener.samples - (listener.segment_samples if current and self.current else 0)
        return still_open(audio, made / listener.sample_rate)

    def admitted(
        self, verdict: Verdict, planned: list[float], key: ShareKey | None = None, deferred: bool = False
    ) -> None:
        """The budget's verdict on the session this reply opens: admitted now (a member from
        here on, its ``planned`` segments, shared on ``key``, counted until its text comes) or
        queued; ``deferred``: its text comes later and the nominal reply would be refused, so
        the verdict waits for that text (a twin of an admitted reply adds no work)."""
        self.verdict, self.planned, self.planned_key = verdict, planned, key
        self.deferred = deferred
        if not self.listener.live:
            return
        self.listener.promised_start = self.listener.clock() + min(verdict.start_s, self.settings.lookahead_s)
        if verdict.wait_s == 0.0:
            self.hub.budget.add(self)
        else:
            self.hub.budget.expect(self)  # its work counts for newcomers behind it

    async def enter_budget(self) -> None:
        """Join the engine's admitted listeners: at once, or after the queue (``ready.queued_ms``)."""
        budget, listener = self.hub.budget, self.listener
        if not listener.live or self in budget.members:
            return

        def audio() -> list[float]:
            return self.forecast_audio(current=False)

        if self.deferred:  # now on its text: admitted, queued, or Overloaded (error, close 1013)
            self.deferred = False
            self.verdict = budget.admit(audio(), listener.requested, self.share_key(), exclude=self)
        await budget.enter(self, audio, listener.requested, self.verdict or ADMIT)
        if self.verdict is not None:  # it waited: the start forecast now
            start = budget.verdict(audio(), listener.requested, self).start_s
            listener.promised_start = listener.clock() + min(start, self.settings.lookahead_s)
