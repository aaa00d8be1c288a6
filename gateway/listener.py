"""What the listener holds, and the schedule that follows from it and the engine's live speed.

One ``Listener`` per reply. Before each segment the synthesis stage asks it whether to wait
(``lookahead_s``), which vocoder mode the segment gets (``mode_for``) and what ``preroll_ms`` a
player should hold; the stages tell it the audio made (``made``) and when the first payload
went out (``first_audio``). A batch reply has no listener yet (``live=False``): no waits, and
the mode it was given for every segment.
"""
from __future__ import annotations

import asyncio
import time
from typing import Sequence

from .config import Settings
from .options import StreamOptions
from .schedule import forecast, preroll_s
from .speed import LiveSpeed


def preroll_ms(speed: LiveSpeed, settings: Settings, rate: float, texts: Sequence[str],
               held_s: float, modes: Sequence[str | None]) -> int:
    """Audio (ms) a player should hold before it starts or resumes, for ``texts`` still to
    come (each synthesized in its mode of ``modes``) and ``held_s`` of audio it has not heard,
    at the engine's live speed; ``rate`` is the speaking rate asked for."""
    segments = forecast(texts, modes, speed, rate)
    return round(1000 * preroll_s(segments, held_s, speed.safety(settings.preroll_safety)))


class Listener:
    def __init__(self, speed: LiveSpeed, settings: Settings, options: StreamOptions, *,
                 requested: str | None, sample_rate: int, live: bool = True) -> None:
        self.speed, self.settings, self.options = speed, settings, options
        self.requested = requested  # the vocoder mode the request asked for (or the engine's)
        self.sample_rate, self.live = sample_rate, live
        self.samples = 0  # audio made for this reply
        self.t_created = time.perf_counter()
        self.t_first_audio: float | None = None  # perf_counter of the first audio payload

    def made(self, samples: int) -> None:
        self.samples += samples

    def first_audio(self) -> None:
        self.t_first_audio = time.perf_counter()

    def buffered_s(self) -> float:
        """Audio made for the listener that they have not heard yet (0 before the first):
        a player that starts at the first payload and plays in real time. With the option
        ``buffered_s`` (audio the listener held before this reply), that plays first."""
        if not self.live:
            return 0.0
        made = self.samples / self.sample_rate
        if held := self.options.buffered_s:
            return max(0.0, held + made - (time.perf_counter() - self.t_created))
        if self.t_first_audio is None:
            return 0.0
        return max(0.0, made - (time.perf_counter() - self.t_first_audio))

    def mode_for(self, text: str) -> str | None:
        """The vocoder mode for this segment. ``frozen-first`` streams inside a segment only
        when it pays: a segment whose whole synthesis is forecast to finish while the listener
        still has audio goes exact (less compute, exact sound), and so does every segment after
        the first when even streamed synthesis is slower than real time (the player holds a
        preroll then, and the exact path, which costs less, fills it sooner)."""
        if self.requested != "frozen-first" or not self.live:
            return self.requested
        speed = self.speed
        need = speed.predict("exact", speed.audio_s(text, self.options.speed))
        if self.buffered_s() >= speed.safety(self.settings.preroll_safety) * need:
            return "exact"
        if self.t_first_audio is not None and self._streaming_too_slow():
            return "exact"
        return self.requested

    def _streaming_too_slow(self) -> bool:
        speed = self.speed
        return speed.rtf("frozen-first") * speed.safety(self.settings.preroll_safety) >= 1.0

    def later_mode(self) -> str | None:
        """The mode a segment after the next one is forecast to get."""
        if self.requested == "frozen-first" and self._streaming_too_slow():
            return "exact"
        return self.requested

    def preroll_ms(self, texts: Sequence[str], mode: str | None) -> int:
        """``preroll_ms`` for a player now; ``texts[0]`` is the segment starting (in ``mode``),
        the rest what is forecast to follow it."""
        later = self.later_mode()
        modes = [mode if k == 0 else later for k in range(len(texts))]
        return preroll_ms(self.speed, self.settings, self.options.speed, texts, self.buffered_s(), modes)

    async def wait(self, pending: Sequence[str]) -> None:
        """Far enough ahead of the listener (``lookahead_s`` beyond what the next segments are
        forecast to take): wait until that is no longer so. One timer per segment."""
        horizon = self.settings.lookahead_s
        if not self.live or horizon <= 0 or self.t_first_audio is None:
            return
        speed = self.speed
        need = sum(speed.predict(self.requested, speed.audio_s(t, self.options.speed))
                   for t in list(pending)[: max(1, self.settings.lookahead)])
        excess = self.buffered_s() - horizon - speed.safety(self.settings.preroll_safety) * need
        if excess > 0:
            await asyncio.sleep(excess)
