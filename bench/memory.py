"""Where the embedded engine's memory goes: RSS per part, and the gateway's total.

* **Per part**: a child process loads the engine's parts one at a time, the way the engine does
  (``onnx_sessions``: shared weights, no per-session arena) and reads its RSS after each, once
  freed memory is handed back (``release_freed_memory``), so each delta is what the part keeps.
  The last rows are the activations of one long whole-model call: what the C allocator keeps
  after the call, and what stays once it is trimmed.
* **Total**: a real gateway (``run_gateway.py serve``, embedded engine, default settings) in a
  subprocess: RSS once ready and the streaming vocoder is built, then after one reply streamed
  over the WebSocket. The goal is at most ``GOAL_MB``.
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


def rss_mb(pid: int | str = "self") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


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
    out = subprocess.run(
        [sys.executable, "-c", "from bench.memory import _child; _child()"],
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


async def total(settings: dict[str, str] | None = None) -> dict[str, Any]:
    """RSS of a real gateway: at ready, once the vocoder is built, after one streamed reply."""
    from .client import ws_stream

    # a loaded machine can take more than the default 30 s for a segment
    settings = {"synth_timeout_s": "300", **(settings or {})}
    async with GatewayProcess("embedded", settings) as gw, aiohttp.ClientSession() as http:
        at_ready = rss_mb(gw.pid)
        state = await _vocoder_ready(http, gw.url)
        built = rss_mb(gw.pid)
        result = await ws_stream(http, gw.ws_url, text=REPLY, options={"format": "mp3"}, timeout=600)
        if result.error:
            raise RuntimeError(f"the reply failed: {result.error}")
        await asyncio.sleep(0.5)
        reply = rss_mb(gw.pid)
        await asyncio.sleep(IDLE_RELEASE_S + 1.5)
        return {
            "ready_mb": round(at_ready, 1),
            "vocoder": state,
            "built_mb": round(built, 1),
            "reply_mb": round(reply, 1),
            "idle_mb": round(rss_mb(gw.pid), 1),
            "audio_bytes": len(result.audio),
        }


def report(rows: list[dict[str, Any]], tot: dict[str, Any]) -> str:
    lines = [f"{'part':<64} {'RSS MB':>8}"]
    lines += [f"{r['part']:<64} {r['mb']:>8.1f}" for r in rows]
    verdict = "within" if tot["idle_mb"] <= GOAL_MB else "OVER"
    lines.append(
        f"gateway (one worker): ready {tot['ready_mb']:.0f} MB, vocoder {tot['vocoder']} "
        f"{tot['built_mb']:.0f} MB, just after one streamed reply {tot['reply_mb']:.0f} MB, "
        f"{IDLE_RELEASE_S + 2:g} s later {tot['idle_mb']:.0f} MB ({verdict} the {GOAL_MB} MB goal)"
    )
    return "\n".join(lines)


def run() -> str:
    rows = parts()
    tot = asyncio.run(total())
    return report(rows, tot)
