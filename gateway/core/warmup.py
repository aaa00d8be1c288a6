"""Start-up work that places the first reply as well as the next: a warm-up reply per mode.

The first reply after start-up used to be forecast with a margin from a fixed rule (a prior
overrun of 30%: a stretch of 1.6 on the compute), since the margins (``margins.py``) are learned
only from replies' arrivals; near real time that asked its player to hold seconds of audio the
arrivals never needed (1.9 s against an oracle of 0.7 s on a quiet machine). So before the
gateway says it is ready, it serves itself one short reply per vocoder mode a session can start
with, through the same session core a listener gets (segmenter, forecast, pipeline, encoder):
its calls measure the engine's rate per mode on this machine (cold shapes included, before any
listener pays for them); the later calls' overruns against the fitted line replace the prior
overrun; and what the reply's arrivals needed against its plan bounds the first margin from
below (``EngineRate.settle``; not the learned margin itself: docs/SCHEDULING.md). Never raises:
a warm-up that fails keeps what it measured before the failure.
"""

from __future__ import annotations

import logging
import time

from ..config import Settings
from ..engines.base import Engine
from ..kokoro.vocoder.modes import VocoderMode
from .options import parse_options
from .stream import StreamSession
from .synthesis import SynthesisHub

log = logging.getLogger(__name__)


async def warm_up(hub: SynthesisHub, engine: Engine, settings: Settings, text: str, voice: str) -> None:
    """One warm-up reply of ``text`` per mode a session may start in (whole segments, and
    streamed inside a segment where the engine can). Waits for the engine's background work
    (the streaming vocoder's build) first, so as not to measure it."""
    modes: tuple[str | None, ...] = (None,)
    if engine.vocoder_modes:
        streams = await engine.wait_vocoder(voice)
        modes = (VocoderMode.EXACT, VocoderMode.FROZEN_FIRST) if streams else (VocoderMode.EXACT,)
    rate = hub.engine_rate
    for mode in modes:
        t0 = time.perf_counter()
        try:
            await _reply(hub, engine, settings, text, voice, mode)
        except Exception as exc:  # start-up goes on: the first replies use what was measured
            log.warning("rate warm-up failed (%s); the first requests use what it measured so far", exc)
            break
        log.info(
            "engine rate measured in %.2f s%s: RTF %.3f, the reply needed a stretch of %s",
            time.perf_counter() - t0,
            f" ({mode})" if mode else "",
            rate.rtf(mode),
            rate.margins.snapshot().get(mode or "default"),
        )
    rate.settle()


async def _reply(
    hub: SynthesisHub, engine: Engine, settings: Settings, text: str, voice: str, mode: str | None
) -> None:
    """``text`` spoken to nobody, as a listener's reply: admitted, told its preroll, made to
    the end (its own synthesis: no cache, no sharing)."""
    fields = {"text": text, "voice": voice, "cache": False, "vocoder": mode or ""}
    session = StreamSession(engine, parse_options(fields, settings, engine), settings, hub=hub)
    try:
        session.admit()
        session.ready_fields()
        session.speak_options(whole=True)
        async for event in session.events():  # to its done (or error: then raised)
            if event.type == "error":
                raise RuntimeError(f"{event.fields.get('code')}: {event.fields.get('message')}")
    finally:
        await session.aclose()
