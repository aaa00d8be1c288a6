"""Load test: a concurrency sweep of closed-loop sessions, the knee, and auto-scaling targets.

``python run_gateway.py loadtest`` drives a gateway (``--url``, or ``--engine NAME`` started
in a subprocess on a free loopback port), a model container (``--container``: its
``/invocations-bidirectional-stream``) or a SageMaker endpoint (``--endpoint NAME``, through a
local gateway whose engine is that endpoint). At each concurrency level, N sessions each
speak a realistic voice-agent reply, one after another, for ``--duration`` seconds (and at
most ``--max-sessions``). Per level: time to first audio (TTFA, from before the connection is
opened) p50/p90/p99; per-session real-time factor (time to the last audio / audio duration);
playback stalls (a payload arriving after a listener who started at the first payload would
have run out); errors by code; completed sessions per second.

The knee is the highest level at which it and every lower level meet the service level
(default: p90 TTFA under ``--ttfa-p90-ms`` and no stalls or errors). From it:

* ``ConcurrentRequestsPerModel`` target = knee x ``--safety`` (at least 1);
* ``SageMakerVariantInvocationsPerInstance`` = max sustainable sessions/s x 0.5 x 60 (AWS's
  load-test rule).

Writes ``result.json``, ``policy.json`` (the target-tracking configuration ``deploy --policy``
takes), ``policy-invocations.json`` and ``curves.png`` to ``--out``. Targets must be loopback
unless ``--allow-remote``. ``loadtest --capacity ...`` runs ``bench.capacity``.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import logging
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Sequence

import aiohttp
import numpy as np
from yarl import URL

from .client import sse_stream
from .capacity import GatewayProcess, busy_fraction, cpu_times, payload_seconds

log = logging.getLogger(__name__)

REPLIES = (
    "Sure, I can help with that. Your flight to Chicago leaves tomorrow at nine forty from gate twelve. "
    "Would you like me to add a checked bag?",
    "Of course. The pharmacy on Main Street is open until eight tonight, and your prescription is ready.",
    "Thanks for waiting. I found two tables for four at seven thirty, one by the window and one on the patio. "
    "Which one would you prefer?",
    "Okay, I have changed your delivery address. The package should arrive on Thursday between noon and four.",
    "Good question. Your plan includes twenty gigabytes of data a month, and you have used about half of it.",
    "No problem. I cancelled the appointment on Friday and sent a confirmation to the email address on file.",
)


@dataclass(frozen=True, slots=True)
class SessionStat:
    ok: bool
    ttfa_ms: float | None = None
    audio_s: float = 0.0
    wall_s: float = 0.0  # from before connecting to the last audio payload
    stalls: int = 0
    stall_s: float = 0.0
    error: str = ""

    @property
    def rtf(self) -> float | None:
        return self.wall_s / self.audio_s if self.audio_s else None


@dataclass(frozen=True, slots=True)
class LevelResult:
    concurrency: int
    sessions: int
    errors: int = 0
    error_codes: dict[str, int] = field(default_factory=dict)
    ttfa_p50_ms: float | None = None
    ttfa_p90_ms: float | None = None
    ttfa_p99_ms: float | None = None
    rtf_p50: float | None = None
    rtf_p90: float | None = None
    stalled_sessions: int = 0
    stalls: int = 0
    rps: float = 0.0  # completed sessions per second
    elapsed_s: float = 0.0

    @property
    def error_rate(self) -> float:
        return self.errors / self.sessions if self.sessions else 1.0

    @property
    def stall_rate(self) -> float:
        ok = self.sessions - self.errors
        return self.stalled_sessions / ok if ok else 0.0


@dataclass(frozen=True, slots=True)
class ServiceLevel:
    ttfa_p90_ms: float = 1000.0
    max_stall_rate: float = 0.0  # share of sessions with at least one stall
    max_error_rate: float = 0.0

    def failures(self, r: LevelResult) -> list[str]:
        """Why ``r`` misses the service level (empty: it meets it)."""
        out = []
        if r.sessions == 0 or r.ttfa_p90_ms is None:
            out.append("no session completed")
        elif r.ttfa_p90_ms > self.ttfa_p90_ms:
            out.append(f"p90 TTFA {r.ttfa_p90_ms:.0f} ms > {self.ttfa_p90_ms:.0f} ms")
        if r.stall_rate > self.max_stall_rate:
            out.append(f"stalls in {r.stall_rate:.0%} of sessions")
        if r.error_rate > self.max_error_rate:
            out.append(f"errors in {r.error_rate:.0%} of sessions")
        return out


@dataclass(frozen=True, slots=True)
class Targets:
    knee: int | None  # the highest concurrency meeting the service level
    max_rps: float  # sessions/s sustained at or below the knee
    concurrent_requests_per_model: int | None
    invocations_per_instance: float | None
    safety: float


def find_knee(levels: Sequence[LevelResult], slo: ServiceLevel) -> LevelResult | None:
    """The highest level at which it and every lower level meet ``slo``; a pass above a
    failure does not count (a noisy lucky level must not set a target)."""
    knee = None
    for level in sorted(levels, key=lambda r: r.concurrency):
        if slo.failures(level):
            break
        knee = level
    return knee


def invocations_per_instance(max_rps: float, safety: float = 0.5) -> float:
    """AWS's load-test rule for SageMakerVariantInvocationsPerInstance (a per-minute metric)."""
    return max_rps * safety * 60


def recommend(levels: Sequence[LevelResult], slo: ServiceLevel, safety: float = 0.7) -> Targets:
    knee = find_knee(levels, slo)
    if knee is None:
        return Targets(None, 0.0, None, None, safety)
    max_rps = max(r.rps for r in levels if r.concurrency <= knee.concurrency)
    return Targets(knee.concurrency, round(max_rps, 3), max(1, math.floor(knee.concurrency * safety)),
                   round(invocations_per_instance(max_rps), 1), safety)


def playback_stalls(arrivals: Sequence[float], durations: Sequence[float], buffer_s: float = 0.0) -> tuple[int, float]:
    """(stalls, seconds stalled) of a listener who starts ``buffer_s`` after the first payload
    and plays each payload when it has arrived and the previous one has finished."""
    if not arrivals:
        return 0, 0.0
    end = arrivals[0] + buffer_s + durations[0]
    stalls, stalled = 0, 0.0
    for t, d in zip(arrivals[1:], durations[1:]):
        if t > end:
            stalls, stalled = stalls + 1, stalled + t - end
            end = t
        end += d
    return stalls, stalled


# -- one session on each channel ----------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Plan:
    levels: tuple[int, ...] = (1, 2, 4, 8)
    duration_s: float = 20.0
    max_sessions: int = 0  # per level; 0: bounded by time only
    channel: str = "ws"
    fmt: str = "mp3"
    voice: str = ""
    tokens_per_s: float = 0.0  # 0: the whole reply at once; else word by word, like an LLM
    timeout_s: float = 60.0
    buffer_ms: float = 0.0
    texts: tuple[str, ...] = REPLIES


def _stat(begin: float, times: list[float], durations: list[float], plan: Plan, error: str = "") -> SessionStat:
    if error or not times:
        return SessionStat(False, error=error or "no_audio")
    stalls, stalled = playback_stalls(times, durations, plan.buffer_ms / 1000)
    return SessionStat(True, (times[0] - begin) * 1000, sum(durations), times[-1] - begin, stalls, stalled)


async def _send_text(ws: aiohttp.ClientWebSocketResponse, text: str, tokens_per_s: float) -> None:
    if tokens_per_s <= 0:
        await ws.send_json({"type": "text", "text": text})
    else:
        for n, word in enumerate(text.split(" ")):
            await ws.send_json({"type": "text", "text": (" " if n else "") + word})
            await asyncio.sleep(1 / tokens_per_s)
    await ws.send_json({"type": "end"})


async def ws_session(http: aiohttp.ClientSession, url: str, text: str, plan: Plan) -> SessionStat:
    """One reply on a WebSocket (gateway or container: both end a reply with ``done``)."""
    begin, rate = time.perf_counter(), 24000
    times: list[float] = []
    durations: list[float] = []
    async with http.ws_connect(url, max_msg_size=0) as ws:
        await ws.send_json({"type": "start", "format": plan.fmt, "cache": False, **({"voice": plan.voice} if plan.voice else {})})
        sender = asyncio.create_task(_send_text(ws, text, plan.tokens_per_s))
        try:
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.BINARY:
                    times.append(time.perf_counter())
                    durations.append(payload_seconds(msg.data, plan.fmt, rate))
                    continue
                if msg.type != aiohttp.WSMsgType.TEXT:
                    break
                body = json.loads(msg.data)
                if body["type"] == "ready":
                    rate = int(body.get("sample_rate") or rate)
                elif body["type"] == "error":
                    return _stat(begin, times, durations, plan, str(body.get("code", "error")))
                elif body["type"] == "done":
                    return _stat(begin, times, durations, plan)
        finally:
            sender.cancel()
    return _stat(begin, times, durations, plan, f"closed_{ws.close_code}")


async def sse_session(http: aiohttp.ClientSession, url: str, text: str, plan: Plan) -> SessionStat:
    begin = time.perf_counter()
    options = {"format": plan.fmt, "cache": False, **({"voice": plan.voice} if plan.voice else {})}
    result = await sse_stream(http, url, method="POST", timeout=plan.timeout_s, text=text, **options)
    if result.error:
        return SessionStat(False, error=str(result.error.get("code", "error")))
    ready = result.of("ready")
    rate = int(ready[0].get("sample_rate") or 24000) if ready else 24000
    durations = [payload_seconds(p, plan.fmt, rate) for p in result.payloads]
    return _stat(begin, result.payload_times, durations, plan, "" if result.done else "no_done")


async def one_session(http: aiohttp.ClientSession, url: str, text: str, plan: Plan) -> SessionStat:
    run = ws_session if plan.channel == "ws" else sse_session
    try:
        async with asyncio.timeout(plan.timeout_s):
            return await run(http, url, text, plan)
    except aiohttp.WSServerHandshakeError as exc:
        return SessionStat(False, error=f"http_{exc.status}")
    except TimeoutError:
        return SessionStat(False, error="timeout")
    except (aiohttp.ClientError, OSError) as exc:
        return SessionStat(False, error=type(exc).__name__)


# -- a level, and the sweep ----------------------------------------------------------------
def _pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 3) if values else None


def summarize(concurrency: int, stats: list[SessionStat], elapsed_s: float) -> LevelResult:
    ok = [s for s in stats if s.ok]
    ttfa = [s.ttfa_ms for s in ok if s.ttfa_ms is not None]
    rtf = [s.rtf for s in ok if s.rtf is not None]
    codes: dict[str, int] = {}
    for s in stats:
        if not s.ok:
            codes[s.error] = codes.get(s.error, 0) + 1
    return LevelResult(
        concurrency=concurrency, sessions=len(stats), errors=len(stats) - len(ok), error_codes=codes,
        ttfa_p50_ms=_pct(ttfa, 50), ttfa_p90_ms=_pct(ttfa, 90), ttfa_p99_ms=_pct(ttfa, 99),
        rtf_p50=_pct(rtf, 50), rtf_p90=_pct(rtf, 90),
        stalled_sessions=sum(1 for s in ok if s.stalls), stalls=sum(s.stalls for s in ok),
        rps=round(len(ok) / elapsed_s, 3) if elapsed_s else 0.0, elapsed_s=round(elapsed_s, 2),
    )


async def run_level(http: aiohttp.ClientSession, url: str, n: int, plan: Plan) -> LevelResult:
    """N closed-loop workers until the level's time (or session count) is up."""
    started = time.perf_counter()
    deadline = started + plan.duration_s
    stats: list[SessionStat] = []
    issued = 0

    async def worker(k: int) -> None:
        nonlocal issued
        await asyncio.sleep(k * min(0.05, 1.0 / n))  # a short stagger, not a thundering herd
        while time.perf_counter() < deadline and not (plan.max_sessions and issued >= plan.max_sessions):
            issued += 1
            stat = await one_session(http, url, plan.texts[issued % len(plan.texts)], plan)
            stats.append(stat)
            if not stat.ok:
                await asyncio.sleep(0.25)  # a refused session must not turn into a busy loop

    await asyncio.gather(*(worker(k) for k in range(n)))
    return summarize(n, stats, time.perf_counter() - started)


async def sweep(url: str, plan: Plan, slo: ServiceLevel, *, stop_on_fail: bool = True) -> list[LevelResult]:
    results: list[LevelResult] = []
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as http:
        warm = await one_session(http, url, plan.texts[0], plan)  # loads caches; not counted
        if not warm.ok:
            log.warning("warm-up session failed: %s", warm.error)
        for n in plan.levels:
            level = await run_level(http, url, n, plan)
            why = slo.failures(level)
            log.info("%s%s", _row(level), "  FAILS: " + "; ".join(why) if why else "")
            results.append(level)
            if why and stop_on_fail:
                break
    return results


def _row(r: LevelResult) -> str:
    def f(x: float | None, spec: str) -> str:
        return format(x, spec) if x is not None else "-"
    return (f"c={r.concurrency:<4} sessions={r.sessions:<4} ttfa p50/p90/p99 = {f(r.ttfa_p50_ms, '.0f')}/"
            f"{f(r.ttfa_p90_ms, '.0f')}/{f(r.ttfa_p99_ms, '.0f')} ms  rtf p50 {f(r.rtf_p50, '.2f')}  "
            f"stalled {r.stalled_sessions}  errors {r.errors} {r.error_codes or ''}  {r.rps:.2f}/s")


# -- targets ---------------------------------------------------------------------------------
def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it could resolve anywhere


def channel_url(base: str, channel: str, *, container: bool = False) -> str:
    """The URL of ``channel`` on a gateway (or container) given by ``base``; a path in
    ``base`` is kept, an empty one becomes the channel's own."""
    url = URL(base)
    if url.scheme not in ("ws", "wss", "http", "https") or not url.host:
        raise ValueError(f"--url must be ws://, wss://, http:// or https://HOST:PORT[/path], got {base!r}")
    secure = url.scheme in ("wss", "https")
    if channel == "ws":
        scheme, path = ("wss" if secure else "ws"), ("/invocations-bidirectional-stream" if container else "/v1/stream/ws")
    else:
        scheme, path = ("https" if secure else "http"), "/v1/stream/sse"
    return str(url.with_scheme(scheme).with_path(url.path if url.path not in ("", "/") else path))


@contextlib.asynccontextmanager
async def open_target(args: argparse.Namespace) -> AsyncIterator[str]:
    """Yield the URL to drive: an existing server, or one started here and stopped after."""
    if args.container and args.channel != "ws":
        raise SystemExit("a model container speaks only the WebSocket channel: use --channel ws")
    if args.url:
        url = channel_url(args.url, args.channel, container=args.container)
        if not (is_loopback(URL(url).host or "") or args.allow_remote):
            raise SystemExit(f"refusing to load-test {URL(url).host}: not loopback (add --allow-remote if it is yours)")
        yield url
        return
    settings = dict(item.split("=", 1) for item in args.set)
    settings.setdefault("max_sessions_per_client", "0")  # every session comes from this one address
    settings.setdefault("log_level", "WARNING")
    engine = args.engine or "fake"
    if args.endpoint:
        if not args.allow_remote:
            raise SystemExit("--endpoint drives a remote SageMaker endpoint: add --allow-remote")
        engine = "sagemaker"
        settings["sagemaker_endpoint"] = args.endpoint
        if args.region:
            settings["sagemaker_region"] = args.region
    command = "container" if args.container else "serve"
    async with GatewayProcess(engine, settings, command=command) as gw:
        yield channel_url(gw.url, args.channel, container=args.container)


# -- outputs ---------------------------------------------------------------------------------
def plot(levels: Sequence[LevelResult], slo: ServiceLevel, targets: Targets, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [r.concurrency for r in levels]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for q, style in (("p50", "o-"), ("p90", "s-"), ("p99", "^--")):
        left.plot(x, [getattr(r, f"ttfa_{q}_ms") or np.nan for r in levels], style, label=f"TTFA {q}")
    left.axhline(slo.ttfa_p90_ms, color="red", lw=0.8, ls=":", label="p90 bound")
    right.plot(x, [r.rtf_p50 or np.nan for r in levels], "o-", label="RTF p50")
    right.plot(x, [r.rtf_p90 or np.nan for r in levels], "s-", label="RTF p90")
    right.plot(x, [r.stall_rate for r in levels], "x:", label="sessions stalled")
    right.plot(x, [r.error_rate for r in levels], "d:", label="error rate")
    right.axhline(1.0, color="grey", lw=0.6)
    rps = right.twinx()
    rps.plot(x, [r.rps for r in levels], "k.-", alpha=0.5, label="sessions/s")
    rps.set_ylabel("completed sessions/s")
    rps.set_ylim(bottom=0)
    rps.legend(fontsize=7, loc="upper right")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(x, [str(n) for n in x])
        ax.set_xlabel("concurrent sessions")
        if targets.knee:
            ax.axvline(targets.knee, color="green", lw=0.8, ls="--", label=f"knee {targets.knee}")
        ax.legend(fontsize=7, loc="upper left")
    left.set_ylabel("time to first audio, ms")
    right.set_ylabel("real-time factor / share")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(out: Path, report: dict[str, Any], levels: list[LevelResult], slo: ServiceLevel,
                  targets: Targets, title: str) -> None:
    from gateway.deploy import INVOCATIONS_METRIC, target_tracking

    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(json.dumps(report, indent=2))
    if targets.concurrent_requests_per_model is not None:
        (out / "policy.json").write_text(json.dumps(target_tracking(targets.concurrent_requests_per_model), indent=2))
    if targets.invocations_per_instance:
        policy = target_tracking(targets.invocations_per_instance, metric=INVOCATIONS_METRIC)
        (out / "policy-invocations.json").write_text(json.dumps(policy, indent=2))
    plot(levels, slo, targets, out / "curves.png", title)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="run_gateway.py loadtest", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    where = p.add_mutually_exclusive_group()
    where.add_argument("--url", help="a running gateway (ws:// or http://HOST:PORT) or, with --container, a container")
    where.add_argument("--engine", help="start a gateway (or container) with this engine here (default fake)")
    where.add_argument("--endpoint", help="a SageMaker endpoint, through a local gateway (needs --allow-remote)")
    p.add_argument("--container", action="store_true", help="drive a model container's bidirectional stream")
    p.add_argument("--region")
    p.add_argument("--allow-remote", action="store_true")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="setting of a started gateway")
    p.add_argument("--levels", default="1,2,4,8", help="concurrency levels, comma-separated")
    p.add_argument("--duration", type=float, default=20.0, help="seconds per level")
    p.add_argument("--max-sessions", type=int, default=0, help="sessions per level at most (0: no cap)")
    p.add_argument("--channel", choices=("ws", "sse"), default="ws")
    p.add_argument("--format", choices=("mp3", "pcm"), default="mp3")
    p.add_argument("--voice", default="")
    p.add_argument("--text", action="append", help="reply text instead of the built-in ones (repeatable)")
    p.add_argument("--tokens-per-s", type=float, default=0.0, help="stream each reply word by word")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per session")
    p.add_argument("--ttfa-p90-ms", type=float, default=1000.0, help="service level: p90 TTFA bound")
    p.add_argument("--max-stall-rate", type=float, default=0.0)
    p.add_argument("--max-error-rate", type=float, default=0.0)
    p.add_argument("--buffer-ms", type=float, default=0.0, help="the listener's start-up buffer")
    p.add_argument("--safety", type=float, default=0.7, help="ConcurrentRequestsPerModel = knee x safety")
    p.add_argument("--all", action="store_true", help="run every level even after one fails")
    p.add_argument("--out", default="loadtest-out", help="folder for result.json, policy*.json, curves.png")
    return p


def main(argv: list[str]) -> int:
    argv = argv[1:] if argv[:1] == ["--"] else argv  # `run_gateway.py loadtest -- --engine ...`
    if argv[:1] == ["--capacity"]:
        from .capacity import main as capacity_main

        return capacity_main(argv[1:])
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    plan = Plan(levels=tuple(int(x) for x in args.levels.split(",")), duration_s=args.duration,
                max_sessions=args.max_sessions, channel=args.channel, fmt=args.format, voice=args.voice,
                tokens_per_s=args.tokens_per_s, timeout_s=args.timeout, buffer_ms=args.buffer_ms,
                texts=tuple(args.text) if args.text else REPLIES)
    slo = ServiceLevel(args.ttfa_p90_ms, args.max_stall_rate, args.max_error_rate)
    target = args.url or (f"SageMaker endpoint {args.endpoint}" if args.endpoint else
                          f"{'container' if args.container else 'gateway'} --engine {args.engine or 'fake'}")

    async def run() -> list[LevelResult]:
        async with open_target(args) as url:
            log.info("load-testing %s at %s", target, url)
            return await sweep(url, plan, slo, stop_on_fail=not args.all)

    before = cpu_times()
    levels = asyncio.run(run())
    targets = recommend(levels, slo, args.safety)
    report = {"target": target, "plan": asdict(plan), "service_level": asdict(slo),
              "levels": [asdict(r) for r in levels], "recommendation": asdict(targets),
              "machine": {"cpus": os.cpu_count(), "load_average": os.getloadavg(),
                          "busy": round(busy_fraction(before, cpu_times()), 3)}}
    title = f"{target} ({plan.channel}, {plan.fmt}); service level: p90 TTFA < {slo.ttfa_p90_ms:.0f} ms, no stalls"
    write_outputs(Path(args.out), report, levels, slo, targets, title)
    print(json.dumps({**asdict(targets), "out": args.out}, indent=2))  # noqa: T201 - the command's answer
    return 0 if targets.knee else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
