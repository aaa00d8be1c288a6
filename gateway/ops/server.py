"""Serve one application on its port until SIGTERM (or SIGINT), then drain: one process, or
one worker of several (``workers.py``), which shares the port and reports to its supervisor;
or the Wyoming protocol server (``serve_wyoming``)."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable

from aiohttp import web

from ..config import Settings

log = logging.getLogger("gateway")


async def serve(
    settings: Settings,
    app: web.Application,
    *,
    what: str = "gateway",
    worker_ready: Callable[[str, asyncio.Event], None] | None = None,
) -> None:
    """Run ``app`` until SIGINT/SIGTERM; log one line once it listens and its engine is ready.
    A worker (``workers.py``) shares the port and tells ``worker_ready`` instead."""
    from ..web.httperrors import GatewayRunner
    from ..web.state import GATEWAY

    runner = GatewayRunner(app, handler_cancellation=True, shutdown_timeout=10.0)
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port, reuse_port=worker_ready is not None)
    await site.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM,) if worker_ready else (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    gw = app.get(GATEWAY)
    if gw is not None:
        await gw.ready.wait()
    state = f"engine {gw.engine.name} ready" if gw and not gw.load_error else "engine FAILED to load, see above"
    if worker_ready is None:
        log.info("%s listening on http://%s:%d (%s)", what, settings.host, settings.port, state)
    else:
        log.info("%s serving http://%s:%d (%s)", what, settings.host, settings.port, state)
        worker_ready(state, stop)
    try:
        await stop.wait()
        log.info("shutting down: no new sessions; %.0f s for those in flight", settings.shutdown_grace_s)
        await site.stop()  # stop listening at once
        if gw is not None:
            from ..web.app import drain

            await drain(gw, settings.shutdown_grace_s)
    finally:
        await runner.cleanup()
        log.info("stopped")


async def serve_wyoming(settings: Settings, port: int) -> None:
    """Home Assistant's Wyoming protocol (``transports/wyoming.py``) on ``settings.host``:``port``
    once the engine has loaded, until SIGINT/SIGTERM; one line says where it listens."""
    import functools

    from wyoming.server import AsyncTcpServer

    from ..engines import create_engine
    from ..web.app import build_gateway
    from ..web.transports.wyoming import WyomingHandler, describe

    engine = create_engine(settings)
    gw = build_gateway(settings, engine)
    try:
        await engine.start()
    except Exception as exc:
        log.exception("engine %s failed to load", engine.name)
        raise SystemExit(f"engine {engine.name} failed to load: {exc}") from None
    gw.ready.set()
    server = AsyncTcpServer(settings.host, port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await server.start(functools.partial(WyomingHandler, gw, describe(gw)))
        log.info(
            "Wyoming TTS listening on tcp://%s:%d (engine %s ready, %d voices)",
            settings.host,
            port,
            engine.name,
            len(engine.voices),
        )
        await stop.wait()
        log.info("stopping")
    finally:
        await server.stop()
        await engine.aclose()
        await gw.agent.aclose()


def run_loop(main: object) -> None:
    """asyncio.run, on uvloop where it is installed: it cut the gateway's CPU per session by
    15-30% in the capacity runs (docs/CAPACITY.md)."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)  # type: ignore[arg-type]
    else:
        uvloop.run(main)  # type: ignore[arg-type]
