"""``bench gpu --pack`` and its device half, ``bench/gpu_device.py``, without a GPU.

The pack is split so that each part fits one call beside the working tree; slimmed wheels stay
valid wheels (RECORD matches, pip installs them, the stripped extension still loads); the
device script installs what each call carried with --no-index, says which parts are missing,
and refuses a file whose SHA-256 does not match. The real pack (downloads, about 100 MiB) is
built in the slow test, which checks its sizes against the call limit.
"""

from __future__ import annotations

import ctypes
import json
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from bench import gpu_pack
from bench.gpu_pack import CALL_LIMIT, lay_out, record_line, slim, split

ROOT = Path(__file__).resolve().parent.parent
DEVICE = ROOT / "bench" / "gpu_device.py"


def make_wheel(folder: Path, name: str, files: dict[str, bytes]) -> Path:
    dist = f"{name}-1.0.dist-info"
    files = {
        **files,
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: py3-none-any\n",
    }
    record = "\n".join(record_line(path, data) for path, data in files.items()) + f"\n{dist}/RECORD,,\n"
    wheel = folder / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for path, data in {**files, f"{dist}/RECORD": record.encode()}.items():
            z.writestr(path, data)
    return wheel


def test_split_keeps_every_part_within_the_budget() -> None:
    sizes = {"m1": 17, "m2": 14, "m3": 14, "m4": 18, "spacy": 9, "voices": 18, "small": 1}
    where = split(sizes, 40)
    loads = {p: sum(s for n, s in sizes.items() if where[n] == p) for p in set(where.values())}
    assert sorted(loads) == ["a", "b", "c"] and max(loads.values()) <= 40
    assert set(where) == set(sizes)
    even = split({"x": 30, "y": 30, "z": 10, "w": 10}, 70)  # first fit alone would load a with 70, b with 10
    assert even["x"] != even["y"] and even["z"] != even["w"]
    with pytest.raises(ValueError, match="larger than one call"):
        split({"model": 41}, 40)


def test_a_slimmed_wheel_is_smaller_installs_and_its_extension_loads(tmp_path: Path) -> None:
    src = tmp_path / "f.c"
    src.write_text("int answer(void) { return 42; }\n")
    lib = tmp_path / "f.so"
    subprocess.run(["gcc", "-g3", "-O0", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    wheel = make_wheel(tmp_path, "kgwslim", {"kgwslim/__init__.py": b"", "kgwslim/f.so": lib.read_bytes()})
    out = tmp_path / "out"
    out.mkdir()
    slimmed = slim(wheel, out)
    with zipfile.ZipFile(slimmed) as z:
        so = z.read("kgwslim/f.so")
        record = z.read("kgwslim-1.0.dist-info/RECORD").decode()
    assert len(so) < len(lib.read_bytes())
    assert record_line("kgwslim/f.so", so) in record.splitlines()
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", str(site), str(slimmed)],
        check=True,
    )
    assert ctypes.CDLL(str(site / "kgwslim" / "f.so")).answer() == 42


def fake_pack(tmp_path: Path) -> Path:
    """Two wheels and a voices tarball laid out in parts of at most 3 kB."""
    made = tmp_path / "made"
    made.mkdir()
    files = [
        make_wheel(made, f"kgwpart{n}", {f"kgwpart{n}/__init__.py": f"N = {n}\n".encode() + bytes(1500)})
        for n in (1, 2)
    ]
    bins = made / "kokoro-js-1.2.1"
    bins.mkdir()
    (bins / "af_heart.bin").write_bytes(b"\x01" * 100)
    files.append(gpu_pack.pack_voices(bins, made / gpu_pack.VOICES))
    pack = tmp_path / "pack"
    pack.mkdir()
    lay_out(files, pack, budget=3000)
    return pack


def device(pack: Path, state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(DEVICE), "--pack", str(pack), "--state", str(state), "--stage-only", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_device_script_stages_one_part_a_call_and_says_what_is_missing(tmp_path: Path) -> None:
    pack = fake_pack(tmp_path)
    parts = sorted(p.name for p in pack.iterdir())
    assert parts == ["a", "b"]
    carry = tmp_path / "carry"  # what one call brings: a single part
    shutil.copytree(pack / "a", carry / "a")
    first = device(carry, tmp_path / "state")
    assert first.returncode == 0, first.stderr
    assert "missing parts: ['b']" in first.stdout and "NEXT carry carry/b" in first.stdout
    shutil.rmtree(carry)
    shutil.copytree(pack / "b", carry / "b")
    second = device(carry, tmp_path / "state")
    assert second.returncode == 0, second.stderr
    assert "missing parts: none" in second.stdout
    site = tmp_path / "state" / "site"
    assert sorted(p.name for p in site.glob("kgwpart?")) == ["kgwpart1", "kgwpart2"]
    voices = tmp_path / "state" / "cache" / "kokoro-gateway" / "voices" / "kokoro-js-1.2.1" / "af_heart.bin"
    assert voices.read_bytes() == b"\x01" * 100


def test_the_device_script_refuses_a_damaged_file(tmp_path: Path) -> None:
    pack = fake_pack(tmp_path)
    manifest = json.loads((pack / "a" / "MANIFEST.json").read_text())
    victim = next(pack / "a" / e["name"] for e in manifest["files"] if e["part"] == "a")
    data = bytearray(victim.read_bytes())
    data[-30] ^= 0xFF
    victim.write_bytes(bytes(data))
    done = device(pack, tmp_path / "state")
    assert done.returncode != 0
    assert "does not match its SHA-256" in done.stderr
    assert not (tmp_path / "state" / "site").exists()


def test_a_file_larger_than_a_call_goes_in_pieces_that_the_device_joins(tmp_path: Path) -> None:
    made = tmp_path / "made"
    made.mkdir()
    big = make_wheel(made, "kgwbig", {"kgwbig/__init__.py": b"N = 7\n", "kgwbig/blob.bin": bytes(range(256)) * 40})
    small = make_wheel(made, "kgwsmall", {"kgwsmall/__init__.py": b"M = 1\n"})
    whole = big.read_bytes()
    pack = tmp_path / "pack"
    pack.mkdir()
    entries = lay_out([big, small], pack, budget=4000)
    pieces = [e for e in entries if e.whole == big.name]
    assert len(pieces) == 3 and all(e.size <= 4000 for e in entries)
    assert b"".join((pack / e.part / e.name).read_bytes() for e in sorted(pieces, key=lambda e: e.name)) == whole
    state = tmp_path / "state"
    carry = tmp_path / "carry"
    parts = sorted({e.part for e in entries})
    last_piece = max(e.part for e in pieces)
    for part in parts:  # one part a call, as on the machine
        shutil.rmtree(carry, ignore_errors=True)
        shutil.copytree(pack / part, carry / part)
        done = device(carry, state)
        assert done.returncode == 0, done.stderr
        assert (state / "site" / "kgwbig").exists() == (part >= last_piece)  # installed once its last piece is in
    assert "missing parts: none" in done.stdout
    assert (state / "site" / "kgwbig" / "__init__.py").read_text() == "N = 7\n"
    assert not list((state / "pieces").glob("*.00?"))  # the pieces are dropped once joined


def test_the_device_refuses_pieces_that_join_to_the_wrong_file(tmp_path: Path) -> None:
    made = tmp_path / "made"
    made.mkdir()
    big = make_wheel(made, "kgwbig", {"kgwbig/blob.bin": bytes(range(256)) * 40})
    pack = tmp_path / "pack"
    pack.mkdir()
    lay_out([big], pack, budget=4000)
    manifest_paths = list(pack.glob("*/MANIFEST.json"))
    for path in manifest_paths:  # the pieces are intact, the file they make is not the one named
        manifest = json.loads(path.read_text())
        for e in manifest["files"]:
            e["whole_sha256"] = "0" * 64
        path.write_text(json.dumps(manifest))
    done = device(pack, tmp_path / "state")
    assert done.returncode != 0
    assert "joined from its pieces does not match its SHA-256" in done.stderr
    assert not (tmp_path / "state" / "site").exists()


@pytest.mark.slow
@pytest.mark.pack
def test_the_real_pack_fits_two_calls(tmp_path: Path) -> None:
    from gateway.kokoro.floatgraph import cache_dir

    dest = ROOT / ".gpupack-test"
    try:
        entries = gpu_pack.build(dest, download_dir=cache_dir().parent / "gpu-pack-download")  # kept between runs
        tree = gpu_pack.tree_bytes()
        parts = sorted({e.part for e in entries})
        assert parts == ["a", "b"]
        for part in parts:
            on_disk = sum(p.stat().st_size for p in (dest / part).iterdir())
            assert tree + on_disk <= CALL_LIMIT, (part, tree, on_disk)
        assert len([e for e in entries if e.name.endswith(".whl")]) == len(gpu_pack.pins())
        with tarfile.open(dest / next(e.part for e in entries if e.name == gpu_pack.VOICES) / gpu_pack.VOICES) as t:
            assert len([n for n in t.getnames() if n.endswith(".bin")]) == 54
    finally:
        shutil.rmtree(dest, ignore_errors=True)


def test_the_arena_shrinker_model_suits_the_gpu_machines_older_onnxruntime() -> None:
    """Its onnx 1.23 stamps IR version 14 by default, which its onnxruntime 1.30 refused, so the
    embedded engine failed to load there (seen in the Python 3.12 rehearsal of the pack)."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    from gateway.kokoro.onnx_sessions import shrink_model

    data = shrink_model()
    assert onnx.load_from_string(data).ir_version <= 13
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    assert session.run(None, {"x": np.array([2.5], np.float32)})[0].tolist() == [2.5]


async def test_a_bench_gateway_whose_engine_fails_to_load_stops_at_once(tmp_path: Path) -> None:
    """A device call must not wait out the 600 s ready timeout for an engine that never loads."""
    from bench.procs import GatewayProcess

    settings = {"kokoro_dir": str(tmp_path / "missing"), "kokoro_device": "cpu"}
    with pytest.raises(RuntimeError, match="the engine failed to load: EngineError: kokoro_dir"):
        async with GatewayProcess("kokoro", settings, ready_timeout_s=600):
            pass
