"""Shared fixtures: real gateways on loopback ports, real clients, no mocks."""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web

from gateway.app import make_app
from gateway.config import Settings, load_settings
from gateway.engines.base import Engine
from gateway.state import GATEWAY

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a stray hub call fails at once


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


@pytest.fixture
async def start_server() -> AsyncIterator[Callable[..., Awaitable[Server]]]:
    """Start a real gateway on a free loopback port: ``await start_server(settings)``."""
    runners: list[web.AppRunner] = []

    async def start(settings: Settings | None = None, engine: Engine | None = None) -> Server:
        settings = settings or fake_settings()
        app = make_app(settings, engine)
        runner = web.AppRunner(app, handler_cancellation=True)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        runners.append(runner)
        await app[GATEWAY].ready.wait()
        return Server(f"http://127.0.0.1:{port}", app, settings)

    yield start
    for runner in runners:
        await runner.cleanup()


@pytest.fixture
async def fake_server(start_server: Callable[..., Awaitable[Server]]) -> Server:
    return await start_server()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session
