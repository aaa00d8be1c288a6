"""Fake-engine subclasses that tests share (real subclasses, not mocks)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

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


class ModalFake(FakeEngine):
    """The fake engine as an engine with vocoder ``modes`` and a ``default`` of its own, keeping
    what each segment was asked in ``asked``: (vocoder, buffered_s) per ``synthesize``."""

    def __init__(
        self, settings: Any, modes: tuple[str, ...] = ("frozen-first", "frozen", "exact"), default: str = "frozen-first"
    ) -> None:
        super().__init__(settings)
        self.declare(vocoder_modes=modes, default_vocoder=default)
        self.asked: list[tuple[str | None, float]] = []

    def synthesize(
        self,
        text: str,
        *,
        voice: str,
        speed: float,
        vocoder: str | None = None,
        buffered_s: float = 0.0,
        timestamps: bool = False,
    ) -> AsyncIterator[bytes | WordTimes]:
        self.asked.append((vocoder, buffered_s))
        return super().synthesize(text, voice=voice, speed=speed, timestamps=timestamps)
