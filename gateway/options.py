"""Per-request options: one validated value type for every channel.

The same names come from a query string (GET), a JSON body (POST) or the WebSocket ``start``
message. Validation raises ``BadRequest`` with a code and a message naming the field and
what is allowed, so every edge can turn it into its own error shape.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .config import Settings
from .engines.base import Engine
from .errors import BadRequest, PayloadTooLarge

FORMATS = ("mp3", "pcm", "wav", "opus")
MP3_BITRATES = (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160)  # MPEG-2 Layer III
ENVELOPES = ("json", "msgpack")
MIN_SPEED, MAX_SPEED = 0.5, 2.0


@dataclass(frozen=True, slots=True)
class StreamOptions:
    voice: str
    speed: float = 1.0
    format: str = "mp3"
    bitrate: int = 64
    chunk_bytes: int = 0  # 0: frame-aligned payloads; N: naive cuts every N bytes (demo only)
    envelope: str = "json"
    text: str = ""
    prompt: str = ""
    first_clause: bool = True  # the first-clause fast path (the bench turns it off to compare)
    vocoder: str = ""  # streaming inside a segment (embedded engine); empty: the engine's setting
    cache: bool = True  # share identical segments in flight and serve repeats from the cache
    # audio the listener already holds and has not heard (a gateway in front of a model
    # container sends it per segment): the schedule counts it as played ahead
    buffered_s: float = 0.0

    @property
    def chunking(self) -> str:
        return f"bytes:{self.chunk_bytes}" if self.chunk_bytes else "frames"


def _text_field(raw: Mapping[str, Any], name: str, limit: int) -> str:
    value = raw.get(name, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadRequest(f"{name} must be a string", code="invalid_option")
    if len(value) > limit:
        raise PayloadTooLarge(f"{name} is {len(value)} characters; the limit is {limit}")
    return value


def _number(raw: Mapping[str, Any], name: str, default: float) -> float:
    value = raw.get(name, default)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise BadRequest(f"{name} must be a number, got {value!r}", code="invalid_option") from None
    if number != number:  # NaN
        raise BadRequest(f"{name} must be a number, got NaN", code="invalid_option")
    return number


def parse_chunking(value: Any) -> int:
    text = str(value or "frames").strip().lower()
    if text == "frames":
        return 0
    if text.startswith("bytes:"):
        try:
            n = int(text[6:])
        except ValueError:
            n = 0
        if 1 <= n <= 1 << 20:
            return n
    raise BadRequest(
        f"chunking must be 'frames' or 'bytes:N' with 1 <= N <= 1048576, got {value!r}",
        code="invalid_option",
    )


def parse_bool(value: Any, name: str) -> bool:
    text = str(value).strip().lower()
    if text in {"1", "true", "yes", "on"}:
        return True
    if text in {"0", "false", "no", "off"}:
        return False
    raise BadRequest(f"{name} must be true or false, got {value!r}", code="invalid_option")


def parse_options(raw: Mapping[str, Any], settings: Settings, engine: Engine) -> StreamOptions:
    """Validate ``raw`` (query, JSON body or ``start`` message) into ``StreamOptions``."""
    voice = str(raw.get("voice") or settings.default_voice or engine.default_voice)
    known = {v.id for v in engine.voices}
    if (check_voice := getattr(engine, "check_voice", None)) is not None:
        voice = check_voice(voice)  # an engine that takes blends (af_bella+af_sky) resolves them
    elif voice not in known:
        raise BadRequest(
            f"unknown voice {voice!r}; choose one of {', '.join(sorted(known))}", code="unknown_voice"
        )
    speed = _number(raw, "speed", 1.0)
    if not MIN_SPEED <= speed <= MAX_SPEED:
        raise BadRequest(f"speed must be between {MIN_SPEED} and {MAX_SPEED}, got {speed}", code="invalid_speed")
    fmt = str(raw.get("format") or raw.get("response_format") or settings.default_format).lower()
    if fmt not in FORMATS:
        raise BadRequest(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}", code="unknown_format")
    bitrate = int(_number(raw, "bitrate", settings.default_bitrate))
    if bitrate not in MP3_BITRATES:
        raise BadRequest(
            f"bitrate must be one of {', '.join(map(str, MP3_BITRATES))} kbps, got {bitrate}",
            code="invalid_option",
        )
    envelope = str(raw.get("envelope") or "json").lower()
    if envelope not in ENVELOPES:
        raise BadRequest(f"envelope must be one of {', '.join(ENVELOPES)}, got {envelope!r}", code="invalid_option")
    vocoder = str(raw.get("vocoder") or "").lower()
    if vocoder:
        modes = engine.vocoder_modes
        if not modes:
            raise BadRequest(
                f"vocoder: the {engine.name} engine cannot stream inside a sentence "
                "(only the embedded engine with embedded_vocoder on can)", code="invalid_option")
        if vocoder not in modes:
            raise BadRequest(f"vocoder must be one of {', '.join(modes)}, got {vocoder!r}", code="invalid_option")
    return StreamOptions(
        vocoder=vocoder,
        voice=voice,
        speed=speed,
        format=fmt,
        bitrate=bitrate,
        chunk_bytes=parse_chunking(raw.get("chunking")),
        envelope=envelope,
        text=_text_field(raw, "text", settings.max_text_chars),
        prompt=_text_field(raw, "prompt", settings.max_prompt_chars),
        first_clause=parse_bool(raw.get("first_clause", True), "first_clause"),
        cache=parse_bool(raw.get("cache", True), "cache"),
        buffered_s=_buffered(raw),
    )


def _buffered(raw: Mapping[str, Any]) -> float:
    value = _number(raw, "buffered_s", 0.0)
    if not 0.0 <= value <= 3600.0:
        raise BadRequest(f"buffered_s must be between 0 and 3600 seconds, got {value}", code="invalid_option")
    return value
