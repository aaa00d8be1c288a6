"""A client's session: text, prompts and control in; the events of its replies out.

Every channel drives a ``StreamSession`` and maps its events to the wire; nothing here knows
about HTTP, SSE or WebSockets. The reply itself runs as a ``Pipeline`` (``pipeline.py``:
segmenter -> synthesis -> encoder -> the session's ``out`` queue). One session may hold several
replies in turn: ``cancel`` (barge-in) stops the current pipeline, drops the audio queued for
the channel, and the next input starts a fresh one on the same ``out``.

The engine is reached through the ``SynthesisHub`` (``synthesis.py``): identical segments share
one synthesis, repeats come from its cache, and every call feeds the engine's live rate from which
each segment's vocoder mode, the look-ahead and the ``preroll_ms`` sent to players are sized.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import AsyncIterator
from typing import Any

from ..agent import Agent, AgentError
from ..config import Settings
from ..engines.base import Engine
from ..errors import BadRequest, Overloaded
from ..metrics import Metrics
from .budget import ADMIT, Verdict, planned, share_key
from .conversation import AGENT_CODES, Conversation, Turn
from .events import OUT_EVENTS, Event
from .options import StreamOptions, reply_frontend
from .pipeline import Pipeline
from .synthesis import SynthesisHub

__all__ = ["Event", "StreamSession"]

_CLOSE = Event("_close")  # internal: the client ended a conversation between turns


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
        # without the application's hub: a private one (no cache, no sharing, its own engine rate)
        self.hub = hub or SynthesisHub(engine, timeout_s=settings.synth_timeout_s, metrics=metrics)
        self.agent, self.metrics = agent, metrics
        self.conversation = Conversation(agent, settings, metrics) if agent is not None else None
        self.multi_turn = False  # the WebSocket: after a prompt's `done`, the next prompt on the same session
        self.closing = False  # `end` came during or after prompt turns: close once the turn is done
        self.outcome = ""  # done | error: how events() ended
        self.out: asyncio.Queue[Event] = asyncio.Queue(maxsize=OUT_EVENTS)
        self.pipeline = self._pipeline()
        self.turn: Turn | None = None  # the agent's turn when the current reply answers a prompt
        self.finished = False
        self._spoken: list[str] | None = None  # options.text's segments as said (``_texts``)

    def _pipeline(self) -> Pipeline:
        return Pipeline(self.hub, self.settings, self.options, self.out, requested=self.requested_vocoder())

    def _texts(self) -> list[str]:
        """The spoken forms of ``options.text``'s segments (bad markup raises ``invalid_markup``
        here, before any response starts); read once, for admission and ``ready``."""
        if self._spoken is None:
            self._spoken = self._read_text()
        return self._spoken

    def _read_text(self) -> list[str]:
        if not self.options.text.strip():
            return []
        frontend = reply_frontend(self.options, self.settings)
        return [seg.spoken for seg in frontend.feed(self.options.text) + frontend.end() if seg.spoken]

    def admit(self) -> None:
        """The engine's real-time budget on this session (``budget.py``): admitted now, queued
        (``ready.queued_ms``), or ``Overloaded`` with the forecast wait as its ``retry_after``."""
        o, texts, mode = self.options, self._texts(), self.requested_vocoder()
        audio = planned([self.hub.engine_rate.audio_s(t, o.speed) for t in texts])
        key = share_key(o.voice, o.speed, mode, texts, o.cache)  # "Play both": one reply's work
        final = bool(texts or o.prompt.strip())  # else its text comes after `start`
        try:
            verdict, deferred = self.hub.budget.admit(audio, mode, key, tentative=not final), False
        except Overloaded as exc:
            if final:
                raise
            # its text comes after `start`: a nominal reply does not fit, its own text may (or
            # it may be a twin of an admitted reply): decided when that text comes
            verdict, deferred = Verdict(math.inf, math.inf, exc.retry_after), True
        self.pipeline.admitted(verdict, audio, key, deferred)

    def ready_fields(self) -> dict[str, Any]:
        o, s = self.options, self.settings
        texts = self._texts()
        listener = self.pipeline.listener
        shared = listener.shared_preroll_s(texts) if texts else None
        if shared is not None:
            preroll = round(1000 * shared)
        else:
            modes = [self.requested_vocoder()] * len(texts)
            preroll = self.hub.engine_rate.preroll_ms(s.preroll_safety, o.speed, texts, 0.0, modes)
        listener.tell(preroll / 1000)
        return {
            "session": self.id,
            "format": o.format,
            "sample_rate": o.sample_rate or self.engine.sample_rate,  # what is sent (resampled)
            "bitrate": o.bitrate if o.format == "mp3" else None,
            "voice": o.voice,
            "speed": o.speed,
            "chunking": o.chunking,
            "engine": self.engine.name,
            "vocoder": self.requested_vocoder(),
            "preroll_ms": preroll,
            **(self.pipeline.verdict or ADMIT).to_fields(),  # queued_ms: the forecast wait
            **({"admission": "on_text"} if self.pipeline.deferred else {}),  # decided on its first text
            "cache": o.cache,
            "agent": self.agent.label if self.agent is not None else None,
        }

    @property
    def busy(self) -> bool:
        """A reply is in progress: segments at work, an agent turn streaming, events unsent."""
        return self.pipeline.busy or self.turn is not None or not self.out.empty()

    def requested_vocoder(self) -> str | None:
        return self.engine.capabilities.vocoder_for(self.options.vocoder)

    # -- input --------------------------------------------------------------------------
    def _open(self) -> Pipeline:
        if self.pipeline.ended:
            raise BadRequest("input already ended; send cancel to start a new reply", code="input_ended")
        return self.pipeline

    def push_text(self, text: str) -> None:
        self._open().feed(text)

    def flush(self) -> None:
        self._open().flush()

    def end(self) -> None:
        p = self.pipeline
        if self.conversation is not None and self.conversation.turns and (self.turn is not None or p.t_input is None):
            self.closing = True  # a conversation: close once the turn in progress (if any) is done
            if self.turn is None:
                self.out.put_nowait(_CLOSE)
            return
        self._open().end()

    def push_prompt(self, prompt: str) -> None:
        """A turn: ask the agent for a reply; its tokens feed the segmenter and end the input."""
        if self.conversation is None:
            raise BadRequest("this gateway has no agent source configured", code="no_agent")
        p = self.pipeline
        if self.turn is not None or (p.t_input is not None and not p.ended):
            raise BadRequest("a reply is in progress: wait for its done, or send cancel", code="turn_in_progress")
        p = self._open()
        p.mark_input()  # the reply is timed from the prompt
        self.turn = turn = self.conversation.start(prompt, p.transcript)
        p.tasks.append(asyncio.create_task(self._run_agent(p, turn)))

    def speak_options(self, *, whole: bool) -> None:
        """The options' own input: their ``prompt`` as the first turn (it wins over ``text``, as
        on SSE), else their ``text``, flushed (``whole``: as the whole reply, ended)."""
        o = self.options
        if o.prompt.strip():
            self.push_prompt(o.prompt)
        elif o.text.strip():
            self.push_text(o.text)
            if whole:
                self.end()
            else:
                self.flush()

    async def _run_agent(self, p: Pipeline, turn: Turn) -> None:
        try:
            async for token in turn.deltas():
                await self.out.put(Event("text", {"delta": token, "t_ms": p.elapsed_ms()}))
                p.feed(token)
            if not p.ended:
                p.end()
        except (AgentError, BadRequest) as exc:  # the turn ends here with `error`; a conversation goes on
            # (BadRequest: the agent wrote control markup that cannot be read, `invalid_markup`).
            # This task stays among the pipeline's: a cancel meanwhile stops it, error and all
            # (nothing of a cancelled turn may follow its `cancelled`)
            await p.stop(but=asyncio.current_task())
            await self.out.put(Event("error", exc.to_dict()))

    async def cancel(self, played_ms: float | None = None) -> None:
        """Barge-in: stop synthesis and sending now; the next input starts a new reply.
        ``cancelled`` says what the listener heard: the reply's text up to the last word that
        started before ``played_ms`` (their playback position), else what was sent."""
        old, turn = self.pipeline, self.turn
        await old.stop()
        while not self.out.empty():  # queued audio is dropped, never sent
            self.out.get_nowait()
            self.out.task_done()
        heard = old.transcript.heard(played_ms)
        if turn is not None:
            turn.cancel(heard)
        self._next_reply()
        self.out.put_nowait(Event("cancelled", {"t_ms": old.elapsed_ms(), "played_ms": played_ms, "heard_text": heard}))
        if self.closing:
            self.out.put_nowait(_CLOSE)

    def _next_reply(self) -> None:
        self.pipeline, self.turn = self._pipeline(), None

    async def aclose(self) -> None:
        await self.pipeline.stop()

    # -- output -------------------------------------------------------------------------
    async def events(self) -> AsyncIterator[Event]:
        """Events in order until ``done`` or ``error`` (in a conversation: until it is closed);
        each is marked done (``task_done``) once the channel asks for the next, that is once it
        has sent it."""
        while True:
            event = await self.out.get()
            if event is _CLOSE:
                self.out.task_done()
                self.finished, self.outcome = True, "done"
                return
            next_turn = False
            if event.type == "audio":
                self.pipeline.transcript.sent(event.end_ms)
            if self.turn is not None:
                self.turn.observe(event.type, event.fields)
                next_turn = self._next_turn(event)
                if next_turn:  # before the client hears `done`: its next prompt is a new turn
                    self._next_reply()
            yield event
            self.out.task_done()
            if not next_turn and event.type in ("done", "error"):
                self.finished, self.outcome = True, event.type
                return

    def _next_turn(self, event: Event) -> bool:
        """A conversation goes on after a turn's `done` or agent error, until the client ends it."""
        ended = event.type == "done" or (event.type == "error" and event.fields.get("code") in AGENT_CODES)
        return ended and self.multi_turn and not self.closing
