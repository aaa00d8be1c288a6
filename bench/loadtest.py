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
import os
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from yarl import URL

from .meters import busy_fraction, cpu_times
from .procs import GatewayProcess
from .sessions import REPLIES, Plan, sweep
from .slo import LevelResult, ServiceLevel, Targets, recommend

log = logging.getLogger(__name__)


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
        scheme, path = (
            ("wss" if secure else "ws"),
            ("/invocations-bidirectional-stream" if container else "/v1/stream/ws"),
        )
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


def write_outputs(
    out: Path, report: dict[str, Any], levels: list[LevelResult], slo: ServiceLevel, targets: Targets, title: str
) -> None:
    from gateway.ops.deploy import INVOCATIONS_METRIC, target_tracking

    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(json.dumps(report, indent=2))
    if targets.concurrent_requests_per_model is not None:
        (out / "policy.json").write_text(json.dumps(target_tracking(targets.concurrent_requests_per_model), indent=2))
    if targets.invocations_per_instance:
        policy = target_tracking(targets.invocations_per_instance, metric=INVOCATIONS_METRIC)
        (out / "policy-invocations.json").write_text(json.dumps(policy, indent=2))
    plot(levels, slo, targets, out / "curves.png", title)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="run_gateway.py loadtest", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
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
    plan = Plan(
        levels=tuple(int(x) for x in args.levels.split(",")),
        duration_s=args.duration,
        max_sessions=args.max_sessions,
        channel=args.channel,
        fmt=args.format,
        voice=args.voice,
        tokens_per_s=args.tokens_per_s,
        timeout_s=args.timeout,
        buffer_ms=args.buffer_ms,
        texts=tuple(args.text) if args.text else REPLIES,
    )
    slo = ServiceLevel(args.ttfa_p90_ms, args.max_stall_rate, args.max_error_rate)
    target = args.url or (
        f"SageMaker endpoint {args.endpoint}"
        if args.endpoint
        else f"{'container' if args.container else 'gateway'} --engine {args.engine or 'fake'}"
    )

    async def run() -> list[LevelResult]:
        async with open_target(args) as url:
            log.info("load-testing %s at %s", target, url)
            return await sweep(url, plan, slo, stop_on_fail=not args.all)

    before = cpu_times()
    levels = asyncio.run(run())
    targets = recommend(levels, slo, args.safety)
    report = {
        "target": target,
        "plan": asdict(plan),
        "service_level": asdict(slo),
        "levels": [asdict(r) for r in levels],
        "recommendation": asdict(targets),
        "machine": {
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
            "busy": round(busy_fraction(before, cpu_times()), 3),
        },
    }
    title = f"{target} ({plan.channel}, {plan.fmt}); service level: p90 TTFA < {slo.ttfa_p90_ms:.0f} ms, no stalls"
    write_outputs(Path(args.out), report, levels, slo, targets, title)
    print(json.dumps({**asdict(targets), "out": args.out}, indent=2))
    return 0 if targets.knee else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
