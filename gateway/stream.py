"""The shared core: text in -> segments -> engine -> encoder -> events out.

Every channel drives a ``StreamSession`` and maps its events to the wire; nothing here knows
about HTTP, SSE or WebSockets. One session may hold several utterances in turn: ``cancel``
(barge-in) drops the current one, queued audio included, and the next input starts afresh.

Pipelining: a producer task synthesizes segments in order and encodes them with ONE encoder
per utterance (so sentences join without gaps), while the channel sends what is ready.
``lookahead`` bounds how many segments may be synthesized ahead of the one being sent, and
the producer waits (one timer per segment) while the listener holds more than ``lookahead_s``
of audio beyond what the next segments are forecast to take.

The engine is reached through the ``SynthesisHub`` (``synthesis.py``): identical segments share
one synthesis, repeats come from its cache, and every call feeds the live speed from which
each segment's vocoder mode, the look-ahead and the ``preroll_ms`` sent to players are sized.
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

from .agent import AGENT_CODES, Agent, AgentError, Conversation
from .audio.encoders import make_encoder
from .config import Settings
from .engines.base import Engine
from .errors import BadRequest, GatewayError
from .metrics import Metrics
from .options import StreamOptions
from .payloads import Packetizer
from .schedule import forecast, preroll_s
from .segmenter import Segmenter, split_text
from .synthesis import SynthesisHub

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Event:
    """One core event. ``fields`` is what JSON carries; ``audio`` holds an audio payload."""

    type: str
    fields: dict[str, Any] = field(default_factory=dict)
    audio: bytes = b""


_SEGMENT_SENT = Event("_segment_sent")  # internal: frees one look-ahead slot
_SWITCH = Event("_switch")  # internal: the utterance was replaced (cancel)
_CLOSE = Event("_close")  # internal: the client ended a conversation between turns
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
        self.pending: collections.deque[str] = collections.deque()  # queued, for the forecast
        self.out: asyncio.Queue[Event] = asyncio.Queue()
        self.slots = asyncio.Semaphore(max(1, s.lookahead + 1))
        self.ended = False
        self.t_created = time.perf_counter()
        self.t_input: float | None = None  # first input of this utterance
        self.stats = {"sentences": 0, "audio_samples": 0, "audio_bytes": 0, "payloads": 0}
        self.ttfb_ms: float | None = None
        self.t_first_audio: float | None = None  # perf_counter of the first audio payload
        self.first_segment_ms: float | None = None
        self.turn = None  # the agent's turn (``agent.Turn``) when this reply answers a prompt
        self.tasks: list[asyncio.Task[None]] = [asyncio.create_task(self._produce())]

    # -- input side ---------------------------------------------------------------------
    def mark_input(self) -> None:
        if self.t_input is None:
            self.t_input = time.perf_counter()

    def add_segments(self, pieces: list[str]) -> None:
        for piece in pieces:
            if self.first_segment_ms is None:
                self.first_segment_ms = self.elapsed_ms()
            self.pending.append(piece)
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
            text = str(text)
            await self.slots.acquire()
            await self._wait_for_listener()
            self.pending.popleft()
            mode = self._mode_for(text)
            self.out.put_nowait(Event("sentence", {"index": index, "text": text, "t_ms": self.elapsed_ms(),
                                                   "preroll_ms": self.preroll_ms(text, mode)}))
            async for pcm in self._synthesize(text, mode):
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

    async def _synthesize(self, text: str, mode: str | None) -> AsyncIterator[bytes]:
        sess = self.session
        o = sess.options
        synth = sess.hub.synthesize(text, voice=o.voice, speed=o.speed, mode=mode,
                                    key_mode=sess.requested_vocoder() or "", buffered_s=self.buffered_s(),
                                    share=o.cache)
        async with contextlib.aclosing(synth) as chunks:
            async for pcm in chunks:
                yield pcm

    # -- scheduling from the engine's live speed ------------------------------------------
    def _mode_for(self, text: str) -> str | None:
        """The vocoder mode for this segment. ``frozen-first`` streams inside a segment only
        when it pays: a segment whose whole synthesis is forecast to finish while the listener
        still has audio goes exact (less compute, exact sound), and so does every segment after
        the first when even streamed synthesis is slower than real time (the player holds a
        preroll then, and the exact path, which costs less, fills it sooner)."""
        requested = self.session.requested_vocoder()
        if requested != "frozen-first":
            return requested
        speed = self.session.hub.speed
        safety = speed.safety(self.session.settings.preroll_safety)
        need = speed.predict("exact", speed.audio_s(text, self.session.options.speed))
        if self.buffered_s() >= safety * need:
            return "exact"
        if self.t_first_audio is not None and self._streaming_too_slow():
            return "exact"
        return requested

    def _streaming_too_slow(self) -> bool:
        speed = self.session.hub.speed
        return speed.rtf("frozen-first") * speed.safety(self.session.settings.preroll_safety) >= 1.0

    def _later_mode(self) -> str | None:
        """The mode a segment after this one is forecast to get."""
        requested = self.session.requested_vocoder()
        if requested == "frozen-first" and self._streaming_too_slow():
            return "exact"
        return requested

    def _forecast_texts(self, current: str | None) -> list[str]:
        texts = [current] if current else []
        texts += list(self.pending)
        if not self.ended and (rest := self.segmenter.pending):
            texts.append(rest)
        return texts

    def preroll_ms(self, current: str | None, mode: str | None) -> int:
        """``preroll_ms`` for a player now: see ``schedule.preroll_s``."""
        texts = self._forecast_texts(current)
        later = self._later_mode()
        modes = [mode if current and k == 0 else later for k in range(len(texts))]
        return self.session.preroll_ms(texts, self.buffered_s(), modes)

    async def _wait_for_listener(self) -> None:
        """Far enough ahead of the listener (``lookahead_s`` beyond what the next segments are
        forecast to take): wait until that is no longer so. One timer per segment."""
        sess = self.session
        horizon = sess.settings.lookahead_s
        if horizon <= 0 or self.t_first_audio is None:
            return
        speed, o = sess.hub.speed, sess.options
        need = sum(speed.predict(sess.requested_vocoder(), speed.audio_s(t, o.speed))
                   for t in list(self.pending)[: max(1, sess.settings.lookahead)])
        excess = self.buffered_s() - horizon - speed.safety(sess.settings.preroll_safety) * need
        if excess > 0:
            await asyncio.sleep(excess)

    def buffered_s(self) -> float:
        """Audio made for the listener that they have not heard yet (0 before the first):
        a player that starts at the first payload and plays in real time. With the option
        ``buffered_s`` (audio the listener held before this reply), that plays first."""
        made = self.stats["audio_samples"] / self.session.engine.sample_rate
        if held := self.session.options.buffered_s:
            return max(0.0, held + made - (time.perf_counter() - self.t_created))
        if self.t_first_audio is None:
            return 0.0
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
        agent: Agent | None = None,
        metrics: Metrics | None = None,
        hub: SynthesisHub | None = None,
    ) -> None:
        self.id = uuid.uuid4().hex[:12]
        self.engine, self.options, self.settings = engine, options, settings
        # without the application's hub: a private one (no cache, no sharing, its own speed)
        self.hub = hub or SynthesisHub(engine, timeout_s=settings.synth_timeout_s, metrics=metrics)
        self.agent, self.metrics = agent, metrics
        self.conversation = Conversation(agent, settings, metrics) if agent is not None else None
        self.multi_turn = False  # the WebSocket: after a prompt's `done`, the next prompt on the same session
        self.closing = False  # `end` came during or after prompt turns: close once the turn is done
        self.outcome = ""  # done | error: how events() ended
        self.utterance = Utterance(self)
        self.finished = False

    def ready_fields(self) -> dict[str, Any]:
        o = self.options
        s = self.settings
        texts = split_text(o.text, first_clause_words=s.first_clause_words if o.first_clause else 0,
                           max_chars=s.max_segment_chars) if o.text.strip() else []
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
            "preroll_ms": self.preroll_ms(texts, 0.0, [self.requested_vocoder()] * len(texts)),
            "cache": o.cache,
            "agent": self.agent.label if self.agent is not None else None,
        }

    def requested_vocoder(self) -> str | None:
        return self.options.vocoder or self.default_vocoder()

    def preroll_ms(self, texts: list[str], held_s: float, modes: list[str | None]) -> int:
        """Audio (ms) a player should hold before it starts or resumes, for ``texts`` still
        to come (each synthesized in its mode of ``modes``) and ``held_s`` of audio it has
        not heard, at the engine's live speed."""
        speed = self.hub.speed
        segments = forecast(texts, modes, speed, self.options.speed)
        return round(1000 * preroll_s(segments, held_s, speed.safety(self.settings.preroll_safety)))

    def default_vocoder(self) -> str | None:
        """The engine's vocoder mode when the request names none (None: the engine has none)."""
        return self.engine.capabilities.default_vocoder

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
        u = self.utterance
        if self.conversation is not None and self.conversation.turns and (u.turn is not None or u.t_input is None):
            self.closing = True  # a conversation: close once the turn in progress (if any) is done
            if u.turn is None:
                u.out.put_nowait(_CLOSE)
            return
        self._end_input(self._open())

    def _end_input(self, u: Utterance) -> None:
        u.add_segments(u.segmenter.flush())
        u.ended = True
        u.segments.put_nowait(_END)

    def push_prompt(self, prompt: str) -> None:
        """A turn: ask the agent for a reply; its tokens feed the segmenter and end the input."""
        if self.conversation is None:
            raise BadRequest("this gateway has no agent source configured", code="no_agent")
        u = self.utterance
        if u.turn is not None or (u.t_input is not None and not u.ended):
            raise BadRequest("a reply is in progress: wait for its done, or send cancel", code="turn_in_progress")
        u = self._open()
        u.turn = turn = self.conversation.start(prompt)
        u.tasks.append(asyncio.create_task(self._run_agent(u, turn)))

    async def _run_agent(self, u: Utterance, turn: Any) -> None:
        try:
            async for token in turn.deltas():
                u.out.put_nowait(Event("text", {"delta": token, "t_ms": u.elapsed_ms()}))
                u.add_segments(u.segmenter.feed(token))
        except AgentError as exc:  # the turn ends here with `error`; a conversation goes on
            u.tasks.remove(asyncio.current_task())  # type: ignore[arg-type]
            await u.stop()
            u.out.put_nowait(Event("error", exc.to_dict()))
            return
        if not u.ended:
            self._end_input(u)

    async def cancel(self) -> None:
        """Barge-in: stop synthesis and sending now; the next input starts a new reply."""
        old, self.utterance = self.utterance, Utterance(self)
        await old.stop()
        if old.turn is not None:
            old.turn.cancel()
        # a reader waiting on the old queue moves on; whoever reads next sees `cancelled` first
        old.out.put_nowait(_SWITCH)
        self.utterance.out.put_nowait(Event("cancelled", {"t_ms": old.elapsed_ms()}))
        if self.closing:
            self.utterance.out.put_nowait(_CLOSE)

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
            if event is _CLOSE:
                self.finished, self.outcome = True, "done"
                return
            if u.turn is not None:
                u.turn.observe(event.type, event.fields)
                if self._next_turn(event):  # before the client hears `done`: its next prompt is a new turn
                    self.utterance = Utterance(self)
                    yield event
                    continue
            yield event
            if event.type in ("done", "error"):
                self.finished, self.outcome = True, event.type
                return

    def _next_turn(self, event: Event) -> bool:
        """A conversation goes on after a turn's `done` or agent error, until the client ends it."""
        ended = event.type == "done" or (event.type == "error" and event.fields.get("code") in AGENT_CODES)
        return ended and self.multi_turn and not self.closing
