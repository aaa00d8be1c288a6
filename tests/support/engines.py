"""Fake-engine subclasses that tests share (real subclasses, not mocks)."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.engines.fake import FakeEngine


class SlowLoadingEngine(FakeEngine):
    """The fake engine, with a start() that waits until the test sets ``loaded``: a GPU engine
    still loading when the first client comes."""

    def __init__(self, settings: Any) -> None:
        super().__init__(settings)
        self.loaded = asyncio.Event()

    async def start(self) -> None:
        await self.loaded.wait()
        await super().start()
