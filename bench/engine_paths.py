"""Where the engine's time goes while streaming: the bare model against the gateway's paths.

In one run, on the same paragraph (``TEXT``), cut into segments by the gateway's own segmenter,
every repetition running every row, bare and engine alike, in an order that flips each time (so
that load from other processes falls on all rows alike):

* **bare, whole sentences**: the whole model called directly (``KokoroModel.infer``: one
  ``session.run`` and the silence trim) on the paragraph's four sentences: no G2P, no executor,
  no chunks. The reference every other row is a ratio to.
* **bare, real segments**: the same calls on the segments the gateway makes of the paragraph
  (the first sentence cut at its first clause: five calls for four sentences). The difference
  to the row above is what the segmentation itself costs.
* **exact**: ``engine.synthesize(segment, vocoder="exact")`` per real segment: G2P, the inference
  pool, one whole-model call per segment.
* **frozen-first**: the same with ``vocoder="frozen-first"`` and an empty listener buffer (every
  segment streams in chunks, as when the listener is waiting): encoder once, then the frozen
  vocoder in chunks and one exact call for the rest; also under the pacing before issue 24.
* **in service**: a real gateway (subprocess) streams the paragraph over the WebSocket with
  ``vocoder=exact`` and with its default; the engine's live speed per mode (``/readyz``
  ``speed``: from the slot to the last chunk, per segment) and the reply's wall time.

Every RTF is wall seconds over the seconds of audio delivered (the silence trimmed, as the
engine sends it), so rows on the same text compare like for like. The accounting splits the
exact path's extra time over the bare sentences into the segmentation (calls and generator
frames, priced by a fit of every bare call: fixed ms + ms per frame), the same model calls made
through the engine, G2P and the rest (executor hops, PCM conversion).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
import numpy as np

from gateway.config import Settings
from gateway.engines.embedded import EmbeddedEngine
from gateway.text.segmenter import Segmenter

from . import engine_profile
from .corpus import SENTENCES
from .engine_profile import Run
from .procs import GatewayProcess

TEXT = " ".join(SENTENCES[4:8])  # four sentences, about 16 s of audio
RATE = 24000
BARE = ("bare, whole sentences", "bare, real segments")


@dataclass(frozen=True, slots=True)
class Path:
    name: str
    wall_s: float  # per repetition: compute (bare) or request-to-last-chunk (engine paths)
    audio_s: float  # delivered (trimmed)
    g2p_s: float
    calls: int
    frames: int  # generator frames computed (the whole model's: padding included)

    @property
    def rtf(self) -> float:
        return self.wall_s / self.audio_s if self.audio_s else float("nan")


@dataclass(frozen=True, slots=True)
class BareCall:
    seconds: float
    frames: int  # the model's whole output, in frames of 600 samples (padding included)
    samples: int  # delivered: the silence trimmed


def segments(text: str) -> list[str]:
    seg = Segmenter(first_clause_words=Settings().first_clause_words)
    return [*seg.feed(text), *seg.flush()]


async def _g2p_s(engine: EmbeddedEngine, texts: list[str], voice: str) -> float:
    t0 = time.perf_counter()
    for text in texts:
        await engine.phonemes(text, voice)
    return time.perf_counter() - t0


def bare(engine: EmbeddedEngine, phonemes: list[str], voice: str) -> list[BareCall]:
    """The whole model on each of ``phonemes`` (G2P done beforehand), every call timed."""
    model, out = engine.model, []
    model.whole()  # the engine dropped it once its vocoder was built: made again for this row
    for ph in phonemes:
        t0 = time.perf_counter()
        r = model.infer(ph, voice, 1.0)
        out.append(BareCall(time.perf_counter() - t0, int(r.durations.sum()), int(r.audio.size)))
    return out


def fit(calls: list[BareCall]) -> tuple[float, float]:
    """A whole-model call's fixed seconds and seconds per generator frame (least squares)."""
    xs = np.array([c.frames for c in calls], float)
    ys = np.array([c.seconds for c in calls])
    slope, fixed = np.polyfit(xs, ys, 1)
    return float(fixed), float(slope)


def bare_path(name: str, reps: list[list[BareCall]]) -> Path:
    n = len(reps)
    calls = [c for rep in reps for c in rep]
    return Path(
        name,
        sum(c.seconds for c in calls) / n,
        sum(c.samples for c in calls) / RATE / n,
        0.0,
        len(calls) // n,
        sum(c.frames for c in calls) // n,
    )


def engine_path(name: str, reps: list[dict[str, list[Run]]], g2p_s: float) -> Path:
    """One path's row, over every repetition of the profile (``engine_profile``)."""
    runs = [r for rep in reps for r in rep[name]]
    frames = sum(c.window for r in runs for c in r.calls if c.kind != "encoder")
    return Path(
        f"gateway {name}, real segments",
        sum(r.wall_s for r in runs) / len(reps),
        sum(r.audio_s for r in runs) / len(reps),
        g2p_s,
        sum(len(r.calls) for r in runs) // len(reps),
        frames // len(reps),
    )


async def in_service(text: str, modes: tuple[str, ...] = ("exact", "")) -> dict[str, Any]:
    """A real gateway streams ``text`` once per mode (``""``: its default) over the WebSocket,
    the cache off; the reply's wall time and the engine's live rate per mode."""
    from .client import ws_stream
    from .memory import _vocoder_ready

    out: dict[str, Any] = {}
    # a loaded machine can take more than the default 30 s for a segment
    async with GatewayProcess("embedded", {"synth_timeout_s": "300"}) as gw, aiohttp.ClientSession() as http:
        await _vocoder_ready(http, gw.url)
        for mode in modes:
            options: dict[str, Any] = {"format": "mp3", "cache": False, **({"vocoder": mode} if mode else {})}
            t0 = time.perf_counter()
            result = await ws_stream(http, gw.ws_url, text=text, options=options, timeout=600)
            wall = time.perf_counter() - t0
            done = result.done or {}
            out[mode or "default"] = {"wall_s": wall, "audio_s": done.get("audio_ms", 0) / 1000, "error": result.error}
        async with http.get(gw.url + "/readyz") as resp:
            out["speed"] = (await resp.json()).get("speed", {})
    return out


def groups(sentences: list[str], segs: list[str]) -> list[list[int]]:
    """The segments' indexes per sentence (the segmenter cuts a sentence, never joins two)."""
    out: list[list[int]] = []
    i = 0
    for sentence in sentences:
        group = [i]
        while " ".join(segs[j] for j in group) != sentence:
            group.append(group[-1] + 1)
        out.append(group)
        i = group[-1] + 1
    return out


async def _repetition(
    engine: EmbeddedEngine, phonemes: tuple[list[str], list[str]], segs: list[str], voice: str, rep: int
) -> tuple[list[list[BareCall]], dict[str, list[Run]]]:
    """One repetition of every row, sentence by sentence: the bare sentence, the bare calls on
    its segments and the engine's paths on them, in an order that flips every sentence."""
    sentences, pieces = phonemes
    bare_calls: list[list[BareCall]] = [[], []]
    profile: dict[str, list[Run]] = {}
    for k, group in enumerate(groups(list(SENTENCES[4:8]), segs)):
        flip = (rep + k) % 2
        for part in ("bare", "engine") if flip == 0 else ("engine", "bare"):
            if part == "bare":
                bare_calls[0] += await asyncio.to_thread(bare, engine, [sentences[k]], voice)
                bare_calls[1] += await asyncio.to_thread(bare, engine, [pieces[i] for i in group], voice)
                continue
            runs = (await engine_profile.measure(engine, [segs[i] for i in group], voice, 1, offset=flip))[0]
            for path, path_runs in runs.items():
                profile.setdefault(path, []).extend(path_runs)
    return bare_calls, profile


async def measure(voice: str = "", reps: int = 3, service: bool = True) -> dict[str, Any]:
    engine = EmbeddedEngine(Settings())
    await engine.start()
    try:
        voice = voice or engine.default_voice
        await engine.wait_vocoder(voice)
        segs = segments(TEXT)
        sentences = list(SENTENCES[4:8])
        phonemes = (
            [engine.model.phonemes(s, voice) for s in sentences],
            [engine.model.phonemes(s, voice) for s in segs],
        )
        g2p = await _g2p_s(engine, segs, voice)
        bare_reps: dict[str, list[list[BareCall]]] = {name: [] for name in BARE}
        profile: list[dict[str, list[Run]]] = []
        for rep in range(reps):
            calls, runs = await _repetition(engine, phonemes, segs, voice, rep)
            for name, c in zip(BARE, calls, strict=True):
                bare_reps[name].append(c)
            profile.append(runs)
        one_token = await asyncio.to_thread(bare, engine, ["ə"], voice)
    finally:
        await engine.aclose()
    paths = [bare_path(n, r) for n, r in bare_reps.items()]
    paths += [engine_path(name, profile, g2p) for name in profile[0]]
    every_bare = [c for r in bare_reps.values() for rep in r for c in rep] + one_token
    return {
        "segments": segs,
        "paths": paths,
        "bare": bare_reps,
        "fit": fit(every_bare),
        "profile": profile,
        "g2p_s": g2p,
        "service": await in_service(TEXT) if service else None,
    }


def accounting(out: dict[str, Any]) -> list[str]:
    """The exact path's extra time over the bare sentences, per repetition, in ms."""
    fixed, per_frame = out["fit"]
    lines = [
        f"whole-model call cost, fitted over every bare call: {fixed * 1000:.0f} ms fixed + "
        f"{per_frame * 1000:.2f} ms a generator frame (25 ms of audio)",
        "exact path minus bare sentences, ms per repetition: gap = segmentation (calls x fixed + "
        "frames x per frame = predicted; measured: bare segments - bare sentences) + the same calls "
        "through the engine (model calls - bare segments) + G2P + other (executor, PCM)",
    ]
    for i, (sent, seg, runs) in enumerate(zip(out["bare"][BARE[0]], out["bare"][BARE[1]], out["profile"], strict=True)):
        b = engine_profile.breakdown(runs["exact"], out["g2p_s"])
        t_sent, t_seg = (sum(c.seconds for c in x) * 1000 for x in (sent, seg))
        d_calls = len(seg) - len(sent)
        d_frames = sum(c.frames for c in seg) - sum(c.frames for c in sent)
        predicted = (d_calls * fixed + d_frames * per_frame) * 1000
        lines.append(
            f"  rep {i + 1}: gap {b['wall'] - t_sent:+.0f} = segmentation {t_seg - t_sent:+.0f} "
            f"({d_calls:+d} call, {d_frames:+d} frames: predicted {predicted:+.0f}) + engine calls "
            f"{b['whole'] - t_seg:+.0f} + G2P {b['g2p']:.0f} + other {b['other']:.0f}; "
            f"exact / bare sentences {b['wall'] / t_sent:.3f}x (wall, same text)"
        )
    return lines


def report(out: dict[str, Any]) -> str:
    paths: list[Path] = out["paths"]
    base = paths[0].rtf
    lines = [
        f"{len(out['segments'])} segments: " + " | ".join(out["segments"]),
        f"{'path (per repetition)':<46} {'RTF':>6} {'vs bare':>8} {'audio s':>8} {'calls':>6} "
        f"{'audio/call':>10} {'frames':>7} {'G2P ms':>7}",
    ]
    for p in paths:
        lines.append(
            f"{p.name:<46} {p.rtf:>6.3f} {p.rtf / base:>7.2f}x {p.audio_s:>8.2f} {p.calls:>6} "
            f"{p.audio_s / max(p.calls, 1) * 1000:>8.0f}ms {p.frames:>7} {p.g2p_s * 1000:>7.0f}"
        )
    lines += accounting(out)
    lines.append(
        "per repetition, where the milliseconds go (model calls timed in the engine; other = "
        "executor hops, PCM conversion, the event loop):"
    )
    lines.append(engine_profile.report(out["profile"], out["g2p_s"], out["segments"]))
    if out["service"] is not None:
        lines += service_lines(out["service"], base)
    return "\n".join(lines)


def service_lines(service: dict[str, Any], base: float) -> list[str]:
    """The in-service rows: each reply's wall time, and the engine's live rate per mode."""
    lines = ["in service (a real gateway, one streamed reply per mode over the WebSocket, MP3, cache off):"]
    for mode, row in service.items():
        if mode == "speed":
            continue
        rtf = row["wall_s"] / row["audio_s"] if row["audio_s"] else float("nan")
        lines.append(
            f"  vocoder={mode}: {row['audio_s']:.2f} s of audio in {row['wall_s']:.2f} s (reply wall / audio "
            f"{rtf:.3f}, {rtf / base:.2f}x bare)" + (f"; error {row['error']}" if row.get("error") else "")
        )
    for mode, v in service["speed"].items():
        if isinstance(v, dict) and "rtf" in v:
            lines.append(
                f"  engine live rate, {mode}: RTF {v['rtf']} over {v.get('calls')} segments "
                f"({v['rtf'] / base:.2f}x bare; from each segment's engine slot to its last chunk)"
            )
    lines.append(
        "  (the reply's wall time includes the first segment's wait and the encoder; the bare row ran "
        "in the bench's own process just before, the gateway in its own)"
    )
    return lines


def run(voice: str = "", reps: int = 3, service: bool = True) -> str:
    return report(asyncio.run(measure(voice, reps, service)))
