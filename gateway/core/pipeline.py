"""One reply as a pipeline: segmenter -> synthesis -> encoder -> channel.

::

    feed() -> Segmenter --texts--> synthesis stage --ready--> encoder stage --out--> channel
                                   (SynthesisHub)             (one Encoder,         (WebSocket, SSE,
                                                               Packetizer)           container, batch)

Each stage is one task; each link is a queue, and the backpressure is the queues' own:

* ``texts``: segments cut and not yet started. Unbounded on purpose: the text is bounded
  (``max_text_chars``), and the socket reader must never wait, or a ``cancel`` could not pass.
* ``ready``: one entry per segment, put before its synthesis starts, at most ``lookahead`` of
  them (one at least): synthesis runs that many segments ahead of the one being encoded, no
  more, and one after another. An entry is the segment's own queue: its ``sentence`` event,
  then its PCM chunks as the hub yields them (bounded by the segment's length), then ``None``
  (or the exception that ended it). A segment's ``WordTimes`` (engines that give them) come
  before the PCM they describe, each on the segment's own timeline however many there are
  (one per model call, or per clause from a model container); the encoder stage puts them on
  the reply's timeline (the audio encoded before the segment, plus the encoder's lead-in a
  player hears) as a ``words`` event.
* ``out``: events for the channel (``OUT_EVENTS`` at most), which marks each one done once it
  has sent it. A reply's first 100 ms are encoded alone and sent (``out.join()``) before the
  rest of its first chunk is encoded; after that the bound is the backpressure: a client that
  stops reading stops the encoder, which stops taking segments, which stops synthesis (a join
  after every chunk cost 10-15% more CPU per stream at 750 sessions: ``bench.capacity``). The
  first segment makes no extra wait: each hop hands on a single item as soon as it exists.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Callable
from typing import Any

from ..audio.encoders import Encoder
from ..audio.payloads import Packetizer, stream_seconds
from ..audio.resample import reply_encoder
from ..config import Settings
from ..errors import NothingToSpeak
from ..kokoro.timestamps import WordTimes
from ..text.align import display_words
from ..text.frontend import Segment
from .budget import ShareKey, Verdict
from .events import Event, SegmentQueue, error_event
from .heard import Transcript
from .listener import Listener
from .lookahead import wait_ahead
from .membership import BudgetMember
from .options import StreamOptions, reply_frontend
from .synthesis import SynthesisHub


class Pipeline(BudgetMember):
    """One reply. ``feed``/``flush``/``end`` put text in; its events come out of ``out``."""

    def __init__(
        self,
        hub: SynthesisHub,
        settings: Settings,
        options: StreamOptions,
        out: asyncio.Queue[Event],
        *,
        requested: str | None,
        live: bool = True,
        encoder: Callable[[], Encoder] | None = None,
    ) -> None:
        s, o = settings, options
        self.hub, self.settings, self.options, self.out = hub, settings, options, out
        self.sample_rate = hub.engine.sample_rate
        self.frontend = reply_frontend(o, s)
        rate, budget = hub.engine_rate, hub.budget if live else None
        self.listener = Listener(
            rate, s, o, requested=requested, sample_rate=self.sample_rate, live=live, budget=budget, clock=hub.clock
        )
        self.listener.more = lambda: bool(self.pending)
        self.verdict: Verdict | None = None  # the real-time budget's, for a reply that opens a session
        self.current: str | None = None  # the segment being synthesized
        self.planned: list[float] = []  # audio (s) per segment the budget admitted it for
        self.planned_key: ShareKey | None = None  # the share key of the text it was admitted with
        self.texts: asyncio.Queue[Segment | None] = asyncio.Queue()
        self.pending: collections.deque[str] = collections.deque()  # spoken forms in `texts`, for the forecast
        self.segments: dict[int, Segment] = {}  # by index, for its words
        self.ready: asyncio.Queue[SegmentQueue | None] = asyncio.Queue(maxsize=max(1, s.lookahead))
        # the engine's rate in, the client's out (resampled); the timeline stays at the engine's
        self.encoder = (
            encoder()
            if encoder
            else reply_encoder(
                o.format, in_rate=self.sample_rate, out_rate=o.sample_rate or self.sample_rate, bitrate=o.bitrate
            )
        )
        self.packer = Packetizer(
            o.format,
            chunk_bytes=o.chunk_bytes,
            frames_per_payload=s.frames_per_payload,
            sample_rate=self.encoder.sample_rate,
        )
        self.lead_in = self.encoder.delay_samples  # heard before the first sample
        self.transcript = Transcript()  # what the reply said, when; what the listener heard
        self.encoded = 0  # samples given to the encoder so far: the reply's timeline
        self.stream_s: float | None = 0.0  # seconds the encoded stream decodes to (None: not counted)
        self.ended = False
        self.cut = self.segments_done = 0  # segments made by the segmenter / all encoded
        self.t_input: float | None = None  # first input of this reply
        self.stats = {"sentences": 0, "audio_bytes": 0, "payloads": 0}
        self.ttfb_ms: float | None = None
        self.first_segment_ms: float | None = None
        self.tasks: list[asyncio.Task[None]] = [
            asyncio.create_task(self._synthesis_stage()),
            asyncio.create_task(self._encoder_stage()),
        ]

    # -- input: the segmenter -------------------------------------------------------------
    def feed(self, text: str) -> None:
        self.mark_input()
        self._add(self.frontend.feed(text))

    def flush(self) -> None:
        self.mark_input()
        self._add(self.frontend.flush())

    def end(self) -> None:
        self.mark_input()
        self._add(self.frontend.end())
        self.ended = True
        self.texts.put_nowait(None)

    def mark_input(self) -> None:
        if self.t_input is None:
            self.t_input = self.hub.clock()

    def _add(self, pieces: list[Segment]) -> None:
        for piece in pieces:
            if self.first_segment_ms is None:
                self.first_segment_ms = self.elapsed_ms()
            self.pending.append(piece.spoken)
            self.texts.put_nowait(piece)
            self.cut += 1

    @property
    def busy(self) -> bool:
        """Segments are cut and not all encoded yet: the reply is at work."""
        return self.cut > self.segments_done

    def elapsed_ms(self) -> float:
        now = self.hub.clock()
        return round((now - (self.t_input or now)) * 1000, 1)

    # -- synthesis ------------------------------------------------------------------------
    async def _synthesis_stage(self) -> None:
        segment: SegmentQueue | None = None
        try:
            index = 0
            while (text := await self.texts.get()) is not None:
                if index == 0:
                    await self.enter_budget()
                segment = SegmentQueue()
                await self.ready.put(segment)  # waits while `lookahead` segments are queued
                await wait_ahead(self.listener, self.pending)
                self.pending.popleft()
                self.current, self.listener.segment_samples = text.spoken, 0
                await self._synthesize(segment, index, text)
                self.current, segment, index = None, None, index + 1
            self.hub.budget.remove(self)  # nothing more for the engine
            self.listener.learn()
            await self.ready.put(None)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # reaches the channel after the audio made before it
            if segment is None:
                segment = SegmentQueue()
                await self.ready.put(segment)
            segment.put_nowait(exc)

    async def _synthesize(self, segment: SegmentQueue, index: int, piece: Segment) -> None:
        o, listener, text = self.options, self.listener, piece.spoken
        self.segments[index] = piece
        mode = listener.mode_for(text, self._forecast_texts(None))
        preroll = listener.preroll_ms(self._forecast_texts(text), mode, complete=index == 0 and self.ended)
        fields = {"index": index, **piece.fields(), "t_ms": self.elapsed_ms(), "preroll_ms": preroll}
        segment.put_nowait(Event("sentence", fields, start_at=listener.offer))
        silence = self._silence(segment, piece.pause_s)
        if not text:  # a pause and nothing to say after it
            segment.put_nowait(None)
            return
        synth = self.hub.synthesize(
            text,
            voice=o.voice,
            speed=self._speed(piece.rate),
            mode=mode,
            requested_mode=listener.requested or "",
            buffered_s=self._playable_s(),
            waiting=listener.waiting(),
            share=o.cache,
            slot=(listener.deadline(), listener),
        )
        made = 0
        async with contextlib.aclosing(synth) as chunks:
            async for pcm in chunks:
                if isinstance(pcm, bytes):
                    listener.made(len(pcm) // 2)
                    made += len(pcm)
                elif silence:
                    pcm = pcm.shifted(silence)  # the words come after the pause
                segment.put_nowait(pcm)
        if not made and self.hub.metrics is not None:  # letters the voice cannot read: skipped
            self.hub.metrics.skipped.inc()
        segment.put_nowait(None)

    def _speed(self, rate: float) -> float:
        """The request's speed times a segment's own rate (SSML prosody), within the engine's range."""
        caps = self.hub.engine.capabilities
        return min(caps.max_speed, max(caps.min_speed, self.options.speed * rate))

    def _silence(self, segment: SegmentQueue, seconds: float) -> int:
        """Exact silence before a segment's speech (a pause in the text); its length in samples."""
        if samples := round(seconds * self.sample_rate):
            self.listener.made(samples)
            segment.put_nowait(bytes(2 * samples))
        return samples

    def _forecast_texts(self, current: str | None) -> list[str]:
        texts = [current] if current else []
        texts += list(self.pending)
        if not self.ended and (rest := self.frontend.pending):
            texts.append(rest)
        return texts

    # -- encoding ---------------------------------------------------------------------------
    async def _encoder_stage(self) -> None:
        try:
            await self._encode_segments()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await self.out.put(error_event(exc))

    async def _encode_segments(self) -> None:
        index, started = 0, -1
        while (segment := await self.ready.get()) is not None:
            base = self.encoded  # the segment's first sample on the reply's timeline
            while (item := await segment.get()) is not None:
                if isinstance(item, BaseException):
                    await self.out.put(error_event(item))
                    return
                if isinstance(item, Event):  # the segment's `sentence`
                    self.transcript.segment(index, item.fields["text"])
                    if (held := self._held_back_ms()) is not None:
                        item.fields["held_back_ms"] = held
                    self._put_start_in(item, held or 0.0)
                    await self.out.put(item)
                    continue
                if isinstance(item, WordTimes):  # on the segment's timeline, however many come
                    await self.out.put(self._words(item, index, base))
                    continue
                if started < index:  # the segment's first audio: where it starts on the timeline
                    started = index
                    self.transcript.started(index, self._ms(self.encoded))
                await self._encode(item, index)
            self.transcript.complete(index)
            index += 1
            self.segments_done = index
        if not self.listener.samples:  # never a reply that ends without a sound
            await self.out.put(
                error_event(NothingToSpeak("nothing to speak: the text has no letter or digit the voice can read"))
            )
            return
        await self._emit(self.packer.push(self.encoder.flush()) + self.packer.flush(), max(0, index - 1))
        self.stats["sentences"] = index
        await self.out.put(Event("done", self._done_fields()))

    def _put_start_in(self, item: Event, held_back_ms: float) -> None:
        """``start_in_ms``: the offer, later by what the encoder holds back (the model follows)."""
        at = None if item.start_at is None else item.start_at + held_back_ms / 1000
        if at is not None:
            item.fields["start_in_ms"] = max(0, round(1000 * (at - self.listener.clock())))
        self.listener.offer_start(at)

    def _ms(self, samples: int) -> float:
        """A point of the reply's audio as a player plays it, in ms (the encoder's lead-in first)."""
        return round(1000 * (samples + self.lead_in) / self.sample_rate, 1)

    def _words(self, times: WordTimes, index: int, base: int) -> Event:
        words = times.to_ms(base + self.lead_in, self.sample_rate)
        if (piece := self.segments.get(index)) is not None:
            words = display_words(words, piece)  # the client's words, not the spoken form
        self.transcript.words(index, words)
        return Event("words", {"sentence": index, "words": words})

    async def _encode(self, pcm: bytes, index: int) -> None:
        head = self.sample_rate // 10 * 2  # 100 ms of s16 samples
        if self.ttfb_ms is None and len(pcm) > 2 * head:
            # a reply's first 100 ms go out before the rest of its first chunk is encoded
            # (a whole sentence takes 10-20 ms to encode: bench overhead)
            self.encoded += head // 2
            await self._emit(self.packer.push(self._counted(self.encoder.encode(pcm[:head]))), index)
            await self.out.join()
            pcm = pcm[head:]
        self.encoded += len(pcm) // 2
        await self._emit(self.packer.push(self._counted(self.encoder.encode(pcm))), index)

    def _counted(self, data: bytes) -> bytes:
        """What the encoder returned, its decoded length counted for ``held_back_ms``."""
        if self.stream_s is not None and data:
            got = stream_seconds(self.encoder.format, data, self.encoder.sample_rate)
            self.stream_s = None if got is None else self.stream_s + got
        return data

    def _held_back_ms(self) -> float | None:
        """Audio made that the client's stream does not carry yet: the encoder holds it (MP3:
        LAME's look-ahead and a partial frame, 80-127 ms at 24 kHz) until the next audio comes.
        A player told to hold all the audio made so far counts it as held (the next `sentence`
        follows a segment's last audio), or it would wait for the next segment."""
        if self.stream_s is None:
            return None
        made = (self.encoded + self.lead_in) / self.sample_rate  # the stream starts with the lead-in
        return round(max(0.0, made - self.stream_s) * 1000, 1)

    def _playable_s(self) -> float:
        """What the player can play before the next segment's audio: the audio made it has not heard,
        less what the encoder holds back until that audio (MP3: 80-127 ms). Told all of it, the engine
        let a player started on "Hello!" run dry: 36-66 ms to spare in Chromium, 121-219 ms gaps in CI."""
        return max(0.0, self.listener.buffered_s() - (self._held_back_ms() or 0.0) / 1000)

    async def _emit(self, payloads: list[bytes], sentence: int) -> None:
        end_ms = self._ms(self.encoded)
        for payload in payloads:
            if self.ttfb_ms is None:
                self.ttfb_ms = self.elapsed_ms()
                self.listener.first_audio()
            fields = {"seq": self.stats["payloads"], "sentence": sentence, "t_ms": self.elapsed_ms()}
            self.stats["payloads"] += 1
            self.stats["audio_bytes"] += len(payload)
            await self.out.put(Event("audio", fields, payload, end_ms=end_ms))

    def _done_fields(self) -> dict[str, Any]:
        st = self.stats
        return {
            "sentences": st["sentences"],
            "audio_ms": round(self.listener.samples / self.sample_rate * 1000, 1),
            "audio_bytes": st["audio_bytes"],
            "payloads": st["payloads"],
            "ttfb_ms": self.ttfb_ms,
            "first_segment_ms": self.first_segment_ms,
            "total_ms": self.elapsed_ms(),
        }

    async def stop(self, *, but: asyncio.Task[Any] | None = None) -> None:
        """Stop every stage (the hub stops an engine call nobody else follows); ``but``: a
        task of the pipeline's that stops the others and goes on (an agent turn that failed)."""
        self.hub.budget.remove(self)
        tasks = [task for task in self.tasks if task is not but]
        for task in tasks:
            task.cancel()
        if not tasks:
            return
        # not `await task` under suppress(CancelledError): that would swallow a cancel of the
        # task calling stop() too (a cancel of the failed agent turn that is stopping the rest)
        await asyncio.wait(tasks)
        for task in tasks:
            if not task.cancelled() and (exc := task.exception()) is not None:
                raise exc
