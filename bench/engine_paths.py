"""Where the engine's time goes while streaming: the bare model against the gateway's paths.

In one run, on the same paragraph (``TEXT``), cut into segments by the gateway's own segmenter:

* **bare**: the whole model called directly (``session.run``) on whole sentences: no G2P, no
  executor, no chunks. The reference every other row is a ratio to.
* **exact**: ``engine.synthesize(segment, vocoder="exact")`` per real segment: G2P, the inference
  pool, one whole-model call per segment.
* **frozen-first**: the same with ``vocoder="frozen-first"`` and an empty listener buffer (every
  segment streams in chunks, as when the listener is waiting): encoder once, then the frozen
  vocoder in chunks and one exact call for the rest.
* **in service**: a real gateway (subprocess) streams the paragraph over the WebSocket; its live
  speed per mode (``/readyz`` ``speed``: wall time, queueing, event loop and encoder included).

Each row says where the milliseconds go: G2P, model calls (how many, and the audio per call),
and the fixed cost of one call (a one-token call's time, minus its audio at the bare speed).
The engine's paths come from ``engine_profile``: every model call timed, ``reps`` repetitions
side by side (the spread of the ratios), and ``frozen-first`` also under the pacing before
issue 24 (``frozen-first previous``), with each path's first audio.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from gateway.config import Settings
from gateway.core.segmenter import Segmenter
from gateway.engines.embedded import EmbeddedEngine

from . import engine_profile
from .corpus import SENTENCES
from .engine_profile import Run
from .procs import GatewayProcess

TEXT = " ".join(SENTENCES[4:8])  # four sentences, about 14 s of audio
RATE = 24000


@dataclass(frozen=True, slots=True)
class Path:
    name: str
    wall_s: float  # compute (bare) or request-to-last-chunk (engine paths)
    audio_s: float
    g2p_s: float
    calls: int

    @property
    def rtf(self) -> float:
        return self.wall_s / self.audio_s if self.audio_s else float("nan")


def segments(text: str) -> list[str]:
    seg = Segmenter(first_clause_words=Settings().first_clause_words)
    return [*seg.feed(text), *seg.flush()]


async def _g2p_s(engine: EmbeddedEngine, texts: list[str], voice: str) -> float:
    t0 = time.perf_counter()
    for text in texts:
        await engine.phonemes(text, voice)
    return time.perf_counter() - t0


def bare(engine: EmbeddedEngine, sentences: list[str], voice: str) -> tuple[Path, float]:
    """The whole model on whole sentences, and one call's fixed cost (seconds)."""
    model = engine.model
    wall = audio = 0.0
    for sentence in sentences:
        phonemes = model.phonemes(sentence, voice)
        t0 = time.perf_counter()
        out = model.infer(phonemes, voice, 1.0)
        wall += time.perf_counter() - t0
        audio += (out.audio.size + out.start) / RATE  # what the model generated, silence included
    t0 = time.perf_counter()
    model.infer("ə", voice, 1.0)  # about 0.5 s of audio, mostly the padding's silence
    return Path("bare whole model, whole sentences", wall, audio, 0.0, len(sentences)), time.perf_counter() - t0


def engine_path(name: str, reps: list[dict[str, list[Run]]], g2p_s: float) -> Path:
    """One path's row, over every repetition of the profile (``engine_profile``)."""
    runs = [r for rep in reps for r in rep[name]]
    calls = sum(len(r.calls) for r in runs) // len(reps)
    return Path(
        f"gateway {name}, real segments",
        sum(r.wall_s for r in runs) / len(reps),
        sum(r.audio_s for r in runs) / len(reps),
        g2p_s,
        calls,
    )


async def in_service(text: str) -> dict[str, Any]:
    """A real gateway streams ``text`` once over the WebSocket; its engine rate per mode."""
    from .client import ws_stream

    # a loaded machine can take more than the default 30 s for a segment
    async with GatewayProcess("embedded", {"synth_timeout_s": "300"}) as gw, aiohttp.ClientSession() as http:
        from .memory import _vocoder_ready

        await _vocoder_ready(http, gw.url)
        t0 = time.perf_counter()
        result = await ws_stream(http, gw.ws_url, text=text, options={"format": "mp3"}, timeout=600)
        wall = time.perf_counter() - t0
        async with http.get(gw.url + "/readyz") as resp:
            speed = (await resp.json()).get("speed", {})
    done = result.done or {}
    return {"wall_s": wall, "audio_s": done.get("audio_ms", 0) / 1000, "speed": speed, "error": result.error}


async def measure(voice: str = "", reps: int = 3, service: bool = True) -> dict[str, Any]:
    engine = EmbeddedEngine(Settings())
    await engine.start()
    try:
        voice = voice or engine.default_voice
        await engine.wait_vocoder(voice)
        segs = segments(TEXT)
        sentences = list(SENTENCES[4:8])
        bare_path, fixed = await asyncio.to_thread(bare, engine, sentences, voice)
        g2p = await _g2p_s(engine, segs, voice)
        profile = await engine_profile.measure(engine, segs, voice, reps)
    finally:
        await engine.aclose()
    paths = [bare_path, *(engine_path(name, profile, g2p) for name in profile[0])]
    return {
        "segments": segs,
        "paths": paths,
        "fixed_s": fixed,
        "profile": profile,
        "g2p_s": g2p,
        "service": await in_service(TEXT) if service else None,
    }


def report(out: dict[str, Any]) -> str:
    paths: list[Path] = out["paths"]
    base = paths[0].rtf
    fixed = out["fixed_s"]
    lines = [
        f"{len(out['segments'])} segments: " + " | ".join(out["segments"]),
        (
            f"{'path':<46} {'RTF':>6} {'vs bare':>8} {'audio s':>8} {'calls':>6} {'audio/call':>10} "
            f"{'G2P ms':>7} {'fixed ms':>9} {'rest ms':>8}"
        ),
    ]
    for p in paths:
        # what the path spent beyond the bare model's speed on the same audio
        extra = (p.wall_s - base * p.audio_s) * 1000
        rest = extra - p.g2p_s * 1000 - fixed * 1000 * p.calls
        lines.append(
            f"{p.name:<46} {p.rtf:>6.3f} {p.rtf / base:>7.2f}x {p.audio_s:>8.2f} {p.calls:>6} "
            f"{p.audio_s / max(p.calls, 1) * 1000:>8.0f}ms {p.g2p_s * 1000:>7.0f} "
            f"{fixed * 1000 * p.calls:>9.0f} {rest:>8.0f}"
        )
    lines.append(
        "per repetition, where the milliseconds go (model calls timed in the engine; other = "
        "executor hops, PCM conversion, the event loop):"
    )
    lines.append(engine_profile.report(out["profile"], out["g2p_s"], out["segments"]))
    service = out["service"]
    if service is None:
        return "\n".join(lines)
    modes = ", ".join(
        f"{k} {v.get('rtf')} ({v.get('calls')} calls)"
        for k, v in service["speed"].items()
        if isinstance(v, dict) and "rtf" in v
    )
    lines.append(
        f"in service (a streamed reply over the WebSocket, MP3): {service['audio_s']:.2f} s of audio "
        f"in {service['wall_s']:.2f} s; live RTF per mode: {modes}"
        + (f"; error {service['error']}" if service.get("error") else "")
    )
    lines.append(
        f"fixed ms = calls x a one-token call's time ({fixed * 1000:.0f} ms: an upper bound of one "
        "call's fixed cost); rest = what remains beyond the bare speed on the same audio (chunk "
        "windows' context, executor hops; negative: the engine trims silence the bare model makes)"
    )
    return "\n".join(lines)


def run(voice: str = "", reps: int = 3, service: bool = True) -> str:
    return report(asyncio.run(measure(voice, reps, service)))
