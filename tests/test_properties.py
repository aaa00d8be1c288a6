"""Properties of the gateway's input parsers under generated input (issue 22, item 5).

Each parser is called directly (pure functions, no server): the WebSocket message parser
(``ws_input.parse_message`` + ``validate_message``), the options parsers (``parse_options``,
OpenAI's ``parse_speech``), request bodies, the voice blend parser (``voicecatalog.resolve``),
``heard_text`` (``Transcript.heard``), and what a model container sends the gateway's engine
(events, word times). Whatever comes in is either accepted into a well-typed value in range
or refused with the gateway's own error (``BadRequest`` and a client code from a client,
``EngineError`` from upstream): never another exception (a 500 on HTTP, a dropped socket on
the WebSocket, a reply ended in ``internal_error``). The forwarded-header parser and tokens
have theirs in tests/test_edges.py and tests/test_tokens.py.
"""

from __future__ import annotations

import json
import math

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gateway.audio.encoders import OPUS_SAMPLE_RATES
from gateway.audio.mp3 import mp3_bitrates
from gateway.audio.resample import SAMPLE_RATES
from gateway.core.heard import Transcript
from gateway.core.options import ENVELOPES, FORMATS, MP3_BITRATES, StreamOptions, parse_options
from gateway.engines.container import container_event
from gateway.engines.fake import FakeEngine
from gateway.errors import CLIENT_CODES, BadRequest, GatewayError
from gateway.kokoro import voicecatalog
from gateway.kokoro.timestamps import words_event
from gateway.web.jsonbody import decode_object
from gateway.web.openai_speech import parse_speech
from gateway.web.transports.ws_input import CLIENT_TYPES, parse_message, validate_message

from .conftest import fake_settings

SETTINGS = fake_settings(max_text_chars=60, max_prompt_chars=40)
PLAIN = FakeEngine(SETTINGS)  # two voices, no blends, no vocoder modes
BLENDING = FakeEngine(SETTINGS)  # the same voices, with blends and vocoder modes, as the Kokoro engines
BLENDING.declare(blends=True, vocoder_modes=("exact", "stream"))
KNOWN = {"tone_a", "tone_b"}
FAST = settings(max_examples=150, deadline=None)

# -- generated values -------------------------------------------------------------------------
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.just(10**400)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
numbers_as_text = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-10, 10**6).map(str),
    st.sampled_from(["", " 1 ", "1e400", "-0", "0x10", "1_0", "nan", "inf", "١", "64.9", "True", "1e-400"]),
)
# blend spellings: known and unknown voices, weights written every way, stray spaces and parentheses
weight_texts = st.one_of(
    st.floats(0, 2000, allow_nan=False).map(lambda w: f"{w:g}"),
    st.floats(0, 2000).map(repr),
    st.integers(0, 2000).map(str),
    st.sampled_from(["", ".5", "5.", "1e-5", "2E2", "1e", "e5", "1e400", "1e-400", "-1", "+1", "١", "0x1", " 2 "]),
)
blend_parts = st.builds(
    lambda pad, name, weight: f"{pad}{name}{'' if weight is None else f'({weight})'}{pad}",
    st.sampled_from(["", " ", "\t"]),
    st.sampled_from([*sorted(KNOWN), "tone_c", "tone_a(", ""]),
    st.none() | weight_texts,
)
blend_specs = st.lists(blend_parts, min_size=1, max_size=10).map("+".join) | st.text("tone_ab(1).e+ ", max_size=30)
# a value for each option: what a browser sends, a query string's text, or any JSON at all
OPTIONS = {
    "voice": st.sampled_from(["tone_a", "tone_b", " tone_a ", "tone_c", "+", ""]) | blend_specs,
    "speed": numbers_as_text | st.floats(0.4, 2.1),
    "format": st.sampled_from(["mp3", "PCM", "wav", "opus", "ulaw", "ALAW", "ogg", ""]),
    "sample_rate": numbers_as_text | st.sampled_from([*SAMPLE_RATES, 11025, 96000, "", "24000.0"]),
    "response_format": st.sampled_from(["wav", "flac"]),
    "bitrate": numbers_as_text | st.sampled_from(MP3_BITRATES),
    "chunking": st.sampled_from(
        [
            "frames",
            "FRAMES",
            "bytes:7",
            "bytes:0",
            "bytes:-1",
            "bytes:x",
            "bytes:1048577",
            "bytes:" + "9" * 5000,
            "bytes: 12",
            "",
        ]
    ),
    "envelope": st.sampled_from(["json", "msgpack", "MSGPACK", "xml", ""]),
    "text": st.text(max_size=70),
    "prompt": st.text(max_size=50),
    "first_clause": st.sampled_from(["true", "off", "1", "maybe", ""]),
    "cache": st.sampled_from(["false", "yes", "2"]),
    "vocoder": st.sampled_from(["", "exact", "stream", "Stream", "fast"]),
    "buffered_s": numbers_as_text,
}
option_dicts = st.fixed_dictionaries({}, optional={k: v | json_values for k, v in OPTIONS.items()})
query_strings = st.fixed_dictionaries({}, optional={k: v.map(str) for k, v in OPTIONS.items()})


def check_options(opts: StreamOptions, engine: FakeEngine, fmt: str = "") -> None:
    """Every field of accepted options has its type and is in its range (the bitrate and rate
    for ``fmt``, where the audio is sent in another format than the options')."""
    caps = engine.capabilities
    if "+" in opts.voice:
        assert engine is BLENDING and voicecatalog.resolve(opts.voice, KNOWN) == opts.voice
    else:
        assert opts.voice in KNOWN
    assert type(opts.speed) is float and caps.min_speed <= opts.speed <= caps.max_speed
    assert opts.format in FORMATS and opts.envelope in ENVELOPES
    fmt = fmt or opts.format
    assert type(opts.sample_rate) is int and opts.sample_rate in SAMPLE_RATES
    assert fmt != "opus" or opts.sample_rate in OPUS_SAMPLE_RATES
    assert type(opts.bitrate) is int
    assert opts.bitrate in (mp3_bitrates(opts.sample_rate) if fmt == "mp3" else MP3_BITRATES)
    assert type(opts.chunk_bytes) is int and 0 <= opts.chunk_bytes <= 1 << 20
    assert isinstance(opts.text, str) and len(opts.text) <= SETTINGS.max_text_chars
    assert isinstance(opts.prompt, str) and len(opts.prompt) <= SETTINGS.max_prompt_chars
    assert type(opts.first_clause) is bool and type(opts.cache) is bool
    assert opts.vocoder in ("", *caps.vocoder_modes)
    assert type(opts.buffered_s) is float and 0.0 <= opts.buffered_s <= 3600.0


def as_raw(opts: StreamOptions) -> dict[str, object]:
    """The options spelt as a client would send them again."""
    return {
        "voice": opts.voice,
        "speed": opts.speed,
        "format": opts.format,
        "bitrate": opts.bitrate,
        "chunking": opts.chunking,
        "envelope": opts.envelope,
        "text": opts.text,
        "prompt": opts.prompt,
        "first_clause": opts.first_clause,
        "cache": opts.cache,
        "vocoder": opts.vocoder,
        "buffered_s": opts.buffered_s,
        "sample_rate": opts.sample_rate,
    }


# -- the options parser ------------------------------------------------------------------------
@FAST
@given(raw=option_dicts | query_strings, blends=st.booleans())
@example(raw={"bitrate": float("inf")}, blends=False)  # was OverflowError: a 500, or a dropped socket
@example(raw={"bitrate": "1e400"}, blends=False)
@example(raw={"speed": 10**400}, blends=False)  # was OverflowError (int past a float's range)
@example(raw={"buffered_s": -(10**400)}, blends=False)
@example(raw={"bitrate": 64.9}, blends=False)  # was accepted as 64
@example(raw={"speed": True}, blends=False)  # was accepted as 1.0
def test_options_are_accepted_in_range_or_refused_with_a_client_code(raw: dict, blends: bool) -> None:
    """Any option values (JSON of any type, or a query string's text) give options whose every
    field is typed and in range, or a ``BadRequest`` with a client code; accepted options sent
    again, as JSON or as a query string, give the same options."""
    engine = BLENDING if blends else PLAIN
    try:
        opts = parse_options(raw, SETTINGS, engine)
    except BadRequest as exc:
        assert exc.code in CLIENT_CODES and exc.message, exc.code
        return
    check_options(opts, engine)
    again = as_raw(opts)
    assert parse_options(again, SETTINGS, engine) == opts
    assert parse_options({k: str(v) for k, v in again.items()}, SETTINGS, engine) == opts


speech_bodies = (
    st.fixed_dictionaries(
        {},
        optional={
            "input": st.sampled_from(["Hello there.", "", "  ", "...", "!?"]) | st.text(max_size=30) | json_values,
            "model": st.sampled_from(["tts-1", "kokoro", "gpt-5"]) | json_values,
            "voice": st.sampled_from(["alloy", "coral", "tone_b", "nobody"]) | json_values,
            "response_format": st.sampled_from(["mp3", "aac", "flac", "pcm", "ulaw", "opus", "webm"]) | json_values,
            "sample_rate": st.sampled_from([*SAMPLE_RATES, 12000]) | json_values,
            "speed": st.floats(0.1, 5.0) | json_values,
            "stream": st.sampled_from([True, False, "true", "nope"]) | json_values,
            "stream_format": st.sampled_from(["audio", "sse"]) | json_values,
            "bitrate": json_values,
            "instructions": json_values,
            "cache": json_values,
        },
    )
    | json_values
)


@FAST
@given(body=speech_bodies)
@example(body={"input": "Hi.", "bitrate": 10**400})
def test_openai_speech_bodies_are_accepted_in_range_or_refused(body: object) -> None:
    """OpenAI's speech body (``POST /v1/audio/speech``): any JSON gives a request in range
    (the speed clamped to the engine's) or a ``BadRequest``, never another exception."""
    try:
        req = parse_speech(body, SETTINGS, BLENDING)
    except BadRequest as exc:
        assert exc.code in CLIENT_CODES | {"unknown_model", "invalid_json", "nothing_to_speak"}, exc.code
        return
    check_options(req.options, BLENDING, req.response_format)
    assert isinstance(req.stream, bool) and req.options.text.strip()


# -- the WebSocket message parser -----------------------------------------------------------------
ws_messages = st.fixed_dictionaries(
    {"type": st.sampled_from([*CLIENT_TYPES, "bogus", ""]) | json_values},
    optional={
        "text": st.text(max_size=70) | json_values,
        "prompt": st.text(max_size=50) | json_values,
        "played_ms": st.floats(-1, 2e9) | json_values,
    },
)
ws_frames = st.one_of(
    ws_messages.map(json.dumps),
    json_values.map(json.dumps),
    st.text(max_size=40),
    st.integers(1, 20_000).map(lambda n: "[" * n),
    st.integers(4301, 20_000).map(lambda n: '{"type": "cancel", "played_ms": ' + "1" * n + "}"),
)


@FAST
@given(frame=ws_frames)
@example(frame="[" * 5000)  # was RecursionError: the socket dropped without an answer
@example(frame='{"type": "text", "n": ' + "9" * 4301 + "}")  # was ValueError (Python's int digit limit)
@example(frame='{"type": "cancel", "played_ms": NaN}')
@example(frame='{"type": "cancel", "played_ms": true}')
def test_every_ws_frame_is_a_client_message_or_a_bad_request(frame: str) -> None:
    """Any text frame is a message of a known type whose fields have their types and ranges, or
    a ``BadRequest`` whose code the channel answers with an ``error`` event (``too_large``: and
    a 1009 close); never another exception."""
    try:
        msg = parse_message(frame)
        kind = validate_message(msg, SETTINGS)
    except BadRequest as exc:
        assert exc.code in {"invalid_json", "unknown_type", "invalid_message", "too_large"}, exc.code
        return
    assert kind in CLIENT_TYPES and msg["type"] == kind
    if kind == "text":
        assert isinstance(msg["text"], str) and len(msg["text"]) <= SETTINGS.max_text_chars
    if kind == "prompt":
        assert isinstance(msg["prompt"], str) and msg["prompt"].strip()
        assert len(msg["prompt"]) <= SETTINGS.max_prompt_chars
    played = msg.get("played_ms") if kind == "cancel" else None
    assert played is None or (type(played) in (int, float) and 0 <= played < 1e9)


@FAST
@given(data=st.binary(max_size=40) | st.integers(1, 5000).map(lambda n: b"{" * n))
@example(data=b'{"a": "\xff"}')
def test_every_body_is_a_json_object_or_invalid_json(data: bytes) -> None:
    """Request bodies (SSE POST, speech, tokens, the model container): any bytes."""
    try:
        assert isinstance(decode_object(data), dict)
    except BadRequest as exc:
        assert exc.code == "invalid_json"


# -- the blend parser -------------------------------------------------------------------------------
def normalized(spec: str) -> dict[str, float]:
    blend = voicecatalog.parse_blend(spec, KNOWN)
    return {spec.strip(): 1.0} if blend is None else dict(blend.weights)


@settings(max_examples=300, deadline=None)
@given(spec=blend_specs)
@example(spec="tone_a(0.00005)+tone_b(1)")  # issue 22, finding 11
@example(spec="tone_a(600)+tone_b+tone_a(600)")  # a voice's parts add up past 1000
@example(spec="tone_a" + " " * 200_000 + "x+tone_b")  # the old pattern backtracked over these for minutes
@example(spec="tone_a(" + "1" * 100_000 + "x)+tone_b")  # ... and over these for hours
def test_any_blend_spelling_resolves_to_a_fixed_point_or_is_refused(spec: str) -> None:
    """Any spelling of a blend resolves to a canonical id that resolves to itself and mixes the
    same voices in the same proportions (to the 6 digits the id keeps), weights positive and
    summing to 1; or it is refused as ``unknown_voice`` / ``invalid_option``."""
    try:
        voice = voicecatalog.resolve(spec, KNOWN)
    except BadRequest as exc:
        assert exc.code in ("unknown_voice", "invalid_option"), exc.code
        return
    assert voicecatalog.resolve(voice, KNOWN) == voice
    given_mix, id_mix = normalized(spec), normalized(voice)
    assert given_mix.keys() == id_mix.keys() <= KNOWN
    for name, weight in id_mix.items():
        assert 0 < weight <= 1 and math.isclose(weight, given_mix[name], rel_tol=1e-5)
    assert math.isclose(sum(id_mix.values()), 1.0)


# -- heard_text ---------------------------------------------------------------------------------------
WORDS = st.lists(st.sampled_from(["one", "two,", "three.", "one", "four!", "five?"]), min_size=1, max_size=5)


@st.composite
def transcripts(draw: st.DrawFn) -> tuple[Transcript, list[str]]:
    """A reply as the pipeline records it: segments in order, some that made no audio, words
    known in whole or (for the last one still being made) in part, and the audio sent lagging
    anywhere behind the audio encoded (the rest still queued: a ``cancel`` drops it unsent).
    Returns it and the texts of the segments that made audio."""
    transcript, spoken, at = Transcript(), [], 0.0
    for index in range(draw(st.integers(1, 5))):
        words = draw(WORDS)
        transcript.segment(index, " ".join(words))
        if index and draw(st.booleans()):  # letters the voice cannot read: no audio
            transcript.complete(index)
            continue
        at += draw(st.floats(0, 300))
        transcript.started(index, at)
        spoken.append(" ".join(words))
        known = draw(st.integers(0, len(words)))
        times = sorted(draw(st.lists(st.floats(0, 3000), min_size=known, max_size=known)))
        timed = [{"word": w.strip(",.!?"), "start_ms": at + t} for w, t in zip(words, times)]
        if timed and draw(st.booleans()):  # a word the engine wrote otherwise ("1" for "one"), or blank
            junk = draw(st.sampled_from(["1", " ", "", "\t"]))
            timed.insert(draw(st.integers(0, len(timed))), {"word": junk, "start_ms": timed[0]["start_ms"]})
        cut = draw(st.integers(0, len(timed)))  # the words of one model call, then the next's
        transcript.words(index, timed[:cut])
        transcript.words(index, timed[cut:])
        at += (times[-1] if times else 0.0) + draw(st.floats(1, 500))
        if known < len(words):  # its later words are still being made: nothing after it started
            break
        transcript.complete(index)
    transcript.sent(draw(st.floats(0, at)))
    return transcript, spoken


def encoded_not_sent() -> tuple[Transcript, list[str]]:
    """ "Three." was encoded but never sent (the socket was behind) when the client cancelled
    claiming a later position: it was not heard (it was, before ``played_ms`` was capped)."""
    transcript = Transcript()
    for index, (text, start) in enumerate([("One two.", 0.0), ("Three.", 900.0)]):
        transcript.segment(index, text)
        transcript.started(index, start)
        transcript.complete(index)
    transcript.sent(600.0)
    return transcript, ["One two.", "Three."]


@settings(max_examples=300, deadline=None)
@given(reply=transcripts(), played=st.lists(st.floats(0, 20_000), min_size=1, max_size=5))
@example(reply=encoded_not_sent(), played=[5_000.0])
def test_heard_text_is_a_prefix_of_what_was_sent_and_grows_with_played_ms(reply, played) -> None:
    """For any segments, word times and playback positions (``played_ms``), ``heard_text`` is a
    prefix of the reply's spoken text, never longer than what was sent (a client cannot have
    heard audio it never got, whatever position it claims), and never shrinks as ``played_ms``
    grows."""
    transcript, spoken = reply
    whole, sent = " ".join(spoken), transcript.heard()
    assert whole.startswith(sent)
    previous = ""
    for ms in sorted(played):
        heard = transcript.heard(ms)
        assert sent.startswith(heard), (heard, sent)
        assert heard.startswith(previous), (previous, heard)
        previous = heard
    assert transcript.heard(0.0) == ""


# -- what a model container (or a SageMaker endpoint) sends the gateway's engine -------------------
upstream_events = st.fixed_dictionaries(
    {"type": st.sampled_from(["ready", "words", "done", "error", "audio"]) | scalars},
    optional={
        "sample_rate": st.sampled_from([24000, 16000]) | scalars,
        "message": scalars,
        "code": st.sampled_from(["unknown_voice", "boom"]) | scalars,
    },
).map(json.dumps)


@FAST
@given(frame=upstream_events | ws_frames | st.binary(max_size=30))
@example(frame="[" * 5000)  # was RecursionError out of the engine
def test_any_frame_from_a_model_container_is_an_event_or_an_engine_error(frame: str | bytes) -> None:
    """What a model container (or endpoint) sends the gateway's engine: an event, or a
    ``GatewayError`` (a client code for an option it refused, else an engine error)."""
    try:
        event = container_event(frame, 24000)
    except BadRequest as exc:
        assert exc.code in CLIENT_CODES
    except GatewayError as exc:
        assert exc.status >= 500
    else:
        assert isinstance(event, dict) and event.get("type") != "error"


word_lists = st.lists(
    st.fixed_dictionaries(
        {}, optional={"word": st.text(max_size=8) | json_values, "start_ms": scalars, "end_ms": scalars}
    ),
    max_size=4,
)


@FAST
@given(
    event=st.fixed_dictionaries({"type": st.just("words") | scalars}, optional={"words": word_lists | json_values})
    | json_values.filter(lambda v: isinstance(v, dict))
)
@example(event={"type": "words", "words": [{"word": "hi", "start_ms": float("inf"), "end_ms": 1}]})  # was OverflowError
@example(event={"type": "words", "words": [{"word": " ", "start_ms": 0, "end_ms": 1}]})  # was IndexError in heard
def test_a_words_event_from_upstream_is_word_times_or_dropped(event: dict) -> None:
    """A model container's (or endpoint's) ``words`` event: word times whose every span is in
    order, or None (logged and dropped); and whatever words pass, the transcript takes them."""
    times = words_event(event, 24000)
    if times is None:
        return
    assert all(isinstance(w.word, str) and isinstance(w.start, int) and w.start <= w.end for w in times.words)
    transcript = Transcript()
    transcript.segment(0, "One two, three.")
    transcript.started(0, 0.0)
    transcript.words(0, times.to_ms(0, 24000))
    transcript.sent(1e9)
    assert "One two, three.".startswith(transcript.heard(5_000.0))
