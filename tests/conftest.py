"""Shared fixtures: real gateways on loopback ports, real clients, no mocks."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import aiohttp
import pytest
from aiohttp import web

from bench.servers import free_port, serve_gateway
from gateway.config import Settings, load_settings
from gateway.engines.base import Engine
from gateway.web.state import GATEWAY

if TYPE_CHECKING:
    from gateway.engines.embedded import EmbeddedEngine

__all__ = ["Server", "embedded_engine", "embedded_gateway", "fake_settings", "free_port"]

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a stray hub call fails at once


@dataclass
class Server:
    url: str
    app: web.Application
    settings: Settings

    @property
    def engine(self) -> Engine:
        return self.app[GATEWAY].engine

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://") + "/v1/stream/ws"


def fake_settings(**overrides: object) -> Settings:
    return load_settings(env={}, overrides={"engine": "fake", "speed_warmup_text": "", **overrides})


@pytest.fixture(autouse=True)
def restore_log_levels() -> Iterator[None]:
    """A benchmark's main run in-process (bench ttfb, clients, ...) quiets the access log and
    the gateway's logger for its table; put them back, or every later test that reads the
    access log at INFO sees nothing."""
    names = ("aiohttp.access", "gateway", "bench")
    levels = {name: logging.getLogger(name).level for name in names}
    yield
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


@pytest.fixture
async def start_server() -> AsyncIterator[Callable[..., Awaitable[Server]]]:
    """Start a real gateway on a free loopback port: ``await start_server(settings)``. Its engine
    may have failed to load (``server.app[GATEWAY].load_error``): tests of that failure use it."""
    async with contextlib.AsyncExitStack() as stack:

        async def start(settings: Settings | None = None, engine: Engine | None = None) -> Server:
            settings = settings or fake_settings()
            url, app = await stack.enter_async_context(serve_gateway(settings, engine, require_engine=False))
            return Server(url, app, settings)

        yield start


@contextlib.asynccontextmanager
async def embedded_gateway(**overrides: object) -> AsyncIterator[tuple[str, web.Application]]:
    """A gateway on the real embedded engine (loaded, or the test fails): its URL and app."""
    async with serve_gateway(load_settings(env={}, overrides={"engine": "embedded", **overrides})) as served:
        yield served


@contextlib.asynccontextmanager
async def embedded_engine(settings: Settings) -> AsyncIterator[EmbeddedEngine]:
    """The real embedded engine, started with ``settings`` and closed after."""
    from gateway.engines.embedded import EmbeddedEngine

    engine = EmbeddedEngine(settings)
    await engine.start()
    try:
        yield engine
    finally:
        await engine.aclose()


@pytest.fixture
async def fake_server(start_server: Callable[..., Awaitable[Server]]) -> Server:
    return await start_server()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session
