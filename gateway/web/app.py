"""``make_app(settings, engine) -> web.Application``: routes, error translation, lifecycle."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Middleware

from ..agent import create_agent
from ..config import Settings
from ..core.synthesis import SynthesisHub
from ..core.warmup import warm_up
from ..engines import create_engine
from ..engines.base import Engine
from ..errors import GatewayError, Overloaded
from ..metrics import Metrics
from . import http
from .admission import Admission
from .httperrors import error_response, http_exception_response, name_server
from .limits import Slots
from .openai_speech import speech
from .proxies import client_middleware, parse_header, parse_trusted
from .security import check_auth
from .state import GATEWAY, Gateway
from .tokens import handle_mint
from .transports.sse import handle_sse
from .transports.ws import handle_ws

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """GatewayError -> its status and JSON body; anything unexpected -> a 500 without details."""
    try:
        check_auth(request, request.app[GATEWAY].settings)
        return await handler(request)
    except GatewayError as exc:
        headers = {"Retry-After": f"{max(1, round(exc.retry_after))}"} if isinstance(exc, Overloaded) else None
        return web.json_response({"error": exc.to_dict()}, status=exc.status, headers=headers)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return http_exception_response(request, exc)
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except HttpProcessingError as exc:  # a body the parser refused (bad chunking, short body)
        return error_response(400, "bad_request", f"malformed request body: {exc.message}")
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return error_response(500, "internal_error", "internal server error")


async def engine_lifecycle(app: web.Application) -> AsyncIterator[None]:
    """A ``cleanup_ctx`` for an app holding a gateway: its engine loads in the background
    (``/readyz`` says when), and the engine and the agent close with the app."""
    gw = app[GATEWAY]
    loader = asyncio.create_task(_load_engine(gw))
    yield
    loader.cancel()
    await asyncio.gather(loader, return_exceptions=True)
    await gw.engine.aclose()
    await gw.agent.aclose()


async def close_idle_upstream(app: web.Application) -> None:
    """``on_shutdown``: close the engine's pooled idle sockets (the container engine's) before
    the handlers are waited for, so that a model container shutting down too is not kept
    waiting for them; a segment in flight keeps its own."""
    await app[GATEWAY].engine.close_idle()


async def _load_engine(gw: Gateway) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        await gw.engine.start()
    except Exception as exc:  # reported on /readyz and to every request as a 503
        log.exception("engine %s failed to load", gw.engine.name)
        gw.load_error = f"{type(exc).__name__}: {exc}"
        gw.ready.set()
        return
    loaded = loop.time()
    log.info("engine %s loaded in %.2f s", gw.engine.name, loaded - started)
    if not gw.settings.startup_before_ready:
        gw.ready.set()
    try:
        built, warmed = await _prepare(gw)
        vocoder = gw.engine.vocoder_status or {}
        # one line with where start-up went (docs/BENCHMARKS.md, bench firstreply)
        log.info(
            "engine %s start-up phases: engine start %.2f s, waiting for the streaming vocoder %.2f s "
            "(its build %s s, beside the engine's start), rate warm-up %.2f s; total %.2f s%s",
            gw.engine.name,
            loaded - started,
            built - loaded,
            vocoder.get("build_s"),
            warmed - built,
            warmed - started,
            "" if gw.ready.is_set() else " before ready",
        )
    finally:
        if not gw.ready.is_set():
            log.info("engine %s ready in %.2f s (start-up work included)", gw.engine.name, loop.time() - started)
        gw.ready.set()


async def _prepare(gw: Gateway) -> tuple[float, float]:
    """The start-up work that makes the first reply as fast as the next: the streaming
    vocoder's build (embedded engine) and one measured call per vocoder mode, so the first
    preroll is forecast from this machine's speed. Never raises. Returns the loop's times at
    which the vocoder was ready and the rate warm-up done."""
    loop = asyncio.get_running_loop()
    voice = gw.settings.default_voice or gw.engine.default_voice
    await gw.engine.wait_vocoder(voice)
    built = loop.time()
    if gw.settings.speed_warmup_text:
        await warm_up(gw.hub, gw.engine, gw.settings, gw.settings.speed_warmup_text, voice)
    return built, loop.time()


def build_gateway(settings: Settings, engine: Engine, *, admit: bool = True, slots: Slots | None = None) -> Gateway:
    """The state one app holds. ``admit=False`` turns admission control off (the model
    container: its pooled sockets live across replies, and SageMaker routes the load).
    ``slots``: the counts its limits hold over (default: this process's; a worker's share of
    its port's, ``limits.SharedLimits``)."""
    metrics = Metrics()
    max_active = settings.max_active_sessions or engine.max_concurrency * 4
    hub = SynthesisHub(
        engine, cache_mb=settings.cache_mb, timeout_s=settings.synth_timeout_s, metrics=metrics, settings=settings
    )
    hub.budget.enabled = admit
    return Gateway(
        hub=hub,
        settings=settings,
        engine=engine,
        metrics=metrics,
        agent=create_agent(settings),
        admission=Admission(
            max_active=max_active if admit else 1 << 30,
            max_queued=settings.max_queued_sessions if admit else 0,
            queue_timeout_s=settings.queue_timeout_s,
            per_client=settings.max_sessions_per_client if admit else 0,
            metrics=metrics,
            slots=slots,
        ),
    )


def make_app(settings: Settings, engine: Engine | None = None, *, slots: Slots | None = None) -> web.Application:
    """Build the gateway. The engine loads in the background; ``/readyz`` says when it is done.
    ``slots``: a worker's share of the admission counts of its port (``build_gateway``)."""
    middlewares: list[Middleware] = [errors_middleware]
    header = parse_header(settings.forwarded_header)
    if trusted := parse_trusted(settings.trusted_proxies):  # the client behind a proxy
        middlewares.append(client_middleware(trusted, header))
    app = web.Application(middlewares=middlewares, client_max_size=1024 * 1024)
    app[GATEWAY] = build_gateway(settings, engine or create_engine(settings), slots=slots)
    app.cleanup_ctx.append(engine_lifecycle)
    app.on_shutdown.append(close_idle_upstream)
    app.on_response_prepare.append(name_server)
    app.router.add_get("/", http.index)
    app.router.add_get("/healthz", http.healthz)
    app.router.add_get("/readyz", http.readyz)
    app.router.add_get("/metrics", http.metrics)
    app.router.add_get("/v1/voices", http.voices)
    app.router.add_post("/v1/tokens", handle_mint)
    app.router.add_post("/v1/audio/speech", speech)
    app.router.add_route("GET", "/v1/stream/sse", handle_sse)
    app.router.add_route("POST", "/v1/stream/sse", handle_sse)
    app.router.add_get("/v1/stream/ws", handle_ws)
    app.router.add_get("/static/{name:.+}", http.static)
    return app


async def drain(gw: Gateway, grace_s: float) -> None:
    """Graceful stop: refuse new sessions, let those in flight finish up to ``grace_s``, then
    close the WebSockets still open with 1001 (going away). A socket kept open between
    replies (the model container's pooled ones) has nothing in flight: it is closed at once,
    or as soon as its reply is done, rather than waited for."""
    from aiohttp import WSCloseCode

    gw.admission.draining = True
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace_s
    while loop.time() < deadline:
        idle = [ch for ch in gw.channels if ch.between_replies()]
        await asyncio.gather(*(ch.close(WSCloseCode.GOING_AWAY, "going_away") for ch in idle), return_exceptions=True)
        if not gw.admission.active and not idle:
            break
        await asyncio.sleep(0.05)
    left = list(gw.channels)
    if left:
        log.info("closing %d sessions still open after %.1f s", len(left), grace_s)
    await asyncio.gather(*(ch.close(WSCloseCode.GOING_AWAY, "going_away") for ch in left), return_exceptions=True)
