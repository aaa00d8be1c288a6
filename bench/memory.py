"""Where the embedded engine's memory goes: RSS per part, and the gateway's total.

* **Per part**: a child process loads the engine's parts one at a time, the way the engine does
  (``onnx_sessions``: shared weights, no per-session arena) and reads its RSS after each, once
  freed memory is handed back (``release_freed_memory``), so each delta is what the part keeps.
  The last rows are the activations of one long whole-model call: what the C allocator keeps
  after the call, and what stays once it is trimmed.
* **Bounded windows, side by side**: a child process with the engine's model and vocoder runs
  one long piece (``LONGEST``, about 480 tokens, 26 s of audio) through the whole model in one
  call and through ``StreamingVocoder.render`` (exact vocoder windows of ``Policy.max_window``
  frames), interleaved: RTF, peak (``VmHWM`` above the RSS before the call), what stays, and
  the windowed audio's distance to the whole call's.
* **Total**: a real gateway (``run_gateway.py serve``, embedded engine, default settings) in a
  subprocess: RSS once ready and the streaming vocoder is built, then the peak while one reply
  streams over the WebSocket and the RSS just after it (and after the idle release), then the
  same for one long segment. The goal is at most ``GOAL_MB`` throughout.
"""

from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from gateway.engines.embedded import IDLE_RELEASE_S

from .procs import ROOT, GatewayProcess

GOAL_MB = 800
REPLY = (
    "Sure, I can help with that. The train to Boston leaves from platform six at eight "
    "fifteen, and the next one an hour later. Your package was delivered this afternoon "
    "and left with the front desk of your building."
)
LONG = (
    "The weather will be sunny in the morning with light rain after lunch, and please turn "
    "left at the second light and park behind the blue van near the station."
)
# one segment of about 480 tokens (the model takes 510 at most): 26 s of audio in one call
LONGEST = " ".join([LONG.rstrip(".") + ","] * 3) + " and that is all."


def rss_mb(pid: int | str = "self", key: str = "VmRSS") -> float:
    """Resident memory now (``VmRSS``), or its peak since ``reset_peak`` (``VmHWM``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def reset_peak(pid: int | str = "self") -> None:
    """Start ``VmHWM`` over from the resident memory now (Linux: ``clear_refs`` 5)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def _child() -> None:
    """In a fresh interpreter: load the parts one by one, print one JSON row per part."""
    from gateway.kokoro.onnx_sessions import release_freed_memory

    last = rss_mb()
    print(json.dumps({"part": "interpreter (and this bench's imports)", "mb": round(last, 1)}), flush=True)

    def step(name: str, fn: Callable[[], Any]) -> Any:
        nonlocal last
        value = fn()
        gc.collect()
        release_freed_memory()
        now = rss_mb()
        print(json.dumps({"part": name, "mb": round(now - last, 1)}), flush=True)
        last = now
        return value

    step("numpy, onnxruntime, onnx imports", _imports)
    packs = step("voice packs", _voice_packs)
    g2p = step("G2P: misaki, spaCy, espeak-ng (American English)", _g2p)
    held: list[Any] = [step("parsed model graph (dropped once the sessions exist)", _proto)]
    weights = step("shared ConvInteger weights", lambda: _weights(held[0]))
    whole = step("whole-model session", lambda: _whole(held[0], weights))
    held.append(step("parsed and cut graphs for the vocoder (dropped after its build)", _split))
    del held[0]
    step("parsed model graph dropped", lambda: None)
    for name, key in (("encoder", "encoder"), ("exact", "probe"), ("frozen", "frozen")):
        held.append(step(f"vocoder: {name} session", lambda k=key: _session(getattr(held[0], k), weights)))
    del held[0]
    step("cut graphs dropped", lambda: None)
    step("Japanese G2P (loaded with the first Japanese text)", lambda: g2p("こんにちは。", "j"))
    before = rss_mb()
    _run_long(whole, g2p, packs)
    row = {"part": "activations of one 8 s call, kept until idle", "mb": round(rss_mb() - before, 1)}
    print(json.dumps(row), flush=True)
    release_freed_memory()
    row = {"part": "... after the idle release (release_freed_memory)", "mb": round(rss_mb() - before, 1)}
    print(json.dumps(row), flush=True)


def _bounded_child() -> None:
    """In a fresh interpreter, the engine's model and vocoder as the engine builds them: one long
    piece through the whole model in one call and through ``StreamingVocoder.render`` (windows
    of ``Policy.max_window`` frames), interleaved: RTF, peak and kept memory of each."""
    import numpy as np

    from gateway.kokoro.onnx_sessions import release_freed_memory

    from .measure import distance

    model, vocoder, voice = _engine_parts()
    ids = [model.vocab[c] for c in model.phonemes(LONGEST, voice)][:508]
    style = model.style(voice)[len(ids) - 1].reshape(1, 256)
    feeds = {"tokens": np.array([[0, *ids, 0]], np.int64), "style": style, "speed": np.array([1.0], np.float32)}
    paths = {
        "whole model, one call": lambda: model.session.run(["audio"], feeds)[0].reshape(-1),
        f"bounded: windows of {vocoder.policy.max_window} frames": lambda: vocoder.render(ids, style, 1.0)[0],
    }
    reference = None
    for _ in range(2):
        for name, fn in paths.items():
            release_freed_memory()
            base = rss_mb()
            reset_peak()
            t0 = time.perf_counter()
            audio = fn()
            elapsed = time.perf_counter() - t0
            row = {"path": name, "audio_s": audio.size / 24000, "rtf": elapsed / (audio.size / 24000)}
            row |= {"peak_mb": rss_mb(key="VmHWM") - base, "after_mb": rss_mb() - base}
            if reference is None:
                reference = audio
            elif name.startswith("bounded"):
                d = distance(reference, audio)
                row |= {"lsd_db": d.lsd_db, "timbre_db": d.timbre_db}
            print(json.dumps(row), flush=True)


def _engine_parts() -> tuple[Any, Any, str]:
    from gateway.kokoro.floatgraph import graph_bytes
    from gateway.kokoro.onnx_model import KokoroModel, load_model_bytes, shipped_sha256
    from gateway.kokoro.parts import load_voice_packs
    from gateway.kokoro.vocoder import StreamingVocoder, default_cache_dir

    packs = load_voice_packs()
    model = KokoroModel(2, "misaki", packs)
    voice = packs.default
    graph, sha256 = graph_bytes("int8", load_model_bytes, shipped_sha256())
    vocoder = StreamingVocoder.build(
        graph,
        {voice: model.style(voice)},
        vocab=model.vocab,
        sha256=sha256,
        cache_dir=default_cache_dir(),
        weights=model.weights,
    )
    return model, vocoder, voice


def bounded() -> list[dict[str, Any]]:
    """The side-by-side rows of ``_bounded_child``, from a child process."""
    return _child_rows("_bounded_child")


def _imports() -> None:
    import numpy  # noqa: F401
    import onnx  # noqa: F401
    import onnxruntime  # noqa: F401


def _voice_packs() -> Any:
    from gateway.kokoro.parts import load_voice_packs

    return load_voice_packs()


def _g2p() -> Any:
    from gateway.kokoro.g2p import Phonemizer

    return Phonemizer("misaki")


def _proto() -> Any:
    import onnx

    from gateway.kokoro.onnx_model import load_model_bytes

    return onnx.load_from_string(load_model_bytes())


def _weights(proto: Any) -> Any:
    from gateway.kokoro.onnx_sessions import SharedWeights

    return SharedWeights(proto)


def _whole(proto: Any, weights: Any) -> Any:
    from gateway.kokoro.onnx_model import with_durations

    return _session(with_durations(proto), weights)


def _session(model: Any, weights: Any) -> Any:
    from gateway.kokoro.onnx_sessions import make_session

    return make_session(model, 2, weights)


def _split() -> Any:
    import onnx

    from gateway.kokoro.onnx_model import load_model_bytes
    from gateway.kokoro.vocoder.split import split

    return split(onnx.load_from_string(load_model_bytes()))


def _run_long(whole: Any, g2p: Any, packs: Any) -> None:
    import numpy as np

    from gateway.kokoro.parts import known_symbols, load_vocab

    vocab = load_vocab()
    ids = [vocab[c] for c in known_symbols(g2p(LONG, "a"), vocab)]
    style = packs.packs[packs.default][len(ids) - 1].reshape(1, 256)
    whole.run(
        None, {"tokens": np.array([[0, *ids, 0]], np.int64), "style": style, "speed": np.array([1.0], np.float32)}
    )


def parts() -> list[dict[str, Any]]:
    """The per-part rows, from a child process (its RSS is its own)."""
    return _child_rows("_child")


def _child_rows(child: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        [sys.executable, "-c", f"from bench.memory import {child}; {child}()"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


async def _vocoder_ready(http: aiohttp.ClientSession, url: str, timeout_s: float = 180.0) -> str:
    deadline = time.monotonic() + timeout_s
    state = "?"
    while time.monotonic() < deadline:
        async with http.get(url + "/readyz") as resp:
            state = (await resp.json()).get("vocoder", {}).get("state", "none")
        if state not in ("building", "waiting for start"):
            return state
        await asyncio.sleep(0.5)
    return state


async def _reply(http: aiohttp.ClientSession, gw: GatewayProcess, text: str, idle: bool) -> dict[str, float]:
    """Stream ``text`` over the WebSocket: the gateway's peak RSS while it did (``VmHWM``, from
    just before), its RSS 0.5 s after, and (``idle``) once the engine's idle release is done."""
    from .client import ws_stream

    reset_peak(gw.pid)
    result = await ws_stream(http, gw.ws_url, text=text, options={"format": "mp3"}, timeout=900)
    if result.error:
        raise RuntimeError(f"the reply failed: {result.error}")
    await asyncio.sleep(0.5)
    row = {"peak_mb": round(rss_mb(gw.pid, "VmHWM"), 1), "after_mb": round(rss_mb(gw.pid), 1)}
    if idle:
        await asyncio.sleep(IDLE_RELEASE_S + 1.5)
        row["idle_mb"] = round(rss_mb(gw.pid), 1)
    return row


async def total(settings: dict[str, str] | None = None) -> dict[str, Any]:
    """RSS of a real gateway: at ready, once the vocoder is built, during and after one streamed
    reply (three sentences), then during and after one long segment."""
    # a loaded machine can take more than the default 30 s for a segment
    settings = {"synth_timeout_s": "600", **(settings or {})}
    async with GatewayProcess("embedded", settings) as gw, aiohttp.ClientSession() as http:
        at_ready = rss_mb(gw.pid)
        state = await _vocoder_ready(http, gw.url)
        built = rss_mb(gw.pid)
        reply = await _reply(http, gw, REPLY, idle=True)
        longest = await _reply(http, gw, LONGEST, idle=False)
        return {
            "ready_mb": round(at_ready, 1),
            "vocoder": state,
            "built_mb": round(built, 1),
            "reply": reply,
            "long": longest,
        }


def report(rows: list[dict[str, Any]], tot: dict[str, Any], windows: list[dict[str, Any]]) -> str:
    lines = [f"{'part':<64} {'RSS MB':>8}"]
    lines += [f"{r['part']:<64} {r['mb']:>8.1f}" for r in rows]
    lines.append("one long piece, side by side (peak: VmHWM above the RSS before the call):")
    lines += [
        f"  {w['path']:<40} {w['audio_s']:5.1f} s audio  RTF {w['rtf']:.3f}  peak +{w['peak_mb']:.0f} MB  "
        f"after +{w['after_mb']:.0f} MB"
        + (f"  LSD {w['lsd_db']:.2f} dB timbre {w['timbre_db']:.2f} dB" if "lsd_db" in w else "")
        for w in windows
    ]
    reply, longest = tot["reply"], tot["long"]
    worst = max(reply["peak_mb"], reply["after_mb"], longest["peak_mb"], longest["after_mb"])
    verdict = "within" if worst <= GOAL_MB else "OVER"
    lines.append(
        f"gateway (one worker): ready {tot['ready_mb']:.0f} MB, vocoder {tot['vocoder']} {tot['built_mb']:.0f} MB; "
        f"one streamed reply: peak {reply['peak_mb']:.0f} MB, just after {reply['after_mb']:.0f} MB, "
        f"{IDLE_RELEASE_S + 2:g} s later {reply['idle_mb']:.0f} MB; one {len(LONGEST)}-character segment: "
        f"peak {longest['peak_mb']:.0f} MB, just after {longest['after_mb']:.0f} MB "
        f"({verdict} the {GOAL_MB} MB goal)"
    )
    return "\n".join(lines)


def run() -> str:
    rows = parts()
    windows = bounded()
    tot = asyncio.run(total())
    return report(rows, tot, windows)
