"""Per-request options: one validated value type for every channel.

The same names come from a query string (GET), a JSON body (POST) or the WebSocket ``start``
message. This is the one place they are validated, against what the engine declares it can do
(``Engine.capabilities``), with one code per fault: ``unknown_voice``, ``invalid_speed``,
``unknown_format``, ``too_large``, and ``invalid_option`` for the rest (a ``sample_rate`` outside
``SAMPLE_RATES``, or one the format cannot carry, included). ``BadRequest`` carries
the code and a message naming the field and what is allowed, so every edge can turn it into
its own error shape; engines take what passes as given.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..audio.encoders import OPUS_SAMPLE_RATES
from ..audio.g711 import LAWS
from ..audio.mp3 import mp3_bitrates
from ..audio.resample import SAMPLE_RATES
from ..config import Settings
from ..engines.base import Capabilities, Engine
from ..errors import BadRequest, PayloadTooLarge, quoted
from ..kokoro import voicecatalog
from ..text.frontend import TextFrontEnd, TextOptions
from ..text.lexicon import check_entries, load_lexicon
from ..text.markdown import CODE_MODES
from ..text.reader import EMOJI_MODES

FORMATS = ("mp3", "pcm", "wav", "opus", "ulaw", "alaw")
G711_RATE = 8000  # ulaw and alaw unless asked otherwise: the telephone's rate
MP3_BITRATES = (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160)  # MPEG-2 Layer III
ENVELOPES = ("json", "msgpack")


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
    sample_rate: int = 0  # the rate sent (resampled from the engine's); 0: the engine's own
    # the text front-end's switches: markdown, emoji, normalize, markup, code_blocks, pronunciations
    frontend: TextOptions = TextOptions()
    lang: str = "a"  # the language its text is read in (``voicecatalog.text_language``)

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
        number = math.nan if isinstance(value, bool) else float(value)  # JSON true is not 1
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int past a float's range
        number = math.nan
    if number != number:  # not a number, or NaN
        raise BadRequest(f"{name} must be a number, got {quoted(value)}", code="invalid_option")
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
        f"chunking must be 'frames' or 'bytes:N' with 1 <= N <= 1048576, got {quoted(value)}",
        code="invalid_option",
    )


def parse_bool(value: Any, name: str) -> bool:
    text = str(value).strip().lower()
    if text in {"1", "true", "yes", "on"}:
        return True
    if text in {"0", "false", "no", "off"}:
        return False
    raise BadRequest(f"{name} must be true or false, got {quoted(value)}", code="invalid_option")


def check_voice(caps: Capabilities, voice: str) -> str:
    """``voice`` as one of the engine's voice ids, or (where it takes blends) a canonical
    blend id such as ``af_bella(2)+af_sky(1)``; ``unknown_voice`` naming the valid ids if not."""
    known = {v.id for v in caps.voices}
    if caps.blends:
        return voicecatalog.resolve(voice, known)
    if voice not in known:
        raise BadRequest(
            f"unknown voice {quoted(voice)}; choose one of {', '.join(sorted(known))}", code="unknown_voice"
        )
    return voice


def check_speed(caps: Capabilities, speed: float) -> float:
    if not caps.min_speed <= speed <= caps.max_speed:
        raise BadRequest(
            f"speed must be between {caps.min_speed} and {caps.max_speed}, got {speed}", code="invalid_speed"
        )
    return speed


def check_vocoder(caps: Capabilities, engine_name: str, vocoder: str) -> str:
    """A ``vocoder`` mode the engine declares ("" stays "": the engine's default)."""
    if not vocoder:
        return ""
    if not caps.vocoder_modes:
        raise BadRequest(
            f"vocoder: the {engine_name} engine cannot stream inside a sentence "
            "(only the embedded engine with embedded_vocoder on can)",
            code="invalid_option",
        )
    if vocoder not in caps.vocoder_modes:
        raise BadRequest(
            f"vocoder must be one of {', '.join(caps.vocoder_modes)}, got {quoted(vocoder)}", code="invalid_option"
        )
    return vocoder


def parse_options(raw: Mapping[str, Any], settings: Settings, engine: Engine) -> StreamOptions:
    """Validate ``raw`` (query, JSON body or ``start`` message) into ``StreamOptions``."""
    caps = engine.capabilities
    voice = check_voice(caps, str(raw.get("voice") or settings.default_voice or caps.default_voice))
    speed = check_speed(caps, _number(raw, "speed", 1.0))
    fmt = str(raw.get("format") or raw.get("response_format") or settings.default_format).lower()
    if fmt not in FORMATS:
        raise BadRequest(f"unknown format {quoted(fmt)}; choose one of {', '.join(FORMATS)}", code="unknown_format")
    sample_rate = check_sample_rate(raw, fmt, engine.sample_rate)
    bitrate = check_bitrate(raw, fmt, sample_rate, settings.default_bitrate)
    envelope = str(raw.get("envelope") or "json").lower()
    if envelope not in ENVELOPES:
        raise BadRequest(
            f"envelope must be one of {', '.join(ENVELOPES)}, got {quoted(envelope)}", code="invalid_option"
        )
    return StreamOptions(
        vocoder=check_vocoder(caps, engine.name, str(raw.get("vocoder") or "").lower()),
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
        sample_rate=sample_rate,
        frontend=parse_text_options(raw, text_defaults(settings)),
        lang=voicecatalog.text_language(voice, caps.voices),
    )


def _choice(raw: Mapping[str, Any], name: str, default: str, allowed: tuple[str, ...]) -> str:
    value = str(raw.get(name) or default).lower()
    if value not in allowed:
        raise BadRequest(f"{name} must be one of {', '.join(allowed)}, got {quoted(value)}", code="invalid_option")
    return value


def parse_text_options(raw: Mapping[str, Any], defaults: TextOptions) -> TextOptions:
    """The text front-end's request options over the deployment's ``defaults``."""

    def flag(name: str, default: bool) -> bool:
        value = raw.get(name)
        return default if value is None or value == "" else parse_bool(value, name)

    pron = raw.get("pronunciations")
    if isinstance(pron, str) and pron.strip():  # a query string carries it as JSON
        try:
            pron = json.loads(pron)
        except ValueError:
            raise BadRequest("pronunciations must be a JSON object", code="invalid_option") from None
    entries = check_entries(pron, "pronunciations") if pron else {}
    return TextOptions(
        enabled=flag("text_frontend", defaults.enabled),
        markdown=flag("markdown", defaults.markdown),
        emoji=_choice(raw, "emoji", defaults.emoji, EMOJI_MODES),
        normalize=flag("normalize", defaults.normalize),
        markup=flag("markup", defaults.markup),
        code=_choice(raw, "code_blocks", defaults.code, CODE_MODES),
        pronunciations={**defaults.pronunciations, **entries},
    )


def reply_frontend(options: StreamOptions, settings: Settings) -> TextFrontEnd:
    """The text front-end of one reply with ``options`` (the pipeline's; the session's forecast)."""
    return TextFrontEnd(
        options.frontend,
        lang=options.lang,
        first_clause_words=settings.first_clause_words if options.first_clause else 0,
        max_chars=settings.max_segment_chars,
    )


def text_defaults(settings: Settings) -> TextOptions:
    """The deployment's front-end defaults (settings ``text_*`` and ``pronunciations_file``)."""
    return _text_defaults(
        settings.text_frontend,
        settings.text_markdown,
        settings.text_emoji,
        settings.text_normalize,
        settings.text_markup,
        settings.text_code_blocks,
        settings.pronunciations_file,
    )


@functools.lru_cache(maxsize=8)
def _text_defaults(
    enabled: bool, markdown: bool, emoji: str, normalize: bool, markup: bool, code: str, lexicon_file: str
) -> TextOptions:
    entries = load_lexicon(lexicon_file) if lexicon_file else {}
    base = TextOptions(enabled, markdown, emoji, normalize, markup, code, entries)
    return parse_text_options({}, base)  # checks the settings' own values


def check_sample_rate(raw: Mapping[str, Any], fmt: str, engine_rate: int) -> int:
    """The ``sample_rate`` asked for (default: 8000 for G.711, else the engine's), if it is one
    of ``SAMPLE_RATES`` and ``fmt`` can carry it (Opus: 8, 16, 24 or 48 kHz)."""
    default = G711_RATE if fmt in LAWS else engine_rate
    value = raw.get("sample_rate")
    if value is None or value == "":
        return default
    number = _number(raw, "sample_rate", default)
    if isinstance(value, bool) or number not in SAMPLE_RATES:
        raise BadRequest(
            f"sample_rate must be one of {', '.join(map(str, SAMPLE_RATES))} Hz, got {quoted(value)}",
            code="invalid_option",
        )
    if fmt == "opus" and number not in OPUS_SAMPLE_RATES:
        raise BadRequest(
            f"Opus cannot carry {int(number)} Hz; ask for one of "
            f"{', '.join(str(r) for r in OPUS_SAMPLE_RATES if r in SAMPLE_RATES)}",
            code="invalid_option",
        )
    return int(number)


def check_bitrate(raw: Mapping[str, Any], fmt: str, sample_rate: int, default: int) -> int:
    """``bitrate`` (kbps). MP3's depend on the rate (MPEG-1 above 24 kHz, MPEG-2.5 at 8 kHz);
    the other formats take MPEG-2's list, as they always have."""
    bitrate = _number(raw, "bitrate", default)
    allowed = mp3_bitrates(sample_rate) if fmt == "mp3" else MP3_BITRATES
    if bitrate not in allowed:  # 64.0 is 64; 64.9 and inf are not bitrates
        at = f" at {sample_rate} Hz" if fmt == "mp3" else ""
        raise BadRequest(
            f"bitrate{at} must be one of {', '.join(map(str, allowed))} kbps, got {bitrate:g}", code="invalid_option"
        )
    return int(bitrate)


def _buffered(raw: Mapping[str, Any]) -> float:
    value = _number(raw, "buffered_s", 0.0)
    if not 0.0 <= value <= 3600.0:
        raise BadRequest(f"buffered_s must be between 0 and 3600 seconds, got {value}", code="invalid_option")
    return value
