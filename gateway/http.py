"""Plain HTTP routes: health, readiness, metrics, voices, the demo page and batch synthesis."""
from __future__ import annotations

import json

from aiohttp import web

from .audio.encoders import CONTENT_TYPES
from .batch import synthesize_batch
from .errors import BadRequest
from .options import parse_options
from .state import GATEWAY


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    body = {"ready": gw.ready.is_set() and not gw.load_error, "engine": gw.engine.name}
    if gw.load_error:
        body["error"] = gw.load_error
    body["speed"] = gw.hub.speed.snapshot()  # the engine's live RTF per vocoder mode
    body["cache"] = {"segments": len(gw.hub.cache), "bytes": gw.hub.cache_bytes,
                     "limit_bytes": gw.hub.cache_limit, "in_flight": len(gw.hub.flights)}
    if (vocoder := getattr(gw.engine, "vocoder_status", None)) is not None:
        body["vocoder"] = vocoder  # streaming inside a segment: builds after readiness
    return web.json_response(body, status=200 if body["ready"] else 503)


async def metrics(request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    return web.Response(body=gw.metrics.render(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


async def voices(request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    await gw.wait_ready()
    return web.json_response({
        "engine": gw.engine.name,
        "default": gw.settings.default_voice or gw.engine.default_voice,
        "voices": [v.to_dict() for v in gw.engine.voices],
        "vocoder_modes": list(gw.engine.vocoder_modes),  # streaming inside a segment, if any
    })


async def index(request: web.Request) -> web.FileResponse:
    gw = request.app[GATEWAY]
    return web.FileResponse(f"{gw.settings.static_dir}/index.html")


async def speech(request: web.Request) -> web.Response:
    """OpenAI-compatible ``POST /v1/audio/speech``: ``model``, ``input``, ``voice``, ``response_format``, ``speed``."""
    gw = request.app[GATEWAY]
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise BadRequest("the body must be a JSON object", code="invalid_json") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object", code="invalid_json")
    text = body.get("input")
    if not isinstance(text, str) or not text.strip():
        raise BadRequest("`input` must be a non-empty string", code="empty_input")
    fields = {**body, "text": text, "format": body.get("response_format") or body.get("format")}
    fields.pop("chunking", None)
    await gw.wait_ready()  # voices are known once the engine has loaded
    options = parse_options(fields, gw.settings, gw.engine)
    audio = await synthesize_batch(gw.engine, options, gw.settings)
    return web.Response(body=audio, headers={"Content-Type": CONTENT_TYPES[options.format]})
