"""``POST /v1/audio/speech``, compatible with OpenAI's speech API and its SDK.

- ``model``: ``tts-1``, ``tts-1-hd``, ``gpt-4o-mini-tts`` or ``kokoro``; all run the gateway's
  engine (optional here, as the gateway has one model).
- ``voice``: a Kokoro voice id, a blend (``af_bella(2)+af_sky(1)``), or one of OpenAI's names
  (``voicecatalog.OPENAI_VOICES``: alloy -> af_alloy, coral -> af_heart, ...; the engine's
  default voice where it lacks the mapped one, as the fake engine does).
- ``instructions``: accepted and ignored (Kokoro takes no style prompt).
- ``response_format``: mp3 (CBR, a LAME Info frame in front when whole), opus (Ogg Opus),
  aac (ADTS), flac, wav, pcm (s16le mono), and for telephony ulaw and alaw (G.711, raw).
- ``sample_rate``: one of ``resample.SAMPLE_RATES`` (default: the engine's 24000; 8000 for
  ulaw/alaw), resampled from the engine's; Opus takes 8, 16, 24 or 48 kHz.
- ``speed``: OpenAI's 0.25-4.0, clamped to the engine's 0.5-2.0; the response header
  ``X-Speed-Applied`` says what was used.
- ``stream`` (default true, as OpenAI): the audio leaves with chunked transfer as each sentence
  is encoded (``openai_stream``); false returns the whole file (MP3 with its Info frame, FLAC
  with its length). ``stream_format``: ``audio`` (the default) or ``sse`` (OpenAI's events).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from ..audio.containers import CONTAINERS, ContainerEncoder, encode_whole
from ..audio.encoders import CONTENT_TYPES, Encoder, encode_all, make_encoder
from ..audio.info import add_info_frame
from ..audio.resample import at_rate
from ..config import Settings
from ..core import batch
from ..core.options import StreamOptions, check_bitrate, check_sample_rate, parse_bool, parse_options
from ..engines.base import Engine
from ..errors import BadRequest, quoted
from ..kokoro.voicecatalog import OPENAI_VOICES
from ..text.speakable import speakable
from .jsonbody import decode_object
from .openai_stream import stream_audio, stream_sse, usage
from .state import GATEWAY, Gateway

MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts", "kokoro")
RESPONSE_FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm", "ulaw", "alaw")
STREAM_FORMATS = ("audio", "sse")
OPENAI_MIN_SPEED, OPENAI_MAX_SPEED = 0.25, 4.0
# OpenAI's names -> the gateway's encoders ("opus" is Opus in Ogg here, as OpenAI sends it)
_ENCODER_FORMAT = {
    "opus": "ogg",
    "aac": "aac",
    "flac": "flac",
    "mp3": "mp3",
    "wav": "wav",
    "pcm": "pcm",
    "ulaw": "ulaw",
    "alaw": "alaw",
}


@dataclass(frozen=True, slots=True)
class SpeechRequest:
    options: StreamOptions  # voice resolved, speed clamped, sample_rate set
    response_format: str
    stream: bool
    stream_format: str = "audio"

    @property
    def content_type(self) -> str:
        fmt = _ENCODER_FORMAT[self.response_format]
        if fmt in ("ulaw", "alaw"):
            return f"{CONTENT_TYPES[fmt]};rate={self.options.sample_rate}"
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
    known = {v.id for v in engine.voices}
    if voice in known:
        return voice
    if (mapped := OPENAI_VOICES.get(voice.strip().lower())) is None:
        return voice
    # clients that only know OpenAI's names (Pipecat refuses any other) still speak where
    # the engine lacks the mapped voice (the fake engine, no voice store): its default voice
    return mapped if mapped in known else engine.default_voice


def _speed(body: Mapping[str, Any], engine: Engine) -> float:
    raw = body.get("speed", 1.0)
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or raw != raw:
        raise BadRequest(f"`speed` must be a number, got {quoted(raw)}", code="invalid_option")
    if not OPENAI_MIN_SPEED <= raw <= OPENAI_MAX_SPEED:
        raise BadRequest(
            f"`speed` must be between {OPENAI_MIN_SPEED} and {OPENAI_MAX_SPEED}, got {raw}", code="invalid_speed"
        )
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
        raise BadRequest(
            "`input` has nothing to speak: no letter or digit, only punctuation, symbols, emoji or control characters",
            code="nothing_to_speak",
        )
    model = _string(body, "model")
    if model is not None and model not in MODELS:
        raise BadRequest(
            f"unknown model {quoted(model)}; choose one of {', '.join(MODELS)} (all run Kokoro-82M)",
            code="unknown_model",
        )
    _string(body, "instructions")  # accepted, ignored: Kokoro takes no style prompt
    fmt = (_string(body, "response_format") or "mp3").lower()
    if fmt not in RESPONSE_FORMATS:
        raise BadRequest(
            f"unknown response_format {quoted(fmt)}; choose one of {', '.join(RESPONSE_FORMATS)}", code="unknown_format"
        )
    stream_format = _string(body, "stream_format") or "audio"
    if stream_format not in STREAM_FORMATS:
        raise BadRequest(
            f"stream_format must be 'audio' (chunked audio) or 'sse' (OpenAI's "
            f"speech.audio.delta events), got {quoted(stream_format)}",
            code="invalid_option",
        )
    stream = parse_bool(True if body.get("stream") is None else body["stream"], "stream")
    if stream_format == "sse" and not stream:
        raise BadRequest(
            "stream_format 'sse' always streams: drop `stream: false`, or ask for stream_format 'audio'",
            code="invalid_option",
        )
    fields = {"text": text, "voice": _voice(body, engine), "speed": _speed(body, engine), "format": "pcm"}
    for name in ("vocoder", "cache"):  # the gateway's own options, as on the other routes
        if name in body:
            fields[name] = body[name]
    options = parse_options(fields, settings, engine)
    rate = check_sample_rate(body, fmt, engine.sample_rate)  # "opus" is Opus: the same rates
    bitrate = check_bitrate(body, fmt, rate, settings.default_bitrate)
    options = dataclasses.replace(options, sample_rate=rate, bitrate=bitrate)
    return SpeechRequest(options, fmt, stream, stream_format)


def _encoder(fmt: str, options: StreamOptions) -> Encoder:
    if fmt in CONTAINERS:
        return ContainerEncoder(fmt, sample_rate=options.sample_rate, bitrate=options.bitrate)
    return make_encoder(fmt, sample_rate=options.sample_rate, bitrate=options.bitrate)


def encode_reply(req: SpeechRequest, pcm: bytes) -> bytes:
    """A whole reply (PCM at the request's sample rate) in its response format (MP3 with its
    Info frame)."""
    fmt, bitrate, rate = _ENCODER_FORMAT[req.response_format], req.options.bitrate, req.options.sample_rate
    if fmt in CONTAINERS:
        return encode_whole(fmt, pcm, sample_rate=rate, bitrate=bitrate)
    audio = encode_all(fmt, pcm, sample_rate=rate, bitrate=bitrate)
    if fmt == "mp3" and audio:
        audio = add_info_frame(audio, len(pcm) // 2)
    return audio


def _payloads(req: SpeechRequest, gw: Gateway) -> AsyncGenerator[bytes, None]:
    """The reply's payloads as each is encoded, from the same pipeline as the streaming
    channels (a listener's schedule, shared synthesis, the cache)."""
    fmt = _ENCODER_FORMAT[req.response_format]
    options = dataclasses.replace(req.options, format=fmt)  # the packetizer cuts by this format
    return batch.drain(
        gw.hub,
        options,
        gw.settings,
        live=True,
        encoder=lambda: at_rate(_encoder(fmt, req.options), gw.engine.sample_rate),
    )


async def speech(request: web.Request) -> web.StreamResponse:
    gw = request.app[GATEWAY]
    body = decode_object(await request.read())
    await gw.wait_ready()  # voices are known once the engine has loaded
    req = parse_speech(body, gw.settings, gw.engine)
    headers = {
        "Content-Type": req.content_type,
        "X-Speed-Applied": f"{req.options.speed:g}",
        "X-Voice": req.options.voice,
        "X-Sample-Rate": str(req.options.sample_rate),
    }
    # a session like the channels': queued past the active ones, refused (503 + Retry-After)
    # past the queue, for as long as the audio is being made and, streamed, sent
    async with gw.admission.session(request.remote or "?"):
        if not req.stream:
            pcm = await batch.synthesize_pcm(gw.hub, req.options, gw.settings)
            return web.Response(body=encode_reply(req, pcm), headers=headers)
        async with contextlib.aclosing(_payloads(req, gw)) as payloads:
            if req.stream_format == "sse":
                headers["X-Audio-Content-Type"] = headers.pop("Content-Type")  # what the deltas hold
                return await stream_sse(request, payloads, headers, usage(req.options.text))
            return await stream_audio(request, payloads, headers)
