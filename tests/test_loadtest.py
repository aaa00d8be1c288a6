"""The load test: knee finder and AWS rule on synthetic data, playback stalls, and real sweeps
on the fake engine whose recommended target must move when the engine is made slower."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest

from bench.loadtest import channel_url, is_loopback, main
from bench.sessions import Plan, run_level
from bench.slo import LevelResult, ServiceLevel, find_knee, invocations_per_instance, playback_stalls, recommend
from tests.conftest import Server, fake_settings


def level(
    c: int, p90: float | None, *, stalled: int = 0, errors: int = 0, rps: float = 1.0, n: int = 10
) -> LevelResult:
    return LevelResult(
        concurrency=c, sessions=n, errors=errors, ttfa_p50_ms=p90, ttfa_p90_ms=p90, stalled_sessions=stalled, rps=rps
    )


SLO = ServiceLevel(ttfa_p90_ms=500)


def test_knee_is_the_last_level_before_the_first_failure() -> None:
    levels = [level(8, 450), level(1, 100), level(2, 150), level(4, 900), level(16, 300)]
    knee = find_knee(levels, SLO)
    assert knee is not None and knee.concurrency == 2  # 16 passes by luck after 4 failed: ignored


def test_knee_fails_on_stalls_errors_or_nothing_completed() -> None:
    assert find_knee([level(1, 100, stalled=1)], SLO) is None
    assert find_knee([level(1, 100, errors=1)], SLO) is None
    assert find_knee([level(1, None)], SLO) is None
    lenient = ServiceLevel(ttfa_p90_ms=500, max_stall_rate=0.2, max_error_rate=0.2)
    knee = find_knee([level(1, 100, stalled=1), level(2, 100, errors=3)], lenient)
    assert knee is not None and knee.concurrency == 1  # 1 of 10 stalled passes; 3 of 10 errors do not


def test_aws_rule_and_recommended_targets() -> None:
    assert invocations_per_instance(2.0) == pytest.approx(60.0)  # 2 rps x 0.5 x 60
    levels = [level(1, 100, rps=0.8), level(2, 200, rps=1.5), level(4, 400, rps=2.5), level(8, 900, rps=3.0)]
    t = recommend(levels, SLO, safety=0.75)
    assert (t.knee, t.concurrent_requests_per_model, t.max_rps) == (4, 3, 2.5)
    assert t.invocations_per_instance == pytest.approx(75.0)  # the failing level's 3.0 rps is not counted
    none = recommend([level(1, 900)], SLO)
    assert none.knee is None and none.concurrent_requests_per_model is None


def test_playback_stalls() -> None:
    arrivals, durations = [0.0, 0.1, 0.5, 0.55], [0.2, 0.2, 0.2, 0.2]
    # plays 0-0.2, 0.2-0.4; the third arrives at 0.5: 0.1 s of silence; the fourth is in time
    stalls, stalled = playback_stalls(arrivals, durations)
    assert stalls == 1 and stalled == pytest.approx(0.1)
    assert playback_stalls(arrivals, durations, buffer_s=0.15) == (0, 0.0)  # a buffer absorbs it
    assert playback_stalls([], []) == (0, 0.0)


def test_targets_must_be_loopback() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("10.0.0.1") and not is_loopback("example.org")
    assert channel_url("http://127.0.0.1:8000", "ws") == "ws://127.0.0.1:8000/v1/stream/ws"
    assert channel_url("ws://127.0.0.1:8000", "sse") == "http://127.0.0.1:8000/v1/stream/sse"
    assert channel_url("ws://127.0.0.1:8080", "ws", container=True).endswith("/invocations-bidirectional-stream")
    with pytest.raises(SystemExit, match="not loopback"):
        main(["--url", "ws://10.1.2.3:8000", "--levels", "1", "--duration", "1"])
    with pytest.raises(SystemExit, match="allow-remote"):
        main(["--endpoint", "my-endpoint", "--levels", "1"])


@pytest.mark.parametrize("channel", ["ws", "sse"])
async def test_stalls_are_seen_when_the_engine_is_slower_than_real_time(
    start_server: Callable[..., Awaitable[Server]], http: aiohttp.ClientSession, channel: str
) -> None:
    plan = Plan(duration_s=0.1, max_sessions=1, channel=channel, fmt="pcm", texts=("one two three four five six",))
    slow = await start_server(fake_settings(fake_rtf=1.5, max_sessions_per_client=0))
    quick = await start_server(fake_settings(fake_rtf=0.2, max_sessions_per_client=0))
    url = {"ws": "/v1/stream/ws", "sse": "/v1/stream/sse"}[channel]
    late = await run_level(http, slow.url + url, 1, plan)
    fine = await run_level(http, quick.url + url, 1, plan)
    assert late.sessions == fine.sessions == 1 and late.errors == fine.errors == 0
    assert late.stalled_sessions == 1 and fine.stalled_sessions == 0
    assert late.rtf_p50 is not None and late.rtf_p50 > 1.2 > 0.5 > (fine.rtf_p50 or 9)


def run_sweep(tmp: Path, rtf: float) -> dict:
    out = tmp / f"rtf{rtf}"
    main(
        [
            "--engine",
            "fake",
            "--set",
            f"fake_rtf={rtf}",
            "--set",
            "max_active_sessions=2",
            "--set",
            "max_queued_sessions=32",
            "--levels",
            "2,4",
            "--duration",
            "1",
            "--format",
            "pcm",
            "--text",
            "please confirm the booking for tonight",
            "--ttfa-p90-ms",
            "300",
            "--safety",
            "1.0",
            "--out",
            str(out),
        ]
    )
    return {"result": json.loads((out / "result.json").read_text()), "out": out}


def test_recommended_target_moves_when_the_engine_is_slower(tmp_path: Path) -> None:
    fast, slow = run_sweep(tmp_path, 0.05), run_sweep(tmp_path, 0.5)
    # two sessions synthesize at once; the rest queue for a slot as long as a reply takes
    assert fast["result"]["recommendation"]["knee"] == 4
    assert slow["result"]["recommendation"]["knee"] == 2
    slow_levels = {r["concurrency"]: r for r in slow["result"]["levels"]}
    assert slow_levels[4]["ttfa_p90_ms"] > 300  # the level that set the knee really failed
    policy = json.loads((fast["out"] / "policy.json").read_text())
    assert policy["TargetValue"] == 4.0
    assert json.loads((slow["out"] / "policy.json").read_text())["TargetValue"] == 2.0
    rps = slow["result"]["recommendation"]["max_rps"]
    assert json.loads((slow["out"] / "policy-invocations.json").read_text())["TargetValue"] == pytest.approx(
        round(rps * 30, 1)
    )
    assert (slow["out"] / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
