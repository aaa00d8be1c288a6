"""``POST /v1/audio/speech``, compatible with OpenAI's speech API and its SDK.

- ``model``: ``tts-1``, ``tts-1-hd``, ``gpt-4o-mini-tts`` or ``kokoro``; all run the gateway's
  engine (optional here, as the gateway has one model).
- ``voice``: a Kokoro voice id, a blend (``af_bella(2)+af_sky(1)``), or one of OpenAI's names
  (``voicecatalog.OPENAI_VOICES``: alloy -> af_alloy, coral -> af_heart, ...).
- ``instructions``: accepted and ignored (Kokoro takes no style prompt).
- ``response_format``: mp3 (CBR, a LAME Info frame in front when whole), opus (Ogg Opus),
  aac (ADTS), flac, wav, pcm (s16le 24 kHz mono).
- ``speed``: OpenAI's 0.25-4.0, clamped to the engine's 0.5-2.0; the response header
  ``X-Speed-Applied`` says what was used.
- ``stream``: true sends the audio with chunked transfer as each sentence is synthesized;
  the default returns it whole. ``stream_format`` ``audio`` is accepted; ``sse`` is not offered.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
from dataclasses import dataclass
from typing import Any, Mapping

from aiohttp import web

from .audio.containers import CONTAINERS, ContainerEncoder, encode_whole
from .audio.encoders import CONTENT_TYPES, Encoder, encode_all, make_encoder
from .audio.info import add_info_frame
from . import batch
from .config import Settings
from .engines.base import Engine
from .errors import BadRequest, GatewayError
from .jsonbody import decode_object
from .options import StreamOptions, parse_bool, parse_options
from .speakable import speakable
from .state import GATEWAY, Gateway
from .voicecatalog import OPENAI_VOICES

log = logging.getLogger(__name__)

MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts", "kokoro")
RESPONSE_FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
OPENAI_MIN_SPEED, OPENAI_MAX_SPEED = 0.25, 4.0
# OpenAI's names -> the gateway's encoders ("opus" is Opus in Ogg here, as OpenAI sends it)
_ENCODER_FORMAT = {"opus": "ogg", "aac": "aac", "flac": "flac", "mp3": "mp3", "wav": "wav", "pcm": "pcm"}


@dataclass(frozen=True, slots=True)
class SpeechRequest:
    options: StreamOptions  # voice resolved, speed clamped
    response_format: str
    stream: bool

    @property
    def content_type(self) -> str:
        fmt = _ENCODER_FORMAT[self.response_format]
        return CONTAINERS[fmt][2] if fmt in CONTAINERS else CONTENT_TYPES[fmt]


def _string(body: Mapping[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise BadRequest(f"`{name}` must be a string", code="invalid_option")
    return value


def _voice(body: Mapping[str, Any], engine: Engine) -> str | None:
    voice = _string(body, "voice")
    if not voice:
        return None
    if voice in {v.id for v in engine.voices}:
        return voice
    return OPENAI_VOICES.get(voice.strip().lower(), voice)


def _speed(body: Mapping[str, Any], engine: Engine) -> float:
    raw = body.get("speed", 1.0)
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or raw != raw:
        raise BadRequest(f"`speed` must be a number, got {raw!r}", code="invalid_option")
    if not OPENAI_MIN_SPEED <= raw <= OPENAI_MAX_SPEED:
        raise BadRequest(f"`speed` must be between {OPENAI_MIN_SPEED} and {OPENAI_MAX_SPEED}, "
                         f"got {raw}", code="invalid_speed")
    caps = engine.capabilities
    return min(caps.max_speed, max(caps.min_speed, float(raw)))  # what the engine can do


def parse_speech(body: Any, settings: Settings, engine: Engine) -> SpeechRequest:
    """Validate an OpenAI speech request; ``BadRequest`` naming the field and what is allowed."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object", code="invalid_json")
    text = body.get("input")
    if not isinstance(text, str) or not text.strip():
        raise BadRequest("`input` must be a non-empty string", code="empty_input")
    if not speakable(text):  # decided before synthesis: never a 200 without audio
        raise BadRequest("`input` has nothing to speak: no letter or digit, only punctuation, "
                         "symbols, emoji or control characters", code="nothing_to_speak")
    model = _string(body, "model")
    if model is not None and model not in MODELS:
        raise BadRequest(f"unknown model {model!r}; choose one of {', '.join(MODELS)} "
                         "(all run Kokoro-82M)", code="unknown_model")
    _string(body, "instructions")  # accepted, ignored: Kokoro takes no style prompt
    fmt = (_string(body, "response_format") or "mp3").lower()
    if fmt not in RESPONSE_FORMATS:
        raise BadRequest(f"unknown response_format {fmt!r}; choose one of "
                         f"{', '.join(RESPONSE_FORMATS)}", code="unknown_format")
    if (stream_format := _string(body, "stream_format")) not in (None, "audio"):
        raise BadRequest("stream_format must be 'audio' (raw audio, chunked); 'sse' is not "
                         "offered here: use /v1/stream/sse", code="invalid_option")
    fields = {"text": text, "voice": _voice(body, engine), "speed": _speed(body, engine), "format": "pcm"}
    for name in ("bitrate", "vocoder", "cache"):  # the gateway's own options, as on the other routes
        if name in body:
            fields[name] = body[name]
    options = parse_options(fields, settings, engine)
    stream = parse_bool(body.get("stream", False), "stream")
    return SpeechRequest(options, fmt, stream)


def _encoder(fmt: str, options: StreamOptions, sample_rate: int) -> Encoder:
    if fmt in CONTAINERS:
        return ContainerEncoder(fmt, sample_rate=sample_rate, bitrate=options.bitrate)
    return make_encoder(fmt, sample_rate=sample_rate, bitrate=options.bitrate)


def encode_reply(req: SpeechRequest, pcm: bytes, sample_rate: int) -> bytes:
    """A whole reply in its response format (MP3 with its Info frame)."""
    fmt, bitrate = _ENCODER_FORMAT[req.response_format], req.options.bitrate
    if fmt in CONTAINERS:
        return encode_whole(fmt, pcm, sample_rate=sample_rate, bitrate=bitrate)
    audio = encode_all(fmt, pcm, sample_rate=sample_rate, bitrate=bitrate)
    if fmt == "mp3" and audio:
        audio = add_info_frame(audio, len(pcm) // 2)
    return audio


async def _stream(request: web.Request, req: SpeechRequest, gw: Gateway,
                  headers: dict[str, str]) -> web.StreamResponse:
    """Each sentence's audio written as soon as it is encoded (chunked transfer), from the
    same pipeline as the streaming channels: a listener's schedule, shared synthesis, the cache."""
    response = web.StreamResponse(headers=headers)
    response.enable_chunked_encoding()
    await response.prepare(request)
    fmt = _ENCODER_FORMAT[req.response_format]
    options = dataclasses.replace(req.options, format=fmt)  # the packetizer cuts by this format
    audio = batch.drain(gw.hub, options, gw.settings, live=True,
                        encoder=lambda: _encoder(fmt, req.options, gw.engine.sample_rate))
    try:
        async with contextlib.aclosing(audio) as payloads:
            async for data in payloads:
                await response.write(data)
    except GatewayError as exc:
        # the status is sent: end the connection without the last chunk, so the client sees
        # a truncated reply rather than a short one that looks whole
        log.warning("streamed speech failed after the headers: %s", exc.message)
        if request.transport is not None:
            request.transport.abort()
        return response
    await response.write_eof()
    return response


async def speech(request: web.Request) -> web.StreamResponse:
    gw = request.app[GATEWAY]
    body = decode_object(await request.read())
    await gw.wait_ready()  # voices are known once the engine has loaded
    req = parse_speech(body, gw.settings, gw.engine)
    headers = {"Content-Type": req.content_type, "X-Speed-Applied": f"{req.options.speed:g}",
               "X-Voice": req.options.voice}
    if req.stream:
        return await _stream(request, req, gw, headers)
    pcm = await batch.synthesize_pcm(gw.hub, req.options, gw.settings)
    return web.Response(body=encode_reply(req, pcm, gw.engine.sample_rate), headers=headers)
