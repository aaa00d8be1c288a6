"""One frozen ``Settings`` dataclass, read from TOML, then ``GATEWAY_*`` env vars, then the CLI.

TOML tables are flattened: ``[embedded] threads = 2`` sets ``embedded_threads``, which the
environment overrides as ``GATEWAY_EMBEDDED_THREADS=2`` and the command line as
``--set embedded_threads=2`` (the common ones have their own flags: ``--host``, ``--port``,
``--engine``).

Each engine's keys share its prefix (``embedded_``, ``kokoro_``, ``container_``,
``sagemaker_``, ``fake_``) and are read by that engine alone, through its own settings
dataclass (``section``); the core never reads them.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = ROOT / "config" / "default.toml"
ENV_PREFIX = "GATEWAY_"
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Settings:
    # server
    host: str = "127.0.0.1"
    port: int = 8000
    engine: str = "embedded"
    log_level: str = "INFO"
    static_dir: str = str(ROOT / "static")
    # processes serving the port (SO_REUSEPORT): "auto" = 1 for engines that run the model here,
    # one per core for those that proxy it (container, sagemaker); 0 = one per core
    workers: str = "auto"
    trusted_proxies: str = ""  # addresses/CIDRs whose forwarded_header names the client
    # the one header those proxies set: x-forwarded-for (with X-Forwarded-Proto) or forwarded
    # (RFC 7239, for= and proto=); the other is ignored, as a client can send it through them
    forwarded_header: str = "x-forwarded-for"

    # request limits and defaults
    max_text_chars: int = 5000
    max_prompt_chars: int = 2000
    default_voice: str = ""  # empty: the engine's own default
    default_format: str = "mp3"
    default_bitrate: int = 64

    # stream core
    lookahead: int = 2  # sentences synthesized ahead of the one being sent
    frames_per_payload: int = 8  # MP3 frames grouped per payload after the first one
    first_clause_words: int = 2  # fast path: cut the first sentence at a clause mark after N words (0 = off)
    max_segment_chars: int = 300  # longer sentences are split at clause boundaries
    # the text front-end (docs/TEXT.md): each a request option too (text_frontend, markdown,
    # emoji, normalize, markup, code_blocks, pronunciations)
    text_frontend: bool = True  # off: speak the text as given
    text_markdown: bool = True  # markdown removed (links to their text, code blocks per text_code_blocks)
    text_emoji: str = "drop"  # drop | name | keep
    text_normalize: bool = True  # numbers, dates, times, URLs, units, abbreviations as said (English voices)
    text_markup: bool = True  # [pause:0.5s], the SSML subset, misaki's [word](/phonemes/)
    text_code_blocks: str = "notice"  # fenced code: notice ("Code omitted.") | read | skip
    pronunciations_file: str = ""  # a lexicon: JSON or TOML, word -> /phonemes/ or respelling
    synth_timeout_s: float = 30.0  # per segment
    # the producer waits while the listener holds more than this much audio (s) beyond what
    # the next segments are forecast to take at the engine's live rate (0 = never waits)
    lookahead_s: float = 20.0
    # forecasts of compute time are stretched by at least this before sizing preroll_ms and
    # choosing whether a segment can go to the exact vocoder; more when calls have been
    # running over their forecasts (engine_rate.EngineRate.safety): machines are noisy
    preroll_safety: float = 1.15
    # identical segments share one synthesis; finished ones are kept (PCM, LRU) up to this size
    cache_mb: float = 64.0
    # spoken at start-up as a reply to nobody, once per vocoder mode (core/warmup.py), before the
    # first listener arrives: measures the engine's speed and its calls' overruns (so several
    # segments of different lengths; the first long enough to stream inside it, so that the
    # streaming mode is measured streaming); empty: the first requests use a prior of real
    # time and a prior overrun
    speed_warmup_text: str = (
        "This sentence measures how fast the engine speaks on this machine. Hello. And its forecast."
    )
    # finish start-up work (the streaming vocoder's build, the speed warm-up) before saying
    # ready, so that the first listener neither shares the cores with it nor waits behind it;
    # false: say ready once the model is loaded and do that work in the background (faster
    # to ready, a slower first reply: docs/BENCHMARKS.md, "First reply and Play both")
    startup_before_ready: bool = True

    # embedded engine (Kokoro-82M int8 ONNX on onnxruntime)
    embedded_threads: int = 2  # intra-op threads per inference
    embedded_workers: int = 1  # concurrent inferences (1 gives the lowest latency)
    embedded_g2p: str = "misaki"  # misaki (spaCy POS + espeak fallback) or espeak
    # the Kokoro voice packs (npm kokoro-js, installed by `make run`); empty: the user cache dir
    voice_store: str = ""
    # the vocoder inside a segment: frozen-first (stream the start of a segment the listener
    # waits for, exact model for the rest), frozen, exact (whole segments), off (don't build it)
    embedded_vocoder: str = "frozen-first"
    embedded_vocoder_cache: str = ""  # per-voice statistics cache; empty: ~/.cache/kokoro-gateway
    # segments whose audio (silence trimmed) is shorter than this go to the exact vocoder in one
    # call even when streaming: frozen statistics drift on short ones ("Sure!": -8 dB, 4 dB of
    # timbre) and their whole synthesis is short anyway (docs/STREAMING_VOCODER.md)
    embedded_vocoder_exact_below_s: float = 2.0
    # once a streamed segment's first chunk is out, its rest in one call when the engine is
    # slower than real time for it: less engine time (no chunk context, fewer calls), but that
    # listener's wait comes in one longer piece (docs/STREAMING_VOCODER.md)
    embedded_vocoder_batch_rest: bool = True
    # the graph: int8 (as shipped), or fp32 / fp16 / int8-static (the generator's convolutions in
    # static int8, CPU: docs/STATIC_INT8.md) made from it on first use and cached
    # (gateway/kokoro/floatgraph); and where it runs: cpu, or cuda (onnxruntime-gpu, never a CPU fallback)
    embedded_precision: str = "int8"
    embedded_provider: str = "cpu"

    # fake engine (tests and capacity runs only)
    fake_rtf: float = 0.0  # seconds of compute per second of audio; 0 = instant
    fake_first_delay_ms: float = 0.0
    fake_fail_after: int = -1  # raise after this many chunks (-1 = never)
    fake_hang: bool = False
    fake_chunk_ms: int = 200
    fake_pause_ms: float = 0.0  # silence after the first word of each segment (shows in word times)
    fake_workers: int = 0  # calls computed at once, the rest wait (a shared engine); 0 = no limit
    # a segment holding this word waits, before its audio, until the file fake_gate_path exists:
    # lets a test see audio arrive while a later segment is still being synthesized
    fake_gate_word: str = ""
    fake_gate_path: str = ""

    # the agent behind `prompt` (gateway/agent): simulated (offline stand-in) | openai | bedrock
    agent_backend: str = "simulated"
    agent_url: str = ""  # openai: base URL (http://127.0.0.1:11434/v1); bedrock: endpoint override
    agent_model: str = ""  # the model's name (openai) or Bedrock model / inference profile id
    agent_api_key_env: str = "OPENAI_API_KEY"  # the variable holding the key; the key never goes in a file
    agent_system_prompt: str = (
        "You are a helpful voice assistant. Your replies are spoken aloud: answer in "
        "two to four short, plain sentences, with no lists, markdown or emoji."
    )
    agent_max_tokens: int = 400  # per reply (0: the model's own limit)
    agent_history_turns: int = 20  # earlier turns sent with each new one
    agent_timeout_s: float = 30.0  # for the first token, and for each one after it
    agent_region: str = ""  # bedrock: "" = the standard AWS chain
    agent_first_token_ms: float = 350.0  # simulated: delay to the first token
    agent_tokens_per_s: float = 60.0  # simulated: token rate

    # admission control: sessions synthesizing at once, and how many may wait beyond that
    # both limits hold for the port: with workers > 1, over all of them (gateway/web/limits.py)
    max_active_sessions: int = 0  # 0: the engine's own max_concurrency x 4
    max_queued_sessions: int = 16  # beyond active + queued: 503 + Retry-After / error + close 1013
    queue_timeout_s: float = 10.0  # a queued session that waits longer is refused the same way
    # the real-time budget (gateway/core/budget.py): a new listener whose forecast start, with the engine
    # work of every admitted listener, passes this (and what it would need on an idle engine), or
    # that would make an admitted listener stall, waits in the queue (ready.queued_ms) or is refused
    max_start_s: float = 3.0

    # reliability and security
    auth_token: str = ""  # when set, every /v1 route needs `Authorization: Bearer <token>` (or a browser token)
    metrics_token: str = ""  # when set, /metrics needs `Authorization: Bearer <metrics_token>`
    allowed_origins: str = ""  # comma-separated; empty: same origin only (and non-browser clients)
    max_sessions_per_client: int = (
        0  # concurrent streaming sessions per client address (0 = off; behind a proxy all clients share one)
    )
    ws_max_message_bytes: int = 65536
    ws_messages_per_s: float = 50.0  # per-session rate limit (token bucket)
    ws_burst: int = 200
    ws_idle_timeout_s: float = 60.0  # no client message and no reply this long: `closing`, close 1000 (0 = never)
    send_queue_bytes: int = (
        1 << 20
    )  # a client this far behind is slow: WS closed with 1008, SSE / streamed speech cut off
    send_timeout_s: float = 10.0  # ... and so is one that takes longer to accept one message
    shutdown_grace_s: float = 10.0  # SIGTERM: sessions in flight may finish this long

    # torch engine (hexgrad kokoro) on a GPU host
    kokoro_dir: str = ""  # folder with config.json and the .pth weights (voice packs: voice_store, plus voices/*.pt)
    kokoro_device: str = ""  # "" = cuda if available, else cpu
    kokoro_g2p: str = "misaki"  # misaki (spaCy POS + espeak fallback) or espeak
    # micro-batching: pieces of different sessions in one forward pass (docs/GPU_BATCHING.md)
    kokoro_max_batch: int = 0  # pieces per pass; 0 = auto: 8 on CUDA, 1 (off) on CPU
    kokoro_batch_window_ms: float = 5.0  # how long a piece waits for others to join its batch

    # container / sagemaker engines
    container_url: str = "ws://127.0.0.1:8080/invocations-bidirectional-stream"
    container_pool_size: int = 4  # idle sockets kept open to the container
    # let the container share identical segments and serve repeats from its own cache (the
    # gateway's hub already does per process); false: it synthesizes every segment it is sent
    container_cache: bool = True
    sagemaker_endpoint: str = ""
    sagemaker_region: str = ""  # "": the standard AWS chain (AWS_REGION, profile)
    sagemaker_mode: str = "stream"  # stream (bidirectional, Python 3.12+) or batch (InvokeEndpoint)
    sagemaker_endpoint_url: str = ""  # "": the regional URL; else a VPC endpoint or a local stand-in
    sagemaker_ca_file: str = ""  # PEM CAs trusted for it ("": the system's)
    sagemaker_voices: str = ""  # comma-separated voice ids the endpoint serves ("": Kokoro-82M English)
    sagemaker_max_concurrency: int = 16  # segments in flight to the endpoint

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **_coerce_all(changes))


_FIELDS = {f.name: f for f in fields(Settings)}


def section(settings: Any, prefix: str, cls: type[T]) -> T:
    """One engine's own settings: the fields of dataclass ``cls`` read from the flat settings
    as ``<prefix>_<field>``, so ``[embedded] threads``, ``GATEWAY_EMBEDDED_THREADS`` and
    ``--set embedded_threads=2`` all land in ``EmbeddedSettings.threads``. Only that engine
    builds its section; nothing else reads its keys."""
    return cls(**{f.name: getattr(settings, f"{prefix}_{f.name}") for f in fields(cls)})  # type: ignore[arg-type]


def _coerce(name: str, value: Any) -> Any:
    if name not in _FIELDS:
        raise ValueError(f"unknown setting {name!r}; known: {', '.join(sorted(_FIELDS))}")
    kind = type(getattr(Settings(), name))
    if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return value
    if kind is bool:
        text = str(value).strip().lower()
        if text in {"1", "true", "yes", "on"}:
            return True
        if text in {"0", "false", "no", "off"}:
            return False
        raise ValueError(f"setting {name} expects true/false, got {value!r}")
    try:
        return kind(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"setting {name} expects {kind.__name__}, got {value!r}") from exc


def _coerce_all(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _coerce(k, v) for k, v in values.items()}


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            # [server] is the one table whose keys are not prefixed
            out.update(_flatten(value, "" if key == "server" else f"{name}_"))
        else:
            out[name] = value
    return out


def load_settings(
    config_file: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Defaults < TOML file < ``GATEWAY_*`` environment < explicit overrides (the CLI)."""
    values: dict[str, Any] = {}
    env = os.environ if env is None else env
    path = Path(config_file or env.get(ENV_PREFIX + "CONFIG") or DEFAULT_CONFIG)
    if config_file is not None or path.exists():
        with path.open("rb") as fh:
            values.update(_flatten(tomllib.load(fh)))
    for key, raw in env.items():
        if key.startswith(ENV_PREFIX) and key != ENV_PREFIX + "CONFIG":
            name = key[len(ENV_PREFIX) :].lower()
            if name in _FIELDS:
                values[name] = raw
    values.update({k: v for k, v in (overrides or {}).items() if v is not None})
    return Settings(**_coerce_all(values))
