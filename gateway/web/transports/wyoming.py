"""Home Assistant's Wyoming protocol: ``run_gateway.py wyoming [--port 10200]`` (served by
``server.serve_wyoming``).

A thin transport like the others: each request is a ``StreamSession`` (PCM, the engine's rate)
whose events become Wyoming events, audio leaving per sentence as the pipeline makes it.

- ``describe`` -> ``info``: one TTS program with every voice of the engine and its language.
- ``synthesize {text, voice}`` -> ``audio-start``, ``audio-chunk``..., ``audio-stop``.
- Streaming text (``synthesize-start {voice}``, ``synthesize-chunk {text}``...,
  ``synthesize-stop``): chunks feed the segmenter as they come, so a sentence is spoken as soon
  as it is complete; the answer is one ``audio-start``...``audio-stop`` run, then
  ``synthesize-stopped``. The ``synthesize`` a client sends inside a stream (for servers without
  streaming) is ignored there, as wyoming-piper does.
- A voice is chosen by ``name`` (a voice id), else by ``language`` (the first voice that speaks
  it), else the default. Anything wrong (an unknown voice, nothing to speak, an engine failure,
  a full gateway) answers ``error {text, code}`` with the gateway's error code; the connection
  and the server go on serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event as WyomingEvent
from wyoming.info import Attribution, Describe, Info, TtsProgram, TtsVoice
from wyoming.server import AsyncEventHandler
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeStopped, SynthesizeVoice

from ... import __version__
from ...core.stream import Event, StreamSession
from ...errors import BadRequest, GatewayError, quoted
from ..state import Gateway
from .channel import Channel

log = logging.getLogger(__name__)

ATTRIBUTION = Attribution(name="hexgrad (Kokoro-82M)", url="https://github.com/hexgrad/kokoro")


def describe(gw: Gateway) -> Info:
    """Every voice of the engine, with its language, as one TTS program."""
    voices = [
        TtsVoice(
            name=v.id,
            description=v.description or v.name or v.id,
            attribution=ATTRIBUTION,
            installed=True,
            version=None,
            languages=[v.language],
        )
        for v in gw.engine.voices
    ]
    program = TtsProgram(
        name="kokoro-gateway",
        description=f"Streaming Kokoro-82M ({gw.engine.name} engine)",
        attribution=ATTRIBUTION,
        installed=True,
        version=__version__,
        voices=voices,
        supports_synthesize_streaming=True,
    )
    return Info(tts=[program])


def voice_for(gw: Gateway, voice: SynthesizeVoice | None) -> str | None:
    """The voice id a request names (checked later with the others); else a voice of the
    language it names (``en_US``, ``en-US``; ``en`` takes any English one), the default voice
    first where it speaks it; else None for the default."""
    if voice is None or voice.name:
        return voice.name if voice else None
    if not voice.language:
        return None
    wanted = voice.language.replace("_", "-").lower()
    voices = sorted(gw.engine.voices, key=lambda v: not v.default)
    matchers: tuple[Callable[[str], bool], ...] = (
        lambda lang: lang == wanted,
        lambda lang: lang.split("-")[0] == wanted.split("-")[0],
    )
    for same in matchers:
        for candidate in voices:
            if same(candidate.language.lower()):
                return candidate.id
    languages = sorted({v.language for v in gw.engine.voices})
    raise BadRequest(
        f"no voice speaks {quoted(voice.language)}; languages: {', '.join(languages)}", code="unknown_language"
    )


class WyomingChannel(Channel):
    """A session's events as Wyoming events: audio as ``audio-chunk``s of s16le mono PCM."""

    name = "wyoming"

    def __init__(self, gw: Gateway, handler: AsyncEventHandler) -> None:
        super().__init__(gw)
        self.handler = handler
        self.started = False
        self.rate = gw.engine.sample_rate

    async def write(self, event: Event) -> int:
        if event.type == "audio":
            if not self.started:
                self.started = True
                await self.handler.write_event(AudioStart(rate=self.rate, width=2, channels=1).event())
            await self.handler.write_event(AudioChunk(rate=self.rate, width=2, channels=1, audio=event.audio).event())
            return len(event.audio)
        if event.type == "done" and self.started:
            await self.handler.write_event(AudioStop().event())
        elif event.type == "error":
            await self.handler.write_event(Error(text=event.fields["message"], code=event.fields["code"]).event())
        return 0

    async def run(self, session: StreamSession, peer: str) -> None:
        """Send ``session``'s events until it ends; an admission refusal is an ``error`` too."""
        try:
            async with self.gw.admission.session(peer):
                with self.counted():
                    await self.pump(session)
        except GatewayError as exc:
            await self.write(Event("error", exc.to_dict()))
        except ConnectionError:
            log.info("Wyoming client went away during synthesis")
        finally:
            await session.aclose()


class WyomingHandler(AsyncEventHandler):
    """One client connection: its requests, one at a time."""

    def __init__(self, gw: Gateway, info: Info, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gw, self.info = gw, info.event()
        peer = self.writer.get_extra_info("peername")
        self.peer = str(peer[0]) if peer else "?"
        self.streaming = False  # between synthesize-start and synthesize-stop
        self.stream: tuple[StreamSession, asyncio.Task[None]] | None = None  # its session, if it opened

    async def handle_event(self, event: WyomingEvent) -> bool:
        try:
            if Describe.is_type(event.type):
                await self.write_event(self.info)
            elif Synthesize.is_type(event.type) and not self.streaming:
                await self._synthesize(Synthesize.from_event(event))
            elif SynthesizeStart.is_type(event.type):
                await self._start(SynthesizeStart.from_event(event))
            elif SynthesizeChunk.is_type(event.type):
                self._check_streaming()
                if self.stream is not None:  # else its start failed, and said so
                    self.stream[0].push_text(SynthesizeChunk.from_event(event).text)
            elif SynthesizeStop.is_type(event.type):
                await self._stop()
        except GatewayError as exc:
            await self.write_event(Error(text=exc.message, code=exc.code).event())
        return True

    async def _session(self, text: str, voice: SynthesizeVoice | None) -> tuple[WyomingChannel, StreamSession]:
        channel = WyomingChannel(self.gw, self)
        options = await channel.options_for({"text": text, "voice": voice_for(self.gw, voice), "format": "pcm"})
        return channel, channel.new_session(options)

    async def _synthesize(self, request: Synthesize) -> None:
        channel, session = await self._session(request.text, request.voice)
        session.push_text(request.text)
        session.end()
        await channel.run(session, self.peer)

    async def _start(self, request: SynthesizeStart) -> None:
        await self._cancel_stream()  # a new stream replaces one left unfinished
        self.streaming = True
        channel, session = await self._session("", request.voice)
        self.stream = (session, asyncio.create_task(channel.run(session, self.peer)))

    def _check_streaming(self) -> None:
        if not self.streaming:
            raise BadRequest(
                "synthesize-chunk or -stop outside a stream: send synthesize-start first", code="no_stream"
            )

    async def _stop(self) -> None:
        self._check_streaming()
        stream, self.stream, self.streaming = self.stream, None, False
        if stream is not None:
            session, task = stream
            if not session.finished:
                session.end()
            await task
        await self.write_event(SynthesizeStopped().event())

    async def _cancel_stream(self) -> None:
        stream, self.stream, self.streaming = self.stream, None, False
        if stream is not None:
            session, task = stream
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await session.aclose()

    async def disconnect(self) -> None:
        await self._cancel_stream()
