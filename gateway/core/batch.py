"""Batch synthesis: the whole reply synthesized, then returned in one piece.

It drains the same pipeline as the streaming channels (``pipeline.py``), through the same hub
(shared flights, the cache, the engine rate, one engine timeout), with nobody listening yet: no
waits for a listener, no first-clause cut, and the exact vocoder (nobody hears anything before
the end: streaming inside a segment would only add compute). ``POST /v1/audio/speech``
(OpenAI-compatible, also with ``stream: true``), the model container's ``POST /invocations``
and ``run_gateway.py synth`` use it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncGenerator, Callable

from ..audio.encoders import Encoder
from ..config import Settings
from .events import OUT_EVENTS, Event
from .options import StreamOptions
from .pipeline import Pipeline
from .synthesis import SynthesisHub


async def drain(
    hub: SynthesisHub,
    options: StreamOptions,
    settings: Settings,
    *,
    live: bool = False,
    encoder: Callable[[], Encoder] | None = None,
) -> AsyncGenerator[bytes, None]:
    """The audio payloads of ``options.text`` in order, as the pipeline makes them. ``live``:
    someone listens as they come (the schedule of a streaming session). Raises the
    ``GatewayError`` that ended the reply; leaving early stops the synthesis."""
    vocoder = hub.engine.capabilities.vocoder_for(options.vocoder, live=live)
    if not live:
        options = dataclasses.replace(options, first_clause=False)
    out: asyncio.Queue[Event] = asyncio.Queue(maxsize=OUT_EVENTS)
    pipeline = Pipeline(
        hub, settings, dataclasses.replace(options, chunk_bytes=0), out, requested=vocoder, live=live, encoder=encoder
    )
    try:
        pipeline.feed(options.text)
        pipeline.end()
        while (event := await out.get()).type != "done":
            out.task_done()
            if event.cause is not None:
                raise event.cause
            if event.type == "audio":
                yield event.audio
    finally:
        await pipeline.stop()


async def synthesize(hub: SynthesisHub, options: StreamOptions, settings: Settings) -> bytes:
    """The encoded audio of the whole text in ``options.format`` (one encoder, so segments
    join without gaps)."""
    return b"".join([payload async for payload in drain(hub, options, settings)])


async def synthesize_pcm(hub: SynthesisHub, options: StreamOptions, settings: Settings) -> bytes:
    """All segments of ``options.text`` in order, as one s16le PCM buffer."""
    return await synthesize(hub, dataclasses.replace(options, format="pcm"), settings)
