"""The shared core: text in -> segments -> engine -> encoder -> events out.

Every channel drives a ``StreamSession`` and maps its events to the wire; nothing here knows
about HTTP, SSE or WebSockets. One session may hold several utterances in turn: ``cancel``
(barge-in) drops the current one, queued audio included, and the next input starts afresh.

Pipelining: a producer task synthesizes segments in order and encodes them with ONE encoder
per utterance (so sentences join without gaps), while the channel sends what is ready.
``lookahead`` bounds how many segments may be synthesized ahead of the one being sent.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

from .agent import SimulatedAgent
from .audio.encoders import make_encoder
from .config import Settings
from .engines.base import Engine
from .errors import BadRequest, EngineTimeout, GatewayError
from .metrics import Metrics
from .options import StreamOptions
from .payloads import Packetizer
from .segmenter import Segmenter

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Event:
    """One core event. ``fields`` is what JSON carries; ``audio`` holds an audio payload."""

    type: str
    fields: dict[str, Any] = field(default_factory=dict)
    audio: bytes = b""


_SEGMENT_SENT = Event("_segment_sent")  # internal: frees one look-ahead slot
_SWITCH = Event("_switch")  # internal: the utterance was replaced (cancel)
_END = object()


class Utterance:
    """One reply: its segmenter, encoder, producer task and event queue."""

    def __init__(self, session: "StreamSession") -> None:
        s, o = session.settings, session.options
        self.session = session
        self.segmenter = Segmenter(
            first_clause_words=s.first_clause_words if o.first_clause else 0,
            max_chars=s.max_segment_chars,
        )
        self.segments: asyncio.Queue[object] = asyncio.Queue()
        self.out: asyncio.Queue[Event] = asyncio.Queue()
        self.slots = asyncio.Semaphore(max(1, s.lookahead + 1))
        self.ended = False
        self.t_input: float | None = None  # first input of this utterance
        self.stats = {"sentences": 0, "audio_samples": 0, "audio_bytes": 0, "payloads": 0}
        self.ttfb_ms: float | None = None
        self.t_first_audio: float | None = None  # perf_counter of the first audio payload
        self.first_segment_ms: float | None = None
        self.tasks: list[asyncio.Task[None]] = [asyncio.create_task(self._produce())]

    # -- input side ---------------------------------------------------------------------
    def mark_input(self) -> None:
        if self.t_input is None:
            self.t_input = time.perf_counter()

    def add_segments(self, pieces: list[str]) -> None:
        for piece in pieces:
            if self.first_segment_ms is None:
                self.first_segment_ms = self.elapsed_ms()
            self.segments.put_nowait(piece)

    def elapsed_ms(self) -> float:
        return round((time.perf_counter() - (self.t_input or time.perf_counter())) * 1000, 1)

    # -- producer -----------------------------------------------------------------------
    async def _produce(self) -> None:
        sess = self.session
        try:
            await self._produce_segments()
        except asyncio.CancelledError:
            raise
        except GatewayError as exc:
            self.out.put_nowait(Event("error", exc.to_dict()))
        except Exception:
            log.exception("session %s: synthesis failed", sess.id)
            self.out.put_nowait(Event("error", {"code": "internal_error", "message": "synthesis failed"}))

    async def _produce_segments(self) -> None:
        sess, o = self.session, self.session.options
        encoder = make_encoder(o.format, sample_rate=sess.engine.sample_rate, bitrate=o.bitrate)
        packer = Packetizer(o.format, chunk_bytes=o.chunk_bytes, frames_per_payload=sess.settings.frames_per_payload)
        index = 0
        head = sess.engine.sample_rate // 10 * 2  # 100 ms of s16 samples
        while (text := await self.segments.get()) is not _END:
            await self.slots.acquire()
            self.out.put_nowait(Event("sentence", {"index": index, "text": text, "t_ms": self.elapsed_ms()}))
            async for pcm in self._synthesize(str(text)):
                self.stats["audio_samples"] += len(pcm) // 2
                if self.ttfb_ms is None and len(pcm) > 2 * head:
                    # first audio: encode and send its first 100 ms before encoding the rest
                    # (a whole sentence takes 10-20 ms to encode: bench overhead, ws_split)
                    self._emit_audio(packer.push(encoder.encode(pcm[:head])), index)
                    await asyncio.sleep(0)  # the channel sends it now
                    pcm = pcm[head:]
                self._emit_audio(packer.push(encoder.encode(pcm)), index)
                await asyncio.sleep(0)  # let the channel send before the next chunk or segment
            self.out.put_nowait(_SEGMENT_SENT)
            index += 1
        self._emit_audio(packer.push(encoder.flush()) + packer.flush(), max(0, index - 1))
        self.stats["sentences"] = index
        self.out.put_nowait(Event("done", self._done_fields()))

    async def _synthesize(self, text: str) -> AsyncIterator[bytes]:
        sess = self.session
        o, timeout = sess.options, sess.settings.synth_timeout_s
        started = time.perf_counter()
        m = sess.metrics
        if m:
            m.inflight.inc()
        try:
            synth = sess.engine.synthesize(text, voice=o.voice, speed=o.speed, vocoder=o.vocoder or None,
                                           buffered_s=self.buffered_s())
            async with contextlib.aclosing(synth) as chunks:
                while True:
                    try:
                        # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancel
                        # that lands as the chunk arrives, and the producer would run on
                        async with asyncio.timeout(timeout):
                            pcm = await anext(chunks)
                    except StopAsyncIteration:
                        break
                    except TimeoutError:
                        raise EngineTimeout(f"the engine produced no audio for {timeout:g} s") from None
                    yield pcm
        finally:
            if m:
                m.inflight.dec()
                m.segments.inc()
                m.synth_seconds.observe(time.perf_counter() - started)

    def buffered_s(self) -> float:
        """Audio made for the listener that they have not heard yet (0 before the first):
        a player that starts at the first payload and plays in real time."""
        if self.t_first_audio is None:
            return 0.0
        made = self.stats["audio_samples"] / self.session.engine.sample_rate
        return max(0.0, made - (time.perf_counter() - self.t_first_audio))

    def _emit_audio(self, payloads: list[bytes], sentence: int) -> None:
        for payload in payloads:
            if self.ttfb_ms is None:
                self.ttfb_ms = self.elapsed_ms()
                self.t_first_audio = time.perf_counter()
            self.out.put_nowait(
                Event("audio", {"seq": self.stats["payloads"], "sentence": sentence, "t_ms": self.elapsed_ms()}, payload)
            )
            self.stats["payloads"] += 1
            self.stats["audio_bytes"] += len(payload)

    def _done_fields(self) -> dict[str, Any]:
        st = self.stats
        return {
            "sentences": st["sentences"],
            "audio_ms": round(st["audio_samples"] / self.session.engine.sample_rate * 1000, 1),
            "audio_bytes": st["audio_bytes"],
            "payloads": st["payloads"],
            "ttfb_ms": self.ttfb_ms,
            "first_segment_ms": self.first_segment_ms,
            "total_ms": self.elapsed_ms(),
        }

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        while not self.out.empty():  # queued audio is dropped, never sent
            self.out.get_nowait()


class StreamSession:
    """A client's session: feed it text, prompts and control; iterate ``events()``."""

    def __init__(
        self,
        engine: Engine,
        options: StreamOptions,
        settings: Settings,
        *,
        agent: SimulatedAgent | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.id = uuid.uuid4().hex[:12]
        self.engine, self.options, self.settings = engine, options, settings
        self.agent, self.metrics = agent, metrics
        self.utterance = Utterance(self)
        self.finished = False

    def ready_fields(self) -> dict[str, Any]:
        o = self.options
        return {
            "session": self.id,
            "format": o.format,
            "sample_rate": self.engine.sample_rate,
            "bitrate": o.bitrate if o.format == "mp3" else None,
            "voice": o.voice,
            "speed": o.speed,
            "chunking": o.chunking,
            "engine": self.engine.name,
            "vocoder": o.vocoder or self.default_vocoder(),
        }

    def default_vocoder(self) -> str | None:
        """The engine's vocoder mode when the request names none (None: the engine has none)."""
        if not self.engine.vocoder_modes:
            return None
        return self.settings.embedded_vocoder

    # -- input --------------------------------------------------------------------------
    def _open(self) -> Utterance:
        u = self.utterance
        if u.ended:
            raise BadRequest("input already ended; send cancel to start a new reply", code="input_ended")
        u.mark_input()
        return u

    def push_text(self, text: str) -> None:
        u = self._open()
        u.add_segments(u.segmenter.feed(text))

    def flush(self) -> None:
        u = self._open()
        u.add_segments(u.segmenter.flush())

    def end(self) -> None:
        u = self._open()
        u.add_segments(u.segmenter.flush())
        u.ended = True
        u.segments.put_nowait(_END)

    def push_prompt(self, prompt: str) -> None:
        """Ask the agent for a reply; its tokens feed the segmenter and end the input."""
        if self.agent is None:
            raise BadRequest("this gateway has no agent source configured", code="no_agent")
        u = self._open()
        u.tasks.append(asyncio.create_task(self._run_agent(u, self.agent, prompt)))

    async def _run_agent(self, u: Utterance, agent: SimulatedAgent, prompt: str) -> None:
        async for token in agent.stream(prompt):
            u.out.put_nowait(Event("text", {"delta": token, "t_ms": u.elapsed_ms()}))
            u.add_segments(u.segmenter.feed(token))
        if not u.ended:
            self.end()

    async def cancel(self) -> None:
        """Barge-in: stop synthesis and sending now; the next input starts a new reply."""
        old, self.utterance = self.utterance, Utterance(self)
        await old.stop()
        # a reader waiting on the old queue moves on; whoever reads next sees `cancelled` first
        old.out.put_nowait(_SWITCH)
        self.utterance.out.put_nowait(Event("cancelled", {"t_ms": old.elapsed_ms()}))

    async def aclose(self) -> None:
        await self.utterance.stop()

    # -- output -------------------------------------------------------------------------
    async def events(self) -> AsyncIterator[Event]:
        """Events in order until ``done`` or ``error``. Internal markers never leave here."""
        while True:
            u = self.utterance
            event = await u.out.get()
            if event is _SEGMENT_SENT:
                u.slots.release()
                continue
            if event is _SWITCH:
                continue
            yield event
            if event.type in ("done", "error"):
                self.finished = True
                return
