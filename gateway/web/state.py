"""What the application holds, under one typed ``web.AppKey`` (no module-level state)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Protocol

from aiohttp import web

from ..agent import Agent
from ..config import Settings
from ..core.synthesis import SynthesisHub
from ..engines.base import Engine
from ..errors import NotReady
from ..metrics import Metrics
from .admission import Admission


class OpenChannel(Protocol):
    """An open WebSocket channel, as a shutdown sees it (``transports.ws.WsChannel``)."""

    def between_replies(self) -> bool: ...

    async def close(self, code: int, message: str = "") -> None: ...


@dataclass(slots=True)
class Gateway:
    settings: Settings
    engine: Engine
    metrics: Metrics
    agent: Agent
    admission: Admission
    hub: SynthesisHub
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    channels: set[OpenChannel] = field(default_factory=set)  # open WebSocket channels, for shutdown
    load_error: str | None = None

    async def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait for the engine to load; 503 if it failed or takes too long."""
        if self.load_error:
            raise NotReady(f"engine {self.engine.name} failed to load: {self.load_error}")
        try:
            async with asyncio.timeout(timeout):
                await self.ready.wait()
        except TimeoutError:
            raise NotReady(f"engine {self.engine.name} is still loading; retry shortly") from None
        if self.load_error:
            raise NotReady(f"engine {self.engine.name} failed to load: {self.load_error}")


GATEWAY = web.AppKey("gateway", Gateway)
