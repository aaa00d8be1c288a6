"""``bench clients`` runs briefly on the fake engine, so it cannot rot: without the clients' venv
its LiveKit and Pipecat rows are skipped with a note (``tests/clients`` covers those clients),
and the rows it measures here order as the fake engine's timing makes certain."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import clients


def test_bench_clients_without_the_clients_venv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--rounds", "1", "--fake-rtf", "0.1", "--clients-python", str(tmp_path / "none"), "--out", str(tmp_path)]
    assert clients.main(argv) == 0
    out = json.loads((tmp_path / "clients.json").read_text())
    rows = out["clients"]
    assert set(rows) == {"ws", "openai-sdk", "openai-sdk-batch"}
    assert "LiveKit and Pipecat skipped" in out["notes"][0]
    assert {row["audio_s"] for row in rows.values()} == {9.36}  # the same reply: 39 words of 240 ms
    # the whole reply at 0.1 s per audio second comes after the first sentence of a stream
    assert rows["openai-sdk-batch"]["first_ms"]["min"] > max(
        rows["ws"]["first_ms"]["max"], rows["openai-sdk"]["first_ms"]["max"]
    )
    assert "openai-sdk-batch" in capsys.readouterr().out
