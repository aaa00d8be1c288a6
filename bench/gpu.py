"""Real speech on the GPU: the gateway's whole path (WebSocket, MP3, the shipped weights) per
engine, precision and device, side by side with the seed's 156.7 ms to first audio on a g5.

    python run_gateway.py bench gpu [--install] [--configs C,...] [--reps 5] [--out FILE]
    python run_gateway.py bench gpu --dry-run      # the same path on the CPU, 1 rep (tests)
    python run_gateway.py bench gpu --pack .gpupack  # wheels, model and voices for a machine with no index

A config is ``engine:precision:device``. The defaults on a GPU host are
``embedded:int8:cpu`` (the product's default, the baseline), ``embedded:fp32:cuda``,
``embedded:fp16:cuda`` (onnxruntime-gpu, float graphs from ``gateway.kokoro.floatgraph``) and
``kokoro:fp32:cuda`` (hexgrad's torch model with weights from ``convert-weights``). With
``--dry-run`` every ``cuda`` becomes ``cpu``, fp16 is left out unless named, nothing is
installed and one repetition is made.

Before measuring, what the configs need is made on this machine (never downloaded): the float
graphs (cached by hash) and the converted torch weights (``~/.cache/kokoro-gateway/kokoro-82m``,
redone when the shipped model's hash changes). ``--install`` first installs what a GPU host
lacks, from the package index: ``onnxruntime-gpu`` in place of ``onnxruntime`` when
onnxruntime offers no CUDA provider, and torch's default (CUDA) wheel of the pinned version
when torch cannot see a GPU.

Each config runs in its own gateway process (``bench.procs.GatewayProcess``; the streaming
vocoder off: whole segments, the path a GPU takes), warmed up by one reply, then per
repetition over the WebSocket channel with MP3 at 64 kbps and voice af_heart:

* first audio, short first sentence: a reply opening with "Sure." (``SHORT``);
* first audio, long first sentence: a reply whose first sentence is 30 words with no clause
  mark the fast path could cut at (``LONG``);
* RTF: time from ``start`` to ``done`` for ``REPLY`` over the audio it made.

Prints a table and writes JSON (``--out``); never asserts. Figures are only worth what the
machine was doing at the time: the JSON records it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from .client import ws_stream
from .procs import GatewayProcess
from .ttfb import ANCHOR

SHORT = "Sure. The train to the airport leaves from the second platform at eight fifteen tonight."
LONG = (
    "The train that takes you from the city centre to the airport leaves every twenty minutes from "
    "the second platform and the whole ride takes about thirty five minutes. Have a good trip."
)
REPLY = (
    "Your package was delivered this afternoon. It was left with the front desk of your building. "
    "If you cannot find it, call the courier and they will trace it for you."
)
GPU_CONFIGS = "embedded:int8:cpu,embedded:fp32:cuda,embedded:fp16:cuda,kokoro:fp32:cuda"
DRY_CONFIGS = "embedded:int8:cpu,embedded:fp32:cpu,kokoro:fp32:cpu"
TORCH_PIN = "torch==2.13.0"
OPTIONS = {"voice": "af_heart", "format": "mp3", "bitrate": 64}


@dataclass(frozen=True, slots=True)
class Config:
    engine: str  # embedded or kokoro
    precision: str  # int8, fp32, fp16 (kokoro: fp32)
    device: str  # cpu or cuda

    @property
    def name(self) -> str:
        return f"{self.engine}:{self.precision}:{self.device}"

    def settings(self, kokoro_dir: Path) -> dict[str, str]:
        # a CPU dry run on a loaded machine is slow, not broken; the reply cache off, or every
        # repetition after the first is a cache hit (2 ms "first audio": seen on the H200)
        common = {"synth_timeout_s": "300", "cache_mb": "0"}
        if self.engine == "kokoro":
            return {**common, "kokoro_dir": str(kokoro_dir), "kokoro_device": self.device}
        return {
            **common,
            "embedded_precision": self.precision,
            "embedded_provider": self.device,
            "embedded_vocoder": "off",
        }


def parse_configs(text: str, *, dry_run: bool) -> list[Config]:
    configs = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        parts = item.split(":")
        if (
            len(parts) != 3
            or parts[0] not in ("embedded", "kokoro")
            or parts[2] not in ("cpu", "cuda")
            or parts[1] not in ("int8", "fp32", "fp16")
            or (parts[0] == "kokoro" and parts[1] != "fp32")
        ):
            raise ValueError(f"config {item!r}: expected embedded:int8|fp32|fp16:cpu|cuda or kokoro:fp32:cpu|cuda")
        engine, precision, device = parts
        configs.append(Config(engine, precision, "cpu" if dry_run else device))
    return list(dict.fromkeys(configs))


def _probe(code: str) -> str:
    """Run ``code`` in a fresh interpreter (what an install changed is seen there, not here)."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    return out.stdout.strip() if out.returncode == 0 else ""


def install_plan(configs: Sequence[Config]) -> list[list[str]]:
    """The pip commands a GPU host needs for ``configs`` (none on a host that has them)."""
    pip = [sys.executable, "-m", "pip", "install", "-q"]
    plan: list[list[str]] = []
    if any(c.engine == "embedded" and c.device == "cuda" for c in configs):
        providers = _probe("import onnxruntime as o; print(','.join(o.get_available_providers()))")
        if "CUDAExecutionProvider" not in providers:
            plan += [[sys.executable, "-m", "pip", "uninstall", "-y", "-q", "onnxruntime"], [*pip, "onnxruntime-gpu"]]
    if any(c.engine == "kokoro" and c.device == "cuda" for c in configs):
        if _probe("import torch; print(torch.cuda.is_available())") != "True":
            plan.append([*pip, "--force-reinstall", "--no-deps", TORCH_PIN])
    return plan


def prepare(configs: Sequence[Config], kokoro_dir: Path) -> dict[str, Any]:
    """Build the float graphs and convert the torch weights the configs need (cached)."""
    from gateway.kokoro import floatgraph
    from gateway.kokoro.onnx_model import load_model_bytes, shipped_sha256

    made: dict[str, Any] = {}
    for precision in sorted({c.precision for c in configs if c.engine == "embedded"} - {"int8"}):
        t0 = time.perf_counter()
        _, digest = floatgraph.graph_bytes(precision, load_model_bytes, shipped_sha256())
        made[precision] = {"sha256": digest[:16], "seconds": round(time.perf_counter() - t0, 1)}
    if any(c.engine == "kokoro" for c in configs):
        source = kokoro_dir / "SOURCE.json"
        current = source.exists() and json.loads(source.read_text()).get("source_sha256") == shipped_sha256()
        if not current:
            from gateway.kokoro.convert_weights import convert

            made["kokoro_dir"] = convert(kokoro_dir)
        else:
            made["kokoro_dir"] = {"folder": str(kokoro_dir), "reused": True}
    return made


async def stream_once(http: aiohttp.ClientSession, url: str, text: str) -> dict[str, float]:
    result = await ws_stream(http, url, text=text, options=OPTIONS, timeout=300)
    done = result.done
    if done is None or result.ttfb_ms is None:
        raise RuntimeError(f"no audio: {result.error or result.events[-3:]}")
    done_at = next(t for t, kind, _ in result.events if kind == "done")
    return {"first_audio_ms": result.ttfb_ms, "audio_s": done["audio_ms"] / 1000, "total_s": done_at - result.t0}


async def measure(config: Config, kokoro_dir: Path, reps: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    async with GatewayProcess(config.engine, config.settings(kokoro_dir), ready_timeout_s=600) as gw:
        ready_s = time.perf_counter() - t0
        async with aiohttp.ClientSession() as http:
            await stream_once(http, gw.ws_url, "Warming up, not counted.")
            runs: dict[str, list[dict[str, float]]] = {"short": [], "long": [], "reply": []}
            for _ in range(reps):  # interleaved, so a drift in the machine touches all three
                runs["short"].append(await stream_once(http, gw.ws_url, SHORT))
                runs["long"].append(await stream_once(http, gw.ws_url, LONG))
                runs["reply"].append(await stream_once(http, gw.ws_url, REPLY))
    med = statistics.median
    return {
        "config": config.name,
        "engine": config.engine,
        "precision": config.precision,
        "device": config.device,
        "ready_s": round(ready_s, 1),
        "short_first_ms": round(med(r["first_audio_ms"] for r in runs["short"]), 1),
        "long_first_ms": round(med(r["first_audio_ms"] for r in runs["long"]), 1),
        "rtf": round(med(r["total_s"] / r["audio_s"] for r in runs["reply"]), 4),
        "reply_audio_s": round(runs["reply"][0]["audio_s"], 2),
        "runs": runs,
    }


def machine() -> dict[str, Any]:
    gpu = _probe("import torch; print(torch.cuda.get_device_name() if torch.cuda.is_available() else '')")
    ort = _probe("import onnxruntime as o; print(o.__version__, ','.join(o.get_available_providers()))")
    return {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "gpu": gpu or None,
        "onnxruntime": ort,
        "python": platform.python_version(),
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def table(rows: Sequence[dict[str, Any]]) -> str:
    anchor = ANCHOR["stream_mean_ms"]
    head = f"{'config':<22} {'ready s':>7} {'short first ms':>14} {'/ g5 156.7':>10} {'long first ms':>13} {'RTF':>7}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['config']:<22} {r['ready_s']:>7.1f} {r['short_first_ms']:>14.1f} "
            f"{r['short_first_ms'] / anchor:>10.2f} {r['long_first_ms']:>13.1f} {r['rtf']:>7.3f}"
        )
    lines.append(f"seed anchor: {anchor} ms to first audio, per-sentence streaming on an ml.g5.xlarge (A10G)")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    from gateway.kokoro.floatgraph import cache_dir

    parser = argparse.ArgumentParser(
        prog="run_gateway.py bench gpu", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dry-run", action="store_true", help="CPU only, no installs, 1 rep")
    parser.add_argument("--install", action="store_true", help="pip-install what a GPU host lacks first")
    parser.add_argument("--configs", default="")
    parser.add_argument("--reps", type=int, default=0, help="default: 5 (1 with --dry-run)")
    parser.add_argument("--kokoro-dir", default=str(cache_dir().parent / "kokoro-82m"))
    parser.add_argument("--out", default="bench-results/gpu.json")
    parser.add_argument("--pack", metavar="DIR", help="only build the carry-able pack (bench/gpu_pack.py)")
    parser.add_argument("--ort-gpu", action="store_true", help="with --pack: add onnxruntime-gpu (more calls)")
    args = parser.parse_args(argv)
    if args.pack:
        from .gpu_pack import main as pack_main

        return pack_main([args.pack, *(["--ort-gpu"] if args.ort_gpu else [])])
    try:
        configs = parse_configs(args.configs or (DRY_CONFIGS if args.dry_run else GPU_CONFIGS), dry_run=args.dry_run)
    except ValueError as exc:
        parser.error(str(exc))
    reps = args.reps or (1 if args.dry_run else 5)
    # a dry run shows what --install would do on a GPU host for the configs as named
    wanted = parse_configs(args.configs or GPU_CONFIGS, dry_run=False) if args.dry_run else configs
    plan = install_plan(wanted) if args.install or args.dry_run else []
    for command in plan:
        print(("would run: " if args.dry_run else "running: ") + " ".join(command), flush=True)
        if not args.dry_run:
            subprocess.run(command, check=True)
    kokoro_dir = Path(args.kokoro_dir)
    made = prepare(configs, kokoro_dir)
    rows = [asyncio.run(measure(c, kokoro_dir, reps)) for c in configs]
    print(table(rows))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "dry_run": args.dry_run,
        "reps": reps,
        "machine": machine(),
        "anchor": ANCHOR,
        "install_plan": [" ".join(c) for c in plan],
        "prepared": made,
        "rows": rows,
        "texts": {"short": SHORT, "long": LONG, "reply": REPLY},
    }
    out.write_text(json.dumps(report, indent=1) + "\n", "utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
