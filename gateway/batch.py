"""Batch synthesis: the whole reply synthesized, then returned in one piece.

This is the baseline that per-sentence streaming is measured against, and what
``POST /v1/audio/speech`` (OpenAI-compatible) and ``run_gateway.py synth`` use.
"""
from __future__ import annotations

import asyncio
import contextlib

from .audio.encoders import encode_all
from .config import Settings
from .engines.base import Engine
from .errors import EngineTimeout
from .options import StreamOptions
from .segmenter import split_text


async def synthesize_pcm(engine: Engine, options: StreamOptions, settings: Settings) -> bytes:
    """All segments of ``options.text`` in order, as one s16le PCM buffer."""
    pcm = bytearray()
    timeout = settings.synth_timeout_s
    # nobody hears anything before the end: streaming inside a segment would only add compute
    vocoder = options.vocoder or ("exact" if engine.vocoder_modes else None)
    for segment in split_text(options.text, max_chars=settings.max_segment_chars):
        synth = engine.synthesize(segment, voice=options.voice, speed=options.speed, vocoder=vocoder)
        async with contextlib.aclosing(synth) as chunks:
            while True:
                try:
                    async with asyncio.timeout(timeout):  # not wait_for: it can swallow a cancel
                        pcm += await anext(chunks)
                except StopAsyncIteration:
                    break
                except TimeoutError:
                    raise EngineTimeout(f"the engine produced no audio for {timeout:g} s") from None
    return bytes(pcm)


async def synthesize_batch(engine: Engine, options: StreamOptions, settings: Settings) -> bytes:
    """The encoded audio of the whole text (one encoder, so segments join without gaps)."""
    pcm = await synthesize_pcm(engine, options, settings)
    return encode_all(options.format, pcm, sample_rate=engine.sample_rate, bitrate=options.bitrate)
