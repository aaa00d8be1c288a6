"""``bench firstreply --browser`` in Chromium on the fake engine: both first presses (the moment
the page's scripts are ready, and once the browser is idle) play through, side by side."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.transports import CHROMIUM

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium"),
]


def test_first_press_when_ready_and_when_settled(tmp_path: Path) -> None:
    from bench import firstreply

    argv = ["--engine", "fake", "--browser", "--orders", "prepared", "--press", "ready", "settled"]
    argv += ["--set", "fake_rtf=0.2", "--text", "Hello there! This is a short reply.", "--out", str(tmp_path)]
    assert firstreply.main(argv) == 0
    out = json.loads((tmp_path / "firstreply.json").read_text())
    ready, settled = out["orders"]
    assert (ready["press"], settled["press"]) == ("ready", "settled")
    # pressed when its scripts were ready; or after the page went quiet, which takes at least a window
    assert ready["pressed_ms"] - ready["page_open_ms"] < 200
    assert settled["pressed_ms"] - settled["page_open_ms"] >= 250
    for o in out["orders"]:
        rows = {r["reply"]: r for r in o["replies"]}
        assert set(rows) == {f"{p}: {n}" for p in ("first (cold)", "second") for n in ("sse", "ws")}
        for r in rows.values():
            assert r["error"] is None and r["gaps"] == 0
            assert 0 < r["first_audio_ms"] <= r["sound_ms"] and r["start_vs_batch"] > 0
