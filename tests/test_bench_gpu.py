"""``bench gpu``: the prepared GPU script, run here in its dry mode (the CPU, no installs).

On a GPU host it measures the same path on CUDA; here the test checks that the script, its
preparation (float graphs, converted weights) and its measurements over the gateway's real
WebSocket path work end to end, and that it says what it would install.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import onnxruntime as ort
import pytest

from bench.gpu import Config, install_plan, parse_configs
from bench.gpu_device import listeners_command

ROOT = Path(__file__).resolve().parent.parent


def test_configs_parse_and_a_dry_run_stays_on_the_cpu() -> None:
    configs = parse_configs("embedded:fp16:cuda,kokoro:fp32:cuda", dry_run=False)
    assert [c.name for c in configs] == ["embedded:fp16:cuda", "kokoro:fp32:cuda"]
    assert configs[0].settings(Path("/k"))["embedded_provider"] == "cuda"
    assert configs[1].settings(Path("/k"))["kokoro_dir"] == "/k"
    # every repetition synthesizes: with the reply cache on, all but the first were cache hits
    # (2 ms "first audio" on the H200, 4 December)
    assert {c.settings(Path("/k"))["cache_mb"] for c in configs} == {"0"}
    assert [c.device for c in parse_configs("embedded:fp32:cuda,embedded:fp32:cpu", dry_run=True)] == ["cpu"]
    for bad in ("embedded:int4:cuda", "kokoro:fp16:cuda", "torch:fp32:cpu", "embedded:fp32"):
        with pytest.raises(ValueError, match="expected"):
            parse_configs(bad, dry_run=False)


def test_install_plan_asks_for_onnxruntime_gpu_where_cuda_is_missing() -> None:
    plan = [" ".join(c) for c in install_plan([Config("embedded", "fp16", "cuda")])]
    if "CUDAExecutionProvider" in ort.get_available_providers():
        assert plan == []
    else:
        assert any("uninstall" in c and c.endswith("onnxruntime") for c in plan)
        assert any(c.endswith("install -q onnxruntime-gpu") for c in plan)
    assert install_plan([Config("embedded", "fp32", "cpu")]) == []


@pytest.mark.slow
def test_dry_run_measures_both_engines_over_the_websocket(tmp_path: Path) -> None:
    out = tmp_path / "gpu.json"
    proc = subprocess.run(
        [
            sys.executable,
            "run_gateway.py",
            "bench",
            "gpu",
            "--dry-run",
            "--configs",
            "embedded:fp32:cuda,kokoro:fp32:cuda",
            "--out",
            str(out),
            "--kokoro-dir",
            str(tmp_path / "kokoro-82m"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["dry_run"] and report["reps"] == 1 and report["anchor"]["stream_mean_ms"] == 156.7
    assert [r["config"] for r in report["rows"]] == ["embedded:fp32:cpu", "kokoro:fp32:cpu"]
    for row in report["rows"]:
        assert 0 < row["short_first_ms"] and 0 < row["long_first_ms"] and row["rtf"] > 0
        assert row["reply_audio_s"] > 5  # real speech: three sentences
    assert (tmp_path / "kokoro-82m" / "kokoro-v1_0.pth").exists()
    assert "156.7" in proc.stdout and "embedded:fp32:cpu" in proc.stdout
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        assert "would run:" in proc.stdout and "onnxruntime-gpu" in proc.stdout


def test_the_device_script_follows_the_torch_cuda_figures_with_bench_listeners(tmp_path: Path) -> None:
    args = argparse.Namespace(configs="embedded:int8:cpu,kokoro:fp32:cuda", listeners=9)
    command = listeners_command(args, tmp_path, tmp_path / "out")
    assert command is not None and command[1:4] == ["run_gateway.py", "bench", "listeners"]
    assert f"kokoro_dir={tmp_path}/cache/kokoro-gateway/kokoro-82m" in command and "kokoro_device=cuda" in command
    assert command[command.index("--max-n") + 1] == "9"
    args.listeners = 0
    assert listeners_command(args, tmp_path, tmp_path / "out") is None
    args.listeners, args.configs = 9, "embedded:int8:cpu"
    assert listeners_command(args, tmp_path, tmp_path / "out") is None
