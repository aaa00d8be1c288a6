"""Servers on loopback for tests and benchmarks: a free port, an aiohttp app served in this
process, and a whole gateway served in this process with its engine loaded.

The one place that starts an in-process server, so every test and benchmark serves an app the
way ``run_gateway.py`` does (``handler_cancellation`` on: a client that goes away cancels its
handler) and cleans it up on the way out, even when the body raises.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from gateway.config import Settings
    from gateway.engines.base import Engine

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def serve_app(app: web.Application, port: int | None = None) -> AsyncIterator[str]:
    """Serve ``app`` on ``port`` (default: a free one) on loopback; yields its base URL. The
    runner is the product's (JSON parser errors, the redacting access log with WebSocket lines)."""
    from gateway.web.httperrors import GatewayRunner

    runner = GatewayRunner(app, handler_cancellation=True)
    await runner.setup()
    try:
        port = port or free_port()
        await web.TCPSite(runner, LOOPBACK, port).start()
        yield f"http://{LOOPBACK}:{port}"
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def serve_gateway(
    settings: Settings, engine: Engine | None = None, *, require_engine: bool = True
) -> AsyncIterator[tuple[str, web.Application]]:
    """A real gateway in this process, once its engine has loaded (or failed to): yields its
    base URL and app. ``require_engine`` raises when the engine failed to load, so a run never
    measures or tests a gateway that answers every request with an error."""
    from gateway.web.app import make_app
    from gateway.web.state import GATEWAY

    app = make_app(settings, engine)
    async with serve_app(app) as url:
        gw = app[GATEWAY]
        await gw.ready.wait()
        if require_engine and gw.load_error:
            raise RuntimeError(f"engine {settings.engine} failed to load: {gw.load_error}")
        yield url, app
