"""The text front-end's benchmarks run and report both variants: ``bench text`` (its own cost,
on against off) and ``bench ttfb --frontend-compare`` (first audio, on against off). No
assertion on speed: the ratios are the benchmarks' to print."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import text as text_bench
from bench import ttfb
from bench.corpus import MARKDOWN_REPLIES

from .test_benchmarks import load


def test_ttfb_frontend_compare_on_fake(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--frontend-compare", "--engines", "fake", "--reps", "1", "--corpus", "2", "--fake-rtf", "0.15"]
    assert ttfb.main([*argv, "--out", str(tmp_path), "--no-plots"]) == 0
    out = load(tmp_path / "ttfb-frontend.json")
    assert out["corpus"] == list(MARKDOWN_REPLIES[:2])
    res = out["engines"]["fake"]
    assert set(res["channels"]) == {"frontend on", "frontend off"}
    assert all(c["ttfb"]["n"] == 2 and c["ttfb"]["min"] > 0 for c in res["channels"].values())
    assert res["ratio_on_off"]["mean"] > 0 and res["ratio_on_off"]["median"] > 0
    # the option reached the gateway: the second reply's first segment keeps its markdown only when off
    first = {r["channel"]: r["first_segment"] for r in res["runs"] if r["reply"] == 1}
    assert "**" in first["frontend off"] and "**" not in first["frontend on"]
    printed = capsys.readouterr().out
    assert "frontend on" in printed and "front-end on/off: mean" in printed


def test_text_bench_on_and_off(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert text_bench.main(["--reps", "1", "--warmup", "1", "--corpus", "2", "--out", str(tmp_path)]) == 0
    out = load(tmp_path / "text.json")
    assert set(out["modes"]) == {"on", "off"}
    for mode in out["modes"].values():
        assert set(mode) == {"per segment", "per token", "construct"}
        assert mode["per segment"]["n"] == 2 and mode["per token"]["n"] == sum(out["tokens"]) > 10
        assert all(m["p50"] > 0 and m["p99"] >= m["p50"] for m in mode.values())
    assert all(r["p50"] > 0 and r["p99"] > 0 for r in out["ratio_on_off"].values())
    assert min(out["segments"]["on"]) >= 1 and out["spoken_changes"]["spoken_differs"] >= 1
    printed = capsys.readouterr().out
    assert "on p50" in printed and "off p99" in printed and "per token" in printed
