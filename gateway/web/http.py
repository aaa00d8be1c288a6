"""Plain HTTP routes: health, readiness, metrics, voices, the demo page and batch synthesis."""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from .state import GATEWAY


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    body = {
        "ready": gw.ready.is_set() and not gw.load_error,
        "engine": gw.engine.name,
        "agent": {"backend": gw.agent.backend, "label": gw.agent.label},
    }  # who answers `prompt`
    if gw.load_error:
        body["error"] = gw.load_error
    # the engine's live RTF per vocoder mode (``speed``: its older name, kept for probes)
    body["engine_rate"] = body["speed"] = gw.hub.engine_rate.snapshot()
    body["budget"] = gw.hub.budget.snapshot()  # load in engine-seconds per second, queue
    body["cache"] = {
        "segments": len(gw.hub.cache),
        "bytes": gw.hub.cache_bytes,
        "limit_bytes": gw.hub.cache_limit,
        "in_flight": len(gw.hub.flights),
    }
    if (vocoder := gw.engine.vocoder_status) is not None:
        body["vocoder"] = vocoder  # streaming inside a segment: builds after readiness
    if (batching := gw.engine.batching) is not None:
        body["batching"] = batching  # the torch engine: sessions' pieces per forward pass
    return web.json_response(body, status=200 if body["ready"] else 503)


async def metrics(request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    budget = gw.hub.budget
    gw.metrics.load.set(budget.load())
    gw.metrics.backlog.set(budget.backlog_s())
    for kind, count in gw.engine.work.items():
        gw.metrics.engine_work.labels(kind).set(count)
    return web.Response(body=gw.metrics.render(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


async def voices(request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    await gw.wait_ready()
    return web.json_response(
        {
            "engine": gw.engine.name,
            "default": gw.settings.default_voice or gw.engine.default_voice,
            "voices": [v.to_dict() for v in gw.engine.voices],
            "vocoder_modes": list(gw.engine.vocoder_modes),  # streaming inside a segment, if any
            "default_vocoder": gw.engine.capabilities.default_vocoder,
            "timestamps": gw.engine.capabilities.timestamps,  # `words` events on the channels
            # the embedded and torch engines: which voice packs are in use (store or fallback)
            **({"store": store} if (store := gw.engine.voice_store) else {}),
        }
    )


async def index(request: web.Request) -> web.FileResponse:
    gw = request.app[GATEWAY]
    return web.FileResponse(f"{gw.settings.static_dir}/index.html")


async def static(request: web.Request) -> web.FileResponse:
    """A file of the demo page. aiohttp's own static route answers a missing file with an empty
    404 decided after the middleware has run; this one raises, so the 404 is JSON like the rest."""
    root = Path(request.app[GATEWAY].settings.static_dir).resolve()
    path = (root / request.match_info["name"]).resolve()
    if not path.is_relative_to(root) or not path.is_file():
        raise web.HTTPNotFound()
    return web.FileResponse(path)
