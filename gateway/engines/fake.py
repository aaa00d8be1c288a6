"""Deterministic tones whose length follows the text: for tests and capacity runs only.

A real engine with knobs for speed (``fake_rtf``), first-chunk delay, injected
failure and hangs, never a mock. Each word becomes 180 ms of a tone whose pitch depends on
the word, followed by 60 ms of silence (both divided by the speed), so duration is
predictable from the text; ``fake_pause_ms`` adds that much silence after the first word of
each segment. Word timestamps are the tones' spans, so the pause shows up in them.

``fake_gate_word`` / ``fake_gate_path``: a segment holding that word waits, before its first
chunk, until that file exists. A test (even one whose gateway is another process) holds a
reply's last segment back, sees its first audio arrive, then creates the file: an event-order
proof of streaming that no timing threshold can give.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import zlib
from collections.abc import AsyncGenerator
from dataclasses import dataclass

import numpy as np

from ..config import Settings, section
from ..errors import EngineError
from ..kokoro.timestamps import Word, WordTimes, words_of
from .base import EngineBase, Voice

WORD_S = 0.18
GAP_S = 0.06


def fake_duration_s(text: str, speed: float = 1.0, pause_ms: float = 0.0) -> float:
    """Seconds of audio the fake engine makes for ``text``: what tests assert against."""
    words = len(text.split())
    return round((words * (WORD_S + GAP_S) / speed + pause_ms / 1000) * 24000) / 24000 if words else 0.0


@dataclass(frozen=True, slots=True)
class FakeSettings:
    """``[fake]``: read by this engine alone (defaults: ``gateway.config.Settings``)."""

    rtf: float  # seconds of compute per second of audio; 0 = instant
    first_delay_ms: float
    fail_after: int  # raise after this many chunks (-1 = never)
    hang: bool
    chunk_ms: int
    pause_ms: float  # silence after each segment's first word
    workers: int  # calls computed at once (0: any number, each at ``rtf``)
    gate_word: str  # a segment holding this word waits until ``gate_path`` exists
    gate_path: str


class FakeEngine(EngineBase):
    name = "fake"
    sample_rate = 24000
    max_concurrency = 4096  # no real compute: capacity runs hold thousands

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings = settings
        self.options = section(settings, "fake", FakeSettings)
        self.calls = 0  # segments started (``work``): cancelled work shows as calls not made
        self.active = 0  # segments in progress right now
        self.unfinished = 0  # segments closed before their last chunk (cancelled, failed or timed out)
        if self.options.workers > 0:  # one engine shared by every call, like a real model
            self.max_concurrency = self.options.workers
        self._workers: asyncio.Semaphore | None = None
        self.declare(
            voices=(
                Voice("tone_a", "en-US", "neutral", "fake 220-440 Hz tones", default=True),
                Voice("tone_b", "en-US", "neutral", "fake 330-660 Hz tones"),
            ),
            default_voice="tone_a",
            timestamps=True,
        )

    async def start(self) -> None:
        return None

    async def aclose(self) -> None:
        return None

    def render(self, text: str, voice: str, speed: float) -> np.ndarray:
        return self.render_timed(text, voice, speed)[0]

    def render_timed(self, text: str, voice: str, speed: float) -> tuple[np.ndarray, WordTimes]:
        """The segment's PCM and its words' spans (each word's tone)."""
        base = 220.0 if voice == "tone_a" else 330.0
        word_n = int(round(WORD_S / speed * self.sample_rate))
        gap = np.zeros(int(round(GAP_S / speed * self.sample_rate)), np.int16)
        pause = np.zeros(int(round(self.options.pause_ms / 1000 * self.sample_rate)), np.int16)
        t = np.arange(word_n) / self.sample_rate
        envelope = np.sin(np.pi * np.arange(word_n) / word_n)  # rises and falls like a syllable
        parts: list[np.ndarray] = []
        words: list[Word] = []
        at = 0
        for k, word in enumerate(text.split()):
            freq = base * (1 + (zlib.crc32(word.encode()) % 100) / 100)
            tone = 0.4 * envelope * np.sin(2 * np.pi * freq * t)
            if written := " ".join(words_of(word)):
                words.append(Word(written, at, at + word_n))
            parts += [(tone * 32767).astype(np.int16), gap, *([pause] if k == 0 and pause.size else [])]
            at += word_n + gap.size + (pause.size if k == 0 else 0)
        pcm = np.concatenate(parts) if parts else np.zeros(0, np.int16)
        return pcm, WordTimes(tuple(words))

    @property
    def work(self) -> dict[str, int]:
        return {"calls": self.calls}

    async def synthesize(
        self,
        text: str,
        *,
        voice: str,
        speed: float,
        vocoder: str | None = None,
        buffered_s: float = 0.0,
        waiting: bool = False,
        timestamps: bool = False,
    ) -> AsyncGenerator[bytes | WordTimes, None]:
        s = self.options
        self.calls += 1
        self.active += 1
        finished = False
        if s.workers > 0 and self._workers is None:
            self._workers = asyncio.Semaphore(s.workers)
        try:
            async with self._workers or contextlib.nullcontext():
                async with contextlib.aclosing(self._compute(text, voice, speed, timestamps)) as items:
                    async for item in items:
                        yield item
            finished = True
        finally:
            self.active -= 1
            if not finished:
                self.unfinished += 1

    async def _compute(
        self, text: str, voice: str, speed: float, timestamps: bool
    ) -> AsyncGenerator[bytes | WordTimes, None]:
        s = self.options
        if s.first_delay_ms:
            await asyncio.sleep(s.first_delay_ms / 1000)
        if s.hang:
            await asyncio.Event().wait()
        if s.gate_word and s.gate_word in text:
            while not os.path.exists(s.gate_path):
                await asyncio.sleep(0.01)
        pcm, words = self.render_timed(text, voice, speed)
        if timestamps and pcm.size:
            yield words
        step = max(1, int(self.sample_rate * s.chunk_ms / 1000))
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        for n, start in enumerate(range(0, len(pcm), step)):
            if 0 <= s.fail_after <= n:
                raise EngineError("fake engine failure injected", code="engine_error")
            chunk = pcm[start : start + step]
            if s.rtf:  # against the clock, so scheduling delays do not add up
                due = t0 + (start + len(chunk)) / self.sample_rate * s.rtf
                await asyncio.sleep(max(0.0, due - loop.time()))
            yield chunk.tobytes()
