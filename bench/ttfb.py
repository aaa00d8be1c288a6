"""Time to first audio: batch synthesis against per-sentence streaming, per engine.

``run_gateway.py bench ttfb`` starts a gateway on a free loopback port for each engine (or
measures the one at ``--url``) and speaks a fixed corpus of agent-like replies three ways,
interleaved (batch, ws, sse, batch, ws, ...) after a warm-up that is not counted:

* batch: ``POST /v1/audio/speech`` with the whole reply; time to the first body byte;
* ws: the WebSocket channel, the reply as one ``text`` message; time to the first audio frame;
* sse: the SSE channel (POST); time to the first ``audio`` event;
* ws-vocoder (engines that stream inside a segment, i.e. the embedded one): the WebSocket
  with ``vocoder=frozen-first``, the first segment's audio in vocoder chunks. ws and sse are
  then pinned to ``vocoder=exact``: whole segments, the per-sentence baseline.

Engines: ``embedded``; ``fake`` calibrated to the embedded engine measured in the same run
(its compute per audio second, per-call delay, audio per word and whole-segment chunks; or
``--fake-rtf``); ``container`` (a model container subprocess behind the container engine)
and ``kokoro`` (torch, CUDA only) where available, else skipped with a note. The WebSocket
runs are also checked for playback stalls. ``--sweep`` instead compares the first-clause fast
path off and at several word thresholds (one gateway per value, one shared engine).
``--frontend-compare``: the text front-end on against off (``bench/ttfb_frontend.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from gateway.engines.fake import GAP_S, WORD_S
from gateway.text.segmenter import split_text

from .common import (
    RESULTS_DIR,
    Probe,
    Target,
    bench_settings,
    gateway,
    measure,
    post_speech,
    recorded,
    run_published,
    stall_cell,
    stream_run,
    summarize,
    table,
    timeline,
)
from .corpus import corpus, markdown_corpus
from .plots import plot_timeline
from .procs import GatewayProcess
from .remote import RemoteClient
from .ttfb_frontend import render_frontend, run_frontend_compare

ANCHOR = {
    "batch_mean_ms": 329.3,
    "stream_mean_ms": 156.7,
    "improvement_pct": -52.4,
    "speedup": round(329.3 / 156.7, 2),
    "where": "per-sentence streaming vs batch, g5 GPU",
}
ENGINE_ORDER = ("embedded", "fake", "container", "kokoro")
DEFAULT_ENGINES = "embedded,fake"  # container, kokoro: add them (each adds a pass as long as embedded)
DEFAULT_RTF = 0.35  # DESIGN's measured embedded RTF, used only when nothing better is known
WARMUP = "Hi there, warming up. Not counted."

# -- one run on one channel ----------------------------------------------------------------


def batch_probe(t: Target, fields: dict[str, Any]) -> Probe:
    async def probe(http: aiohttp.ClientSession, text: str) -> dict[str, Any]:
        b = await post_speech(http, t.speech_url, text, **fields)
        return {"ttfb_ms": b.ttfb_ms, "total_ms": b.total_ms}

    return probe


def stream_probe(t: Target, channel: str, fields: dict[str, Any], client: RemoteClient, **options: Any) -> Probe:
    """A streaming channel, read by the client process (see ``RemoteClient``)."""
    url = t.sse_url if channel == "sse" else t.ws_url

    async def probe(http: aiohttp.ClientSession, text: str) -> dict[str, Any]:
        return stream_run(await client.run(channel, url, text, {**fields, **options}), f"{channel} on {t.name}")

    return probe


# -- engines ---------------------------------------------------------------------------------


async def calibrate(t: Target, texts: list[str], voice: str = "") -> dict[str, Any]:
    """The embedded engine's cost per call and per audio second, and its audio per word.

    Times the engine directly on segments of the corpus (the gateway's own cuts, short and
    long) and fits compute = delay + rtf x audio, which is what the fake engine simulates.
    """
    engine = t.engine
    if engine is None:
        raise RuntimeError("calibration needs the engine in this process")
    cut = t.settings.first_clause_words
    segments = [s for text in texts[:4] for s in split_text(text, first_clause_words=cut)[:2]]
    points = []
    for seg in segments:
        t0, samples = time.perf_counter(), 0
        exact = "exact" if engine.vocoder_modes else None  # the fake simulates whole segments
        async for pcm in engine.synthesize(seg, voice=voice or engine.default_voice, speed=1.0, vocoder=exact):
            samples += len(pcm) // 2
        points.append((time.perf_counter() - t0, samples / engine.sample_rate, len(seg.split())))
    compute, audio, words = (np.array(c, float) for c in zip(*points))
    if len(set(audio)) > 1:
        slope, intercept = np.polyfit(audio, compute, 1)
    else:
        slope, intercept = compute.sum() / audio.sum(), 0.0
    per_word = float(audio.sum() / words.sum())
    return {
        "rtf": round(float(compute.sum() / audio.sum()), 3),
        "fit_rtf": round(float(slope), 3),
        "fit_delay_ms": round(max(0.0, float(intercept)) * 1000, 1),
        "audio_s_per_word": round(per_word, 3),
        "fake_speed": round(min(2.0, max(0.5, (WORD_S + GAP_S) / per_word)), 3),
        "segments": [
            {"text": s, "compute_s": round(c, 3), "audio_s": round(a, 3)} for s, (c, a, _) in zip(segments, points)
        ],
    }


def fake_overrides(args: argparse.Namespace, cal: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any], str]:
    """Settings and request fields for the fake engine, and where its speed came from."""
    if args.fake_rtf is not None:
        rtf, delay, speed, note = args.fake_rtf, args.fake_first_delay_ms, args.fake_speed, "from --fake-rtf"
    elif cal is not None:
        rtf, delay, speed = cal["fit_rtf"], cal["fit_delay_ms"], cal["fake_speed"]
        note = "calibrated to the embedded engine measured in this run"
    else:
        rtf, delay, speed, note = DEFAULT_RTF, 0.0, 1.0, f"embedded not measured: DESIGN's RTF {DEFAULT_RTF}"
    # one chunk per segment, like the embedded engine (it yields a segment's audio at once)
    settings = {"fake_rtf": rtf, "fake_first_delay_ms": delay, "fake_chunk_ms": 600_000}
    return settings, ({"speed": speed} if speed != 1.0 else {}), note


@contextlib.asynccontextmanager
async def container_target(args: argparse.Namespace, inside: dict[str, Any]) -> Any:
    """A model container (``inside``: its settings) in a subprocess, and a gateway in front."""
    settings = {"log_level": "WARNING", **{k: str(v) for k, v in inside.items()}}
    async with GatewayProcess(args.container_engine, settings, command="container") as box:
        async with gateway(bench_settings("container", args.set, container_url=box.ws_url)) as t:
            yield t


def skip_reason(name: str, args: argparse.Namespace) -> str | None:
    if name == "container":
        missing = [
            m for m in ("gateway.engines.container", "gateway.web.container") if importlib.util.find_spec(m) is None
        ]
        return f"skipped: {', '.join(missing)} not in this tree" if missing else None
    if name == "kokoro":
        if importlib.util.find_spec("gateway.engines.kokoro") is None or importlib.util.find_spec("torch") is None:
            return "skipped: the torch engine (gateway/engines/kokoro.py + torch) is not installed"
        import torch

        if not torch.cuda.is_available():
            return "skipped: no CUDA GPU on this machine"
        if not bench_settings("kokoro", args.set).kokoro_dir:
            return "skipped: set kokoro_dir (--set kokoro_dir=PATH) to the weights folder"
    return None


async def run_engines(
    http: aiohttp.ClientSession, client: RemoteClient, args: argparse.Namespace, texts: list[str], out: dict[str, Any]
) -> None:
    cal: dict[str, Any] | None = None
    names = [n for n in ENGINE_ORDER if n in args.engines] + [n for n in args.engines if n not in ENGINE_ORDER]
    for name in names:
        if (reason := skip_reason(name, args)) is not None:
            out["engines"][name] = {"skipped": reason}
            continue
        fields: dict[str, Any] = {"voice": args.voice} if args.voice else {}
        note, fsets = "", {}
        if name in ("fake", "container"):
            fsets, speed, note = fake_overrides(args, cal)
            if name == "fake" or args.container_engine == "fake":
                fields.update(speed)
        if name == "container":
            ctx = container_target(args, fsets if args.container_engine == "fake" else {})
        else:
            ctx = gateway(bench_settings(name, args.set, **(fsets if name == "fake" else {})))
        async with ctx as t:
            if name == "embedded" and "fake" in args.engines and args.fake_rtf is None:
                # the plain replies: the engine is called directly, without the front-end
                cal = out["calibration"] = await calibrate(t, corpus() if args.frontend_compare else texts, args.voice)
            runner = run_frontend_compare if args.frontend_compare else run_target
            out["engines"][name] = await runner(http, client, t, fields, texts, args, note)


async def vocoder_ready(http: aiohttp.ClientSession, t: Target, wait_s: float = 600.0) -> bool:
    """Whether the gateway streams inside a segment, once its background build is done
    (first start on a machine: the default voice's calibration, about 10-30 s)."""
    deadline = time.monotonic() + wait_s
    while True:
        async with http.get(t.url + "/readyz") as resp:
            state = ((await resp.json()).get("vocoder") or {}).get("state", "off")
        if state == "ready":
            return True
        if state == "off" or state.startswith("failed") or time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.5)


async def run_target(
    http: aiohttp.ClientSession,
    client: RemoteClient,
    t: Target,
    fields: dict[str, Any],
    texts: list[str],
    args: argparse.Namespace,
    note: str = "",
) -> dict[str, Any]:
    # an engine that streams inside a segment: per-sentence channels pinned to the exact
    # vocoder, plus the WebSocket with the chunked one (frozen-first), side by side
    chunked = not args.no_vocoder and await vocoder_ready(http, t)
    per_sentence = {**fields, "vocoder": "exact"} if chunked else fields
    probes = {
        "batch": batch_probe(t, fields),
        "ws": stream_probe(t, "ws", per_sentence, client),
        "sse": stream_probe(t, "sse", per_sentence, client),
    }
    if chunked:
        probes["ws-vocoder"] = stream_probe(t, "ws", {**fields, "vocoder": "frozen-first"}, client)
    result = summarize(await measure(http, probes, texts, args.reps, WARMUP, t.name))
    result.update(note=note, request=fields)
    if not args.no_plots and t.engine is not None:
        lanes = {}
        for ch, opts in (("ws", {"envelope": "msgpack"}), ("sse", {})):
            r = await client.run(ch, t.sse_url if ch == "sse" else t.ws_url, texts[-1], {**fields, **opts})
            lanes[ch] = timeline(
                r, bitrate=64, first_clause_words=t.settings.first_clause_words, max_chars=t.settings.max_segment_chars
            )
        plot_timeline(args.out / f"ttfb-timeline-{t.name}.png", f"{t.name}: one reply, text sent whole", lanes)
        result["timeline"] = lanes
    return result


async def run_sweep(
    http: aiohttp.ClientSession, client: RemoteClient, args: argparse.Namespace, texts: list[str], out: dict[str, Any]
) -> None:
    """The first-clause fast path off, and on at each word threshold: one gateway per value."""
    name = args.engines[0]
    fsets, fields, note = fake_overrides(args, None) if name == "fake" else ({}, {}, "")
    fields = {**fields, **({"voice": args.voice} if args.voice else {})}
    base = bench_settings(name, args.set, **fsets)
    async with contextlib.AsyncExitStack() as stack:
        first = await stack.enter_async_context(gateway(base))
        probes = {"off": stream_probe(first, "ws", fields, client, first_clause=False)}
        for words in args.clause_words:
            t = (
                first
                if words == base.first_clause_words
                else await stack.enter_async_context(
                    gateway(base.replace(first_clause_words=words), f"{name}-w{words}", engine=first.engine)
                )
            )
            probes[f"words={words}"] = stream_probe(t, "ws", fields, client)
        result = summarize(await measure(http, probes, texts, args.reps, WARMUP, f"sweep {name}"), baseline="off")
    chans = result["channels"]
    best = min((c for c in chans if c != "off"), key=lambda c: (chans[c]["ttfb"].median, chans[c]["ttfb"].mean))
    out["engines"][name] = {**result, "note": note, "best_for_ttfb": best}


def channel_rows(groups: dict[str, Any], improvement: tuple[tuple[str, str], ...]) -> list[list[Any]]:
    """A table row per group and channel of ``summarize`` results (skipped groups left out): the
    first audio's n, mean, median and p90, a cell per ``(key, format)`` of the channel's
    improvement (blank for the baseline), the last audio's mean, the stalls."""
    rows: list[list[Any]] = []
    for name, res in groups.items():
        for ch, e in res["channels"].items() if "skipped" not in res else ():
            t, imp = e["ttfb"], res["improvement"].get(ch)
            cells = [form.format(imp[key]) if imp else "" for key, form in improvement]
            rows.append([name, ch, t.n, t.mean, t.median, t.p90, *cells, e["total"].mean, stall_cell(e)])
    return rows


def render(out: dict[str, Any], sweep: bool) -> str:
    if out["bench"] == "ttfb-frontend":
        return render_frontend(out)
    base = "off" if sweep else "batch"
    headers = [
        "engine",
        "variant" if sweep else "channel",
        "n",
        "mean ms",
        "median",
        "p90",
        f"vs {base}",
        "speed-up",
        "last audio ms",
        "stalls (runs, total)",
    ]
    rows = channel_rows(out["engines"], (("mean_pct", "{:+.1f}%"), ("speedup_mean", "{:.2f}x")))
    lines = [table(headers, rows)]
    lines += [f"{name}: {res['skipped']}" for name, res in out["engines"].items() if "skipped" in res]
    if sweep:
        for name, res in out["engines"].items():
            lines.append(f"{name}: best threshold for time to first audio: {res['best_for_ttfb']} (lowest median)")
        return "\n".join(lines)
    a = ANCHOR
    lines.append(
        f"anchor ({a['where']}): batch {a['batch_mean_ms']} ms, streaming {a['stream_mean_ms']} ms, "
        f"{a['improvement_pct']:+.1f}% ({a['speedup']}x)"
    )
    emb = out["engines"].get("embedded", {})
    if "improvement" in emb:
        ratio = emb["improvement"]["ws"]["ratio_mean"]
        verdict = "met" if ratio <= 0.25 else "NOT met"
        lines.append(f"goal (embedded, ws mean <= 1/4 of batch mean): ratio {ratio:.3f} -> {verdict}")
        if "ws-vocoder" in emb["channels"]:
            med = emb["channels"]["ws-vocoder"]["ttfb"].median
            ws_med = emb["channels"]["ws"]["ttfb"].median
            lines.append(
                f"goal (embedded, ws-vocoder median <= 200 ms): {med:.0f} ms -> "
                f"{'met' if med <= 200 else 'NOT met'}; {ws_med / med:.2f}x faster than "
                f"per-sentence ws ({ws_med:.0f} ms), same run"
            )
    if "calibration" in out:
        c = out["calibration"]
        lines.append(
            f"embedded measured: RTF {c['rtf']} (fit {c['fit_rtf']} + {c['fit_delay_ms']} ms per call), "
            f"{c['audio_s_per_word']} s of audio per word; fake speed {c['fake_speed']}"
        )
    return "\n".join(lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="run_gateway.py bench ttfb", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--engines",
        default=DEFAULT_ENGINES,
        help="comma-separated, of embedded, fake, container, kokoro (default: %(default)s)",
    )
    p.add_argument("--reps", type=int, default=2, help="repetitions of the corpus (default: %(default)s)")
    p.add_argument(
        "--corpus",
        type=int,
        default=None,
        metavar="N",
        help="use the first N replies (default: all 8; with --frontend-compare, all 12 markdown ones)",
    )
    p.add_argument("--url", help="measure the gateway at this base URL instead of starting one")
    p.add_argument("--voice", default="", help="voice for every request (default: the engine's)")
    p.add_argument("--fake-rtf", type=float, help="fake engine compute per audio second (default: calibrated)")
    p.add_argument("--fake-first-delay-ms", type=float, default=0.0, help="with --fake-rtf: per-call delay")
    p.add_argument(
        "--fake-speed",
        type=float,
        default=1.0,
        help="with --fake-rtf: request speed for the fake (0.7 ~ the embedded voice's audio per word)",
    )
    p.add_argument("--container-engine", default="embedded", choices=("embedded", "fake"))
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="gateway setting override")
    p.add_argument("--sweep", action="store_true", help="compare the first-clause fast path off / on at --clause-words")
    p.add_argument(
        "--clause-words", default="1,2,4", help="first_clause_words values for --sweep (default: %(default)s)"
    )
    p.add_argument(
        "--frontend-compare",
        action="store_true",
        help="the WebSocket with text_frontend on against off, interleaved, on the markdown replies",
    )
    p.add_argument("--out", type=Path, default=RESULTS_DIR, help="output folder (default: %(default)s)")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument(
        "--no-vocoder",
        action="store_true",
        help="skip the ws-vocoder row (streaming inside a segment) on engines that offer it",
    )
    args = p.parse_args(argv)
    args.engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    args.clause_words = [int(w) for w in args.clause_words.split(",") if w.strip()]
    if args.reps < 1 or not args.engines or any(w < 1 for w in args.clause_words):
        p.error("--reps must be >= 1, --engines non-empty, --clause-words >= 1 (off is always measured)")
    if args.sweep and args.frontend_compare:
        p.error("--sweep and --frontend-compare are separate runs")
    return args


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    texts = markdown_corpus(args.corpus) if args.frontend_compare else corpus(args.corpus)
    kind = "ttfb-sweep" if args.sweep else "ttfb-frontend" if args.frontend_compare else "ttfb"
    out: dict[str, Any] = {
        "bench": kind,
        "anchor": ANCHOR,
        "reps": args.reps,
        "corpus": texts,
        "engines": {},
    }
    with recorded(out):
        async with aiohttp.ClientSession() as http, RemoteClient.start() as client:
            if args.sweep:
                await run_sweep(http, client, args, texts, out)
            elif args.url:
                async with http.get(args.url.rstrip("/") + "/readyz") as resp:
                    name = (await resp.json()).get("engine", "url")
                t = Target(name, args.url.rstrip("/"), bench_settings("fake", args.set))
                fields = {"voice": args.voice} if args.voice else {}
                runner = run_frontend_compare if args.frontend_compare else run_target
                out["engines"][name] = await runner(http, client, t, fields, texts, args)
            else:
                await run_engines(http, client, args, texts, out)
    return out


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    title = "time to first audio" + (
        ": first-clause sweep" if args.sweep else ": text front-end on/off" if args.frontend_compare else ""
    )
    run_published(args, bench, lambda out: render(out, args.sweep), plot_title=title)
    return 0
