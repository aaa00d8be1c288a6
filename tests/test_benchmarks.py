"""The latency benchmarks run briefly on the fake engine, so they cannot rot.

Each runs its real ``main``/``bench`` (real gateways on loopback, real clients) with one
repetition and one or two replies, then checks the JSON it wrote: the expected keys, times
that are positive, and the orderings the fake engine's timing makes certain (streaming's first
audio before batch's when synthesis takes 0.3 s per audio second).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiohttp import web

from bench import agent, overhead, ttfb
from bench import playback as playback_bench
from bench import timestamps as ts_bench
from bench.common import playback, stats
from bench.corpus import REPLIES, agent_prompts
from bench.player import Arrival, simulate
from bench.servers import serve_app
from gateway.agent import pick_reply, tokenize

PNG = b"\x89PNG\r\n\x1a\n"


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


@pytest.mark.parametrize(
    ("arrivals", "durations", "stalls", "stall_ms", "end"),
    [
        ([0.0, 0.1, 0.2], [0.5, 0.5, 0.5], 0, 0.0, 1.5),  # each arrives while the one before plays
        ([0.0, 1.0], [0.4, 0.4], 1, 600.0, 1.4),  # the second arrives 0.6 s after the first ended
        ([0.0, 0.1, 1.0], [0.5, 0.2, 0.5], 1, 300.0, 1.5),  # played to 0.7 s, next at 1.0 s
        ([0.0, 0.405], [0.4, 0.4], 0, 0.0, 0.805),  # 5 ms late is within the jitter tolerance
        ([0.0, 1.0, 2.0], [0.5, 0.5, 0.5], 2, 1000.0, 2.5),  # play resumes at each arrival
    ],
)
def test_playback_finds_stalls(
    arrivals: list[float], durations: list[float], stalls: int, stall_ms: float, end: float
) -> None:
    play = playback(arrivals, durations)
    assert play["stalls"] == stalls
    assert play["stall_ms"] == pytest.approx(stall_ms, abs=0.5)
    assert play["intervals"][-1][1] == pytest.approx(end)


def test_stats_mean_median_p90() -> None:
    s = stats([10.0, 20.0, 30.0, 40.0, 100.0])
    assert (s.n, s.mean, s.median, s.min, s.max) == (5, 40.0, 30.0, 10.0, 100.0)
    assert s.p90 == pytest.approx(76.0)  # linear interpolation between 40 and 100


def test_corpus_and_prompts() -> None:
    ends = [sum(r.count(m) for m in ".!?") for r in REPLIES]
    assert len(REPLIES) == 8 and min(ends) >= 3 and max(ends) <= 8
    prompts = agent_prompts()
    assert len({pick_reply(p) for p in prompts}) == len(prompts) == 5


def test_ttfb_streaming_beats_batch_on_fake(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rtf = 0.15  # the fake engine's pace: low, so the run is quick, high enough to make batch wait
    argv = ["--engines", "fake", "--reps", "1", "--corpus", "2", "--fake-rtf", str(rtf), "--out", str(tmp_path)]
    assert ttfb.main(argv) == 0
    out = load(tmp_path / "ttfb.json")
    assert {"anchor", "engines", "machine_start", "machine_end", "corpus"} <= out.keys()
    # the published figures the run is read against: recorded with it and printed under its table
    anchor = out["anchor"]
    printed = capsys.readouterr().out
    assert f"batch {anchor['batch_mean_ms']} ms, streaming {anchor['stream_mean_ms']} ms" in printed
    assert printed.index("anchor (") > printed.index("ws ")
    fake = out["engines"]["fake"]
    chans = fake["channels"]
    assert set(chans) == {"batch", "ws", "sse"}
    assert all(c["ttfb"]["n"] == 2 and c["ttfb"]["min"] > 0 for c in chans.values())
    for ch in ("ws", "sse"):
        assert chans[ch]["ttfb"]["mean"] < chans["batch"]["ttfb"]["mean"]
        assert fake["improvement"][ch]["mean_pct"] < 0 and fake["improvement"][ch]["speedup_mean"] > 1
        assert "runs_with_stalls" in chans[ch]
    # batch's first byte comes after the whole reply is synthesized: rtf x audio at least
    assert chans["batch"]["ttfb"]["min"] > rtf * 0.24 * 18 * 1000
    lanes = fake["timeline"]["ws"]
    assert lanes["synthesis_ms"] and lanes["received_ms"] and lanes["ttfb_ms"] > 0
    for name in ("ttfb.png", "ttfb-timeline-fake.png"):
        assert (tmp_path / name).read_bytes()[:8] == PNG


def test_first_clause_sweep_on_fake(tmp_path: Path) -> None:
    argv = [
        "--sweep",
        "--engines",
        "fake",
        "--reps",
        "1",
        "--corpus",
        "1",
        "--fake-rtf",
        "0.2",
        "--clause-words",
        "1,4",
        "--out",
        str(tmp_path),
        "--no-plots",
    ]
    assert ttfb.main(argv) == 0
    res = load(tmp_path / "ttfb-sweep.json")["engines"]["fake"]
    assert set(res["channels"]) == {"off", "words=1", "words=4"}
    first = {r["channel"]: r["first_segment"] for r in res["runs"]}
    assert first == {"off": "Sure, I can help with that.", "words=1": "Sure,", "words=4": "Sure, I can help with that."}
    # a one-word first segment is synthesized sooner; the fake engine makes that certain
    assert res["channels"]["words=1"]["ttfb"]["mean"] < res["channels"]["off"]["ttfb"]["mean"]
    assert res["best_for_ttfb"] == "words=1"


def agent_argv(tmp_path: Path, fake_rtf: str, *more: str) -> list[str]:
    """``bench agent`` on the fake engine, one prompt once, writing to ``tmp_path``."""
    return ["--engine", "fake", "--reps", "1", "--prompts", "1", "--fake-rtf", fake_rtf, *more, "--out", str(tmp_path)]


def test_agent_streaming_beats_batch_with_the_same_agent(tmp_path: Path) -> None:
    assert agent.main(agent_argv(tmp_path, "0.05", "--first-token-ms", "100", "--tokens-per-s", "200")) == 0
    out = load(tmp_path / "agent.json")
    assert out["agent"] == {"first_token_ms": 100.0, "tokens_per_s": 200.0}
    sim = out["sources"]["simulated"]
    assert set(sim["channels"]) == {"batch", "ws", "ws_tokens"}
    batch = next(r for r in sim["runs"] if r["channel"] == "batch")
    n_tokens = len(tokenize(batch["reply"]))
    assert batch["reply_ms"] >= 100 + (n_tokens - 1) / 200 * 1000 - 5  # batch waited for the paced reply
    for ch in ("ws", "ws_tokens"):
        assert 100 < sim["channels"][ch]["ttfb"]["mean"] < sim["channels"]["batch"]["ttfb"]["mean"]
        assert sim["improvement"][ch]["speedup_mean"] > 1
    assert {"tokens_ms", "cuts_ms", "synthesis_ms"} <= out["timeline"]["ws (prompt)"].keys()
    assert len(out["timeline"]["ws (prompt)"]["tokens_ms"]) > 10
    assert (tmp_path / "agent-timeline.png").read_bytes()[:8] == PNG


async def test_agent_with_an_openai_compatible_llm(tmp_path: Path) -> None:
    """A loopback stand-in streams chat-completion chunks; the bench feeds them to the gateway."""
    tokens = tokenize("Sure, I can check that. Your order ships today. It should arrive on Friday.")
    seen: list[dict[str, Any]] = []

    async def chat(request: web.Request) -> web.StreamResponse:
        seen.append(await request.json())
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await asyncio.sleep(0.05)
        for tok in tokens:
            chunk = {"choices": [{"index": 0, "delta": {"content": tok}}]}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
            await asyncio.sleep(0.005)
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    async with serve_app(app) as llm_url:
        argv = agent_argv(tmp_path, "0.1", "--llm-url", f"{llm_url}/v1", "--llm-model", "tiny", "--no-simulated")
        args = agent.parse_args([*argv, "--no-plots"])
        out = await agent.bench(args)
    res = out["sources"]["llm:tiny"]
    assert set(res["channels"]) == {"batch", "ws_tokens"}
    assert next(r["reply"] for r in res["runs"] if r["channel"] == "batch") == "".join(tokens)
    assert seen[-1]["model"] == "tiny" and seen[-1]["stream"] is True
    assert seen[-1]["messages"][-1]["role"] == "user"
    assert 50 < res["channels"]["ws_tokens"]["ttfb"].mean < res["channels"]["batch"]["ttfb"].mean


def test_overhead_parts_add_up_on_fake(tmp_path: Path) -> None:
    assert overhead.main(["--engines", "fake", "--reps", "2", "--out", str(tmp_path), "--no-plots"]) == 0
    res = load(tmp_path / "overhead.json")["engines"]["fake"]
    assert set(res["overhead"]) == {"ws", "sse", "ws_split"}
    assert res["channels"]["engine"]["ttfb"]["min"] > 0
    for r in res["runs"]:
        if r["channel"] != "engine":
            # input + engine + output is the client's time to first audio, on one clock
            assert r["input_ms"] + r["engine_ms"] + r["output_ms"] == pytest.approx(r["ttfb_ms"], abs=0.01)
            assert min(r["input_ms"], r["engine_ms"], r["output_ms"]) > 0
    for o in res["overhead"].values():
        assert {"overhead_ms", "in_run_ms", "target_met"} <= o.keys()
        assert 0 < o["in_run_ms"] < 1000 and abs(o["overhead_ms"]) < 1000


def paced(rtf: float, chunks: int, preroll_s: float | None = None) -> list[Arrival]:
    """``chunks`` seconds of audio, one per second of it, each ready ``rtf`` s after the last."""
    head = [Arrival(0.0, preroll_s=preroll_s)] if preroll_s is not None else []
    audio = [Arrival(rtf * k, audio_s=1.0) for k in range(1, chunks + 1)]
    return head + audio + [Arrival(rtf * chunks, done=True)]


@pytest.mark.parametrize(
    ("arrivals", "start", "stalls", "stall_s", "end"),
    [
        # synthesis slower than playback (RTF 1.3), no preroll: dry 0.3 s before every later chunk
        (paced(1.3, 4), 1.3, 3, 0.9, 6.2),
        # a preroll of one chunk does not cover the deficit: the same stalls
        (paced(1.3, 4, preroll_s=1.0), 1.3, 3, 0.9, 6.2),
        # two chunks held cover it (start 2.6 s: chunk k is due at 0.6 + k s, arrives at 1.3 k s)
        (paced(1.3, 4, preroll_s=2.0), 2.6, 0, 0.0, 6.6),
        # a preroll longer than the reply: playback starts at done, then never runs dry
        (paced(1.3, 4, preroll_s=10.0), 5.2, 0, 0.0, 9.2),
        # the latest preroll is in force: raised to 2 s at 1.5 s, after the start; resumed at 3.9 s
        (sorted(paced(1.3, 4, preroll_s=0.0) + [Arrival(1.5, preroll_s=2.0)], key=lambda a: a.t_s), 1.3, 1, 1.6, 6.9),
        # synthesis faster than playback: no stall without any preroll
        (paced(0.3, 4), 0.3, 0, 0.0, 4.3),
    ],
)
def test_player_honours_the_preroll_in_force(
    arrivals: list[Arrival], start: float, stalls: int, stall_s: float, end: float
) -> None:
    p = simulate(arrivals)
    assert p.first_audio_s == pytest.approx(next(a.t_s for a in arrivals if a.audio_s))
    assert p.start_s == pytest.approx(start)
    assert p.stalls == stalls and len(p.gaps) == stalls
    assert p.stall_s == pytest.approx(stall_s)
    assert p.end_s == pytest.approx(end)
    assert p.audio_s == pytest.approx(4.0)
    # what the player holds back it plays later: the end is the start plus audio plus stalls
    assert p.end_s == pytest.approx(p.start_s + p.audio_s + p.stall_s)


def test_player_counts_only_rebuffers_after_the_start_and_above_the_tolerance() -> None:
    arrivals = [
        Arrival(0.5, audio_s=0.1),
        Arrival(0.605, audio_s=1.0),
        Arrival(2.0, audio_s=0.5),
        Arrival(2.0, done=True),
    ]
    p = simulate(arrivals, tolerance_s=0.01)
    assert (p.start_s, p.stalls) == (0.5, 1)  # the wait for the first payload is not a stall; 5 ms is jitter
    assert p.gaps[0] == pytest.approx((1.605, 2.0))
    assert p.end_s == pytest.approx(2.5)


def test_playback_bench_on_fake(tmp_path: Path) -> None:
    argv = [
        "--engines",
        "fake",
        "--rtfs",
        "0.3",
        "--reps",
        "1",
        "--out",
        str(tmp_path),
        "--text",
        "Sure, I can help with that. Your table is booked for seven.",
    ]
    assert playback_bench.main(argv) == 0
    out = load(tmp_path / "playback.json")
    assert {"text", "reps", "engines", "runs", "rows", "machine_start", "machine_end", "preroll_seen"} <= out.keys()
    assert out["engines"] == {"fake rtf 0.3": {"engine": "fake", "fake_rtf": 0.3}}
    kinds = {(r["scenario"], r["channel"]) for r in out["rows"]}
    assert kinds == {
        ("one channel", "batch"),
        ("one channel", "ws"),
        ("both channels", "sse"),
        ("both channels", "ws"),
        ("busy core", "ws"),
        ("busy core", "batch"),
    }
    words = len(argv[-1].split())
    for r in out["runs"]:
        assert r["audio_s"] == pytest.approx(words * 0.24, abs=0.01)  # the fake's 240 ms a word, all of it
        if r["channel"] == "batch":
            assert r["batch_ms"] >= 0.3 * r["audio_s"] * 1000 * 0.95  # paced at RTF 0.3
            continue
        assert 0 < r["first_audio_ms"] <= r["start_ms"] < r["end_ms"]
        assert r["first_audio_ms"] <= r["oracle_ms"] <= r["end_ms"]
        assert r["stalls"] >= 0 and r["stall_ms"] >= 0 and len(r["gaps_ms"]) == r["stalls"]
        assert r["end_ms"] == pytest.approx(r["start_ms"] + r["audio_s"] * 1000 + r["stall_ms"], abs=1.0)
        assert r["start_vs_batch"] > 0
    assert (tmp_path / "playback.png").read_bytes()[:8] == PNG


def test_timestamp_windows_cover_the_words_and_cut_where_told() -> None:
    words = [{"word": w, "start_ms": 100 * i, "end_ms": 100 * i + 80} for i, w in enumerate("a b c d e f g".split())]
    assert [[w["word"] for w in win] for win in ts_bench.windows(words)] == [["a", "b", "c"], ["d", "e", "f", "g"]]
    assert [len(win) for win in ts_bench.windows(words[:5])] == [3, 2]
    assert ts_bench.heard(["a", "b", "c"], ["x", "a", "c", "b"]) == 2  # in order: a then c (or b)
    audio = np.arange(2400, dtype=np.float32)  # 100 ms at 24 kHz, sample i holds i
    clip = ts_bench.Clip(audio, 24000, tuple(words))
    got = ts_bench.cut(clip, [{"word": "x", "start_ms": 20, "end_ms": 50}], 10, pad_s=0.001)
    assert got[:24].tolist() == [0.0] * 24 and got[-24:].tolist() == [0.0] * 24  # 1 ms of silence each side
    assert got[24:-24].tolist() == audio[720:1440].tolist()  # 30..60 ms: moved by 10 ms
    assert len(ts_bench.cut(clip, [{"word": "x", "start_ms": 90, "end_ms": 200}], 250, pad_s=0)) == 0


@pytest.mark.slow
async def test_timestamp_measurement_fails_when_the_times_move() -> None:
    """The method behind ``bench timestamps`` on real speech: windows cut at the model's word
    times are heard better than the same windows moved 250 ms either way."""
    from gateway.config import Settings
    from gateway.engines.embedded import EmbeddedEngine
    from gateway.kokoro.timestamps import words_of

    engine = EmbeddedEngine(Settings(embedded_vocoder="exact"))
    await engine.start()
    try:
        assert await engine.wait_vocoder("af_heart"), engine.vocoder_status
        text = ts_bench.TEXTS[1]
        clip = await ts_bench.direct_clip(engine, text, "af_heart", 1.0)
    finally:
        await engine.aclose()
    assert [w["word"] for w in clip.words] == words_of(text)
    starts = [w["start_ms"] for w in clip.words]
    assert starts == sorted(starts) and clip.words[-1]["end_ms"] <= 1000 * len(clip.audio) / clip.rate
    scores = await asyncio.to_thread(ts_bench.score, clip, shifts=(0, -250, 250))
    recall = {s: scores[s]["recall"] for s in scores}
    assert recall[-250] < recall[0] and recall[250] < recall[0], recall


def test_listeners_bench_on_fake(tmp_path: Path) -> None:
    from bench import listeners as listeners_bench
    from gateway.engines.fake import fake_duration_s

    argv = ["--engines", "fake", "--rtfs", "0.1", "--max-n", "2", "--out", str(tmp_path)]
    assert listeners_bench.main(argv) == 0
    out = load(tmp_path / "listeners.json")
    (engine,) = out["engines"]
    assert engine["engine"] == "fake rtf 0.1" and [r["n"] for r in engine["per_n"]] == [1, 2]
    assert engine["rtf"] == pytest.approx(0.1, rel=0.5) and 1 <= engine["capacity"] <= 2
    for r in engine["per_n"]:
        assert r["admitted"] + r["queued"] + r["refused"] + r["errors"] == r["n"] == len(r["listeners"])
        for k, row in enumerate(r["listeners"]):
            if row["outcome"] in ("admitted", "queued"):
                assert row["audio_s"] == pytest.approx(fake_duration_s(listeners_bench.paragraph(k)), abs=0.01)
                assert row["first_audio_s"] <= row["start_s"] and row["oracle_s"] >= row["first_audio_s"] - 1e-3


def test_firstreply_bench_on_fake(tmp_path: Path) -> None:
    from bench import firstreply

    argv = [
        "--engine",
        "fake",
        "--out",
        str(tmp_path),
        "--set",
        "fake_rtf=0.1",
        "--text",
        "Hello there! This is a short reply.",
    ]
    assert firstreply.main(argv) == 0
    out = load(tmp_path / "firstreply.json")
    orders = {o["order"]: o for o in out["orders"]}
    assert set(orders) == {"ready-first", "prepared"}
    for o in orders.values():
        assert [r["reply"] for r in o["replies"]] == ["first (cold)", "second", "play both: sse", "play both: ws"]
        assert {r["audio_s"] for r in o["replies"]} == {o["audio_s"]} and o["audio_s"] > 0
        assert all(r["start_vs_batch"] > 0 for r in o["replies"])
    # the rate warm-up runs after the ready line only in the old order
    measured = [any("engine rate measured" in line for line in o["log_after_ready"]) for o in orders.values()]
    assert measured == [True, False]


def test_engine_paths_groups_and_accounting_add_up() -> None:
    """The paths bench pairs each sentence with the segments cut from it, and its accounting
    splits the exact path's extra time into parts that add up to the gap (no model here)."""
    import re

    from bench import engine_paths
    from bench.corpus import SENTENCES
    from bench.engine_profile import Call, Run

    segs = engine_paths.segments(engine_paths.TEXT)
    sentences = list(SENTENCES[4:8])
    groups = engine_paths.groups(sentences, segs)
    assert [" ".join(segs[i] for i in g) for g in groups] == sentences
    assert [i for g in groups for i in g] == list(range(len(segs)))
    assert len(groups[0]) == 2  # the first sentence is cut at its first clause

    bare = engine_paths.BareCall
    out = {
        "fit": (0.02, 0.01),
        "g2p_s": 0.01,
        "bare": {
            engine_paths.BARE[0]: [[bare(1.0, 80, 40000)]],
            engine_paths.BARE[1]: [[bare(0.6, 45, 20000), bare(0.5, 40, 19000)]],
        },
        "profile": [{"exact": [Run("exact", 1.3, 0.7, 1.6, [Call("whole", 45, 0.6), Call("whole", 40, 0.55)])]}],
    }
    line = engine_paths.accounting(out)[-1]
    parts = re.search(
        r"gap (\S+) = segmentation (\S+) \(\+1 call, \+5 frames: predicted (\S+)\) \+ engine calls (\S+) "
        r"\+ G2P (\S+) \+ other (\S+);",
        line,
    )
    assert parts is not None, line
    gap, seg, predicted, calls, g2p, other = (float(x) for x in parts.groups())
    assert (gap, seg, calls, g2p, other) == (300, 100, 50, 10, 140)
    assert seg + calls + g2p + other == gap
    assert predicted == 20 + 50  # one more call's fixed cost, five more frames


def test_engine_profile_window_costs_per_path() -> None:
    """The per-window table compares the same window's calls across policies (no model here):
    medians per window, counts, and each path's total per repetition."""
    from bench.engine_profile import Call, Run, window_costs

    def run(path: str, *calls: Call) -> Run:
        return Run(path, 1.0, 0.1, 1.0, list(calls))

    reps = [
        {
            "exact": [run("exact", Call("whole", 60, 0.5))],
            "frozen-first": [run("frozen-first", Call("frozen", 14, 0.10), Call("frozen", 14, 0.14))],
        },
        {
            "exact": [run("exact", Call("whole", 60, 0.5))],
            "frozen-first": [run("frozen-first", Call("frozen", 14, 0.12), Call("exact", 70, 0.4))],
        },
    ]
    lines = window_costs(reps)
    assert lines[1] == "  frozen frozen-first: 180 ms a repetition; 14: 120 (3)"
    assert lines[2] == "  exact frozen-first: 200 ms a repetition; 70: 400 (1)"
    assert len(lines) == 3  # the exact path's whole-model calls are neither kind
