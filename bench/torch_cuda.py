"""The torch ``kokoro`` engine's model on CUDA against the same model on CPU, side by side.

    python -m bench.torch_cuda [--reps 5] [--devices cuda,cpu] [--out FILE]

What a GPU host running ``--engine kokoro`` pays per segment, and what per-sentence streaming
saves over batch there: for each reply of ``bench/data/torch_phonemes.json`` (agent-like
replies from ``bench/corpus.py``, split by the gateway's segmenter and read by misaki here,
so the GPU machine needs neither misaki nor spaCy), the time to the first segment's audio
(streaming: the first segment alone) and to the whole reply in one call (batch), per device.

The weights are RANDOM: Kokoro-82M's architecture (its real ``config.json`` shape), with the
duration head set so that every token lasts ``--frames`` frames (3 by default: 75 ms a
phoneme, about what the real model predicts for English), because the real ``kokoro-v1_0.pth``
is not on these machines and nothing may be downloaded. The compute per second of audio is
the real model's; the audio is noise. ``kokoro`` is loaded without its package
``__init__`` (which imports misaki's pipeline): only ``kokoro.model``. Prints; never asserts.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import statistics
import sys
import time
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gateway.kokoro.floatgraph.torch_weights import CONFIG as KOKORO_82M

DATA = Path(__file__).resolve().parent / "data" / "torch_phonemes.json"
CONFIG = KOKORO_82M  # Kokoro-82M's architecture, held once in the product
RATE = 24000


def kmodel_class() -> Any:
    """``kokoro.model.KModel`` without running ``kokoro/__init__`` (it imports misaki)."""
    if "kokoro" not in sys.modules:
        spec = importlib.util.find_spec("kokoro")
        if spec is None or not spec.submodule_search_locations:
            raise SystemExit("the kokoro package is not installed")
        pkg = types.ModuleType("kokoro")
        pkg.__path__ = list(spec.submodule_search_locations)
        sys.modules["kokoro"] = pkg
    from kokoro.model import KModel
    from loguru import logger

    logger.remove()  # kokoro logs every call's phonemes and durations at DEBUG
    return KModel


def build(vocab: dict[str, int], frames: int, device: str) -> Any:
    import tempfile
    import warnings

    import torch

    KModel = kmodel_class()
    config = {**CONFIG, "vocab": vocab}
    with tempfile.TemporaryDirectory() as tmp:
        empty = Path(tmp) / "empty.pth"
        torch.save({}, empty)
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = KModel(repo_id="hexgrad/Kokoro-82M", config=config, model=str(empty))
    head = model.predictor.duration_proj.linear_layer
    with torch.no_grad():  # sigmoid(b) x max_dur = frames - 0.25: every token rounds to `frames`
        head.weight.zero_()
        p = (frames - 0.25) / CONFIG["max_dur"]
        head.bias.fill_(math.log(p / (1 - p)))
    return model.to(device).eval()


def timed(model: Any, phonemes: str, style: Any, device: str) -> tuple[float, int]:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.inference_mode():
        audio = model(phonemes, style, 1.0)
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0, int(audio.numel())


def run(device: str, replies: list[dict[str, Any]], vocab: dict[str, int], frames: int, reps: int) -> dict[str, Any]:
    import torch

    model = build(vocab, frames, device)
    style = torch.randn(1, 256) * 0.3
    for r in replies[:2]:  # warm-up: kernels, allocator, cuDNN autotuning
        timed(model, r["whole"], style, device)
        timed(model, r["segments"][0]["phonemes"], style, device)
    rows = []
    for r in replies:
        first = [timed(model, r["segments"][0]["phonemes"], style, device) for _ in range(reps)]
        whole = [timed(model, r["whole"], style, device) for _ in range(reps)]
        per_seg = [timed(model, s["phonemes"], style, device)[0] for s in r["segments"]]
        rows.append(
            {
                "segments": len(r["segments"]),
                "phonemes": len(r["whole"]),
                "first_ms": 1000 * statistics.median(t for t, _ in first),
                "first_audio_s": first[0][1] / RATE,
                "batch_ms": 1000 * statistics.median(t for t, _ in whole),
                "audio_s": whole[0][1] / RATE,
                "segments_ms": 1000 * sum(per_seg),
            }
        )
    return {
        "device": device,
        "name": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "threads": torch.get_num_threads(),
        "rows": rows,
    }


def table(results: list[dict[str, Any]]) -> str:
    head = (
        f"{'device':>6} {'reply':>5} {'segs':>4} {'audio s':>7} {'first ms':>9} {'batch ms':>9} "
        f"{'first/batch':>11} {'RTF batch':>9} {'RTF segs':>8}"
    )
    lines = [head, "-" * len(head)]
    for res in results:
        for k, r in enumerate(res["rows"]):
            lines.append(
                f"{res['device']:>6} {k:>5} {r['segments']:>4} {r['audio_s']:>7.2f} {r['first_ms']:>9.1f} "
                f"{r['batch_ms']:>9.1f} {r['first_ms'] / r['batch_ms']:>11.2f} "
                f"{r['batch_ms'] / 1000 / r['audio_s']:>9.4f} {r['segments_ms'] / 1000 / r['audio_s']:>8.4f}"
            )
    if len(results) == 2:
        a, b = results
        ratios = [rb["first_ms"] / ra["first_ms"] for ra, rb in zip(a["rows"], b["rows"])]
        lines.append(f"first segment, {b['device']} / {a['device']}: median {statistics.median(ratios):.1f}x")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.torch_cuda")
    parser.add_argument("--devices", default="cuda,cpu")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--frames", type=int, default=3, help="frames (25 ms) per token")
    parser.add_argument("--data", default=str(DATA))
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    import torch

    data = json.loads(Path(args.data).read_text("utf-8"))
    vocab = data.get("vocab") or {}
    if not vocab:
        raise SystemExit("the phoneme file carries no vocab")
    results = []
    for device in args.devices.split(","):
        if device == "cuda" and not torch.cuda.is_available():
            print("cuda: not available here; skipped")
            continue
        results.append(run(device, data["replies"], vocab, args.frames, args.reps))
        print(f"{device} done", flush=True)
    print(f"random weights, {args.frames} frames a token; torch {torch.__version__}; median of {args.reps}")
    print(table(results))
    if args.out:
        Path(args.out).write_text(json.dumps({"frames": args.frames, "reps": args.reps, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
