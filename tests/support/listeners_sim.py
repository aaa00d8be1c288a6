"""Listeners on one engine, played out on virtual time: ``bench listeners`` without a clock.

The real core (sessions, pipelines, the synthesis hub, its scheduler and budget) on the fake
engine computing one call at a time at a known pace, on a ``VirtualTimeLoop``: every arrival
time is what an idle machine would give, so a round's stalls and starts are the same on every
run. Each listener is played by ``bench.player.simulate`` (a real-time player that honours
``preroll_ms``) and measured against its oracle start (``schedule.oracle_start``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.player import Arrival, simulate, start_in
from gateway.config import Settings, load_settings
from gateway.core.options import parse_options
from gateway.core.schedule import oracle_start
from gateway.core.stream import StreamSession
from gateway.core.synthesis import SynthesisHub
from gateway.engines.fake import FakeEngine
from gateway.errors import Overloaded

BAR_FACTOR, BAR_S = 1.3, 0.3  # the bar: a start at most 1.3 x its oracle + 300 ms


@dataclass(frozen=True, slots=True)
class Heard:
    """One listener's outcome, times in seconds from its request."""

    outcome: str  # admitted | queued | refused | refused late (error overloaded after ready)
    ready: dict[str, Any] = field(default_factory=dict)
    retry_after: float | None = None
    start_s: float | None = None
    oracle_s: float = 0.0
    stalls: int = 0
    stall_s: float = 0.0
    audio_s: float = 0.0
    prerolls_ms: tuple[int, ...] = ()
    on_arrival_s: float = 0.0  # the first arrival at or after the oracle start
    start_ins_ms: tuple[int, ...] = ()  # the ``start_in_ms`` the player was offered
    arrivals_s: tuple[float, ...] = ()  # when each audio payload came

    @property
    def within_bar(self) -> bool:
        return self.start_s is not None and self.start_s <= BAR_FACTOR * self.oracle_s + BAR_S + 1e-6

    @property
    def within_reach(self) -> bool:
        """Within the bar, or no later than the earliest gapless start a player that starts on
        an arrival (when it holds its preroll) can have: with whole segments the oracle often
        falls between two arrivals a segment's compute apart, and only a stall starts sooner."""
        return self.within_bar or self.start_s is not None and self.start_s <= self.on_arrival_s + 1e-6


def sim_settings(rtf: float, chunk_ms: int = 100, **changes: Any) -> Settings:
    """A gateway whose fake engine computes one call at a time at ``rtf`` (``chunk_ms`` per chunk:
    a chunk longer than any segment makes each segment arrive whole, as the exact vocoder)."""
    return load_settings(
        env={},
        overrides={
            "engine": "fake",
            "speed_warmup_text": "",
            "fake_rtf": rtf,
            "fake_workers": 1,
            "fake_chunk_ms": chunk_ms,
            "cache_mb": 0.0,
            **changes,
        },
    )


class Engine:
    """One fake engine and its hub on the running (virtual-time) loop."""

    def __init__(self, settings: Settings, engine: FakeEngine | None = None) -> None:
        self.settings = settings
        self.engine = engine or FakeEngine(settings)
        self.hub = SynthesisHub(
            self.engine,
            cache_mb=0.0,
            timeout_s=settings.synth_timeout_s,
            settings=settings,
            clock=asyncio.get_running_loop().time,
        )

    async def warm(
        self,
        text: str = "Warming up, not counted. The engine's speed is measured on these two sentences, and a third one.",
    ) -> None:
        await self.listen(text)

    async def listen(
        self, text: str, *, delay_s: float = 0.0, later: bool = False, token_s: float = 0.0, cache: bool = False
    ) -> Heard:
        """A listener asking for ``text`` after ``delay_s``; ``later``: the text comes after
        ``ready`` (a WebSocket's ``text`` messages), a word every ``token_s``; ``cache``: it may
        share identical segments' synthesis (the demo's "Play both")."""
        loop = asyncio.get_running_loop()
        await asyncio.sleep(delay_s)
        fields = {"format": "pcm", "cache": cache, **({} if later else {"text": text})}
        session = StreamSession(
            self.engine, parse_options(fields, self.settings, self.engine), self.settings, hub=self.hub
        )
        t0 = loop.time()
        try:
            session.admit()
        except Overloaded as exc:
            await session.aclose()
            return Heard("refused", retry_after=exc.retry_after)
        ready = session.ready_fields()
        arrivals = [Arrival(0.0, preroll_s=ready["preroll_ms"] / 1000)]
        feeder = asyncio.create_task(self._feed(session, text, token_s if later else 0.0))
        try:
            async for event in session.events():
                t = loop.time() - t0
                if event.type == "audio":
                    arrivals.append(Arrival(t, audio_s=len(event.audio) / 2 / self.engine.sample_rate))
                elif event.type == "sentence":
                    arrivals.append(
                        Arrival(t, preroll_s=event.fields["preroll_ms"] / 1000, start_in_s=start_in(event.fields))
                    )
                elif event.type == "done":
                    arrivals.append(Arrival(t, done=True))
                elif event.type == "error":
                    if event.fields.get("code") != "overloaded":
                        raise RuntimeError(f"the session failed: {event.fields}")
                    return Heard("refused late", ready, retry_after=event.fields.get("retry_after"))
        finally:
            await feeder
            await session.aclose()
        return heard(ready, arrivals)

    @staticmethod
    async def _feed(session: StreamSession, text: str, token_s: float) -> None:
        if not token_s:
            session.push_text(text)
        else:
            for word in text.split():
                session.push_text(word + " ")
                await asyncio.sleep(token_s)
        session.end()


def heard(ready: dict[str, Any], arrivals: Sequence[Arrival]) -> Heard:
    played = simulate(arrivals)
    audio = [(a.t_s, a.audio_s) for a in arrivals if a.audio_s > 0]
    oracle = oracle_start(audio)
    return Heard(
        "queued" if ready.get("queued_ms") else "admitted",
        ready,
        None,
        played.start_s,
        oracle,
        played.stalls,
        played.stall_s,
        played.audio_s,
        tuple(round(a.preroll_s * 1000) for a in arrivals if a.preroll_s is not None),
        min((t for t, _ in audio if t >= oracle - 1e-9), default=oracle),
        tuple(round(a.start_in_s * 1000) for a in arrivals if a.start_in_s is not None),
        tuple(t for t, _ in audio),
    )


async def round_of(engine: Engine, texts: Sequence[str], delays_s: Sequence[float] = (), **listen: Any) -> list[Heard]:
    """Listeners of ``texts`` at once (or each after its delay), to the end of every reply."""
    delays = list(delays_s) + [0.0] * (len(texts) - len(delays_s))
    return list(await asyncio.gather(*(engine.listen(t, delay_s=d, **listen) for t, d in zip(texts, delays))))
