"""Fake-engine subclasses that tests share (real subclasses, not mocks)."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Any

from gateway.engines.base import Voice
from gateway.engines.fake import FakeEngine
from gateway.kokoro.timestamps import WordTimes


class SlowLoadingEngine(FakeEngine):
    """The fake engine, with a start() that waits until the test sets ``loaded``: a GPU engine
    still loading when the first client comes."""

    def __init__(self, settings: Any) -> None:
        super().__init__(settings)
        self.loaded = asyncio.Event()

    async def start(self) -> None:
        await self.loaded.wait()
        await super().start()


class EnglishFake(FakeEngine):
    """The fake engine with one voice named as Kokoro names an American English one (``af_tone``).
    The text front-end takes a reply's language from the voice id's first letter, so the fake's
    own ``tone_a``/``tone_b`` get no English normalization (a phone number stays digits)."""

    def __init__(self, settings: Any) -> None:
        super().__init__(settings)
        self.declare(
            voices=(Voice("af_tone", "en-US", "female", "fake tones, read as American English", default=True),),
            default_voice="af_tone",
        )


class ModalFake(FakeEngine):
    """The fake engine as an engine with vocoder ``modes`` and a ``default`` of its own, keeping
    what each segment was asked in ``asked``: (vocoder, buffered_s) per ``synthesize``, and
    ``waiting`` beside it."""

    def __init__(
        self, settings: Any, modes: tuple[str, ...] = ("frozen-first", "frozen", "exact"), default: str = "frozen-first"
    ) -> None:
        super().__init__(settings)
        self.declare(vocoder_modes=modes, default_vocoder=default)
        self.asked: list[tuple[str | None, float]] = []
        self.waiting: list[bool] = []

    def synthesize(
        self,
        text: str,
        *,
        voice: str,
        speed: float,
        vocoder: str | None = None,
        buffered_s: float = 0.0,
        waiting: bool = False,
        timestamps: bool = False,
    ) -> AsyncIterator[bytes | WordTimes]:
        self.asked.append((vocoder, buffered_s))
        self.waiting.append(waiting)
        return super().synthesize(text, voice=voice, speed=speed, timestamps=timestamps)


class JitteryFake(FakeEngine):
    """The fake engine on a host whose speed varies from call to call: each call computes at
    the next pace of ``paces`` (seconds per audio second), in a cycle."""

    def __init__(self, settings: Any, paces: Sequence[float]) -> None:
        super().__init__(settings)
        self.paces = itertools.cycle(paces)

    def _compute(
        self, text: str, voice: str, speed: float, timestamps: bool
    ) -> AsyncGenerator[bytes | WordTimes, None]:
        self.options = dataclasses.replace(self.options, rtf=next(self.paces))
        return super()._compute(text, voice, speed, timestamps)
