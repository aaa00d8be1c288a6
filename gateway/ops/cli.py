"""Command line: ``serve`` (default), ``container``, ``synth``, ``bench``, ``wyoming``, ``loadtest``, ``deploy``,
``convert-weights``."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import sys
from pathlib import Path

from ..config import Settings, load_settings
from ..web.proxies import parse_trusted
from .logs import apply as apply_log_level
from .logs import levels as log_levels
from .server import run_loop, serve, serve_wyoming
from .workers import worker_count

log = logging.getLogger("gateway")

SUBCOMMANDS = ("serve", "container", "synth", "bench", "wyoming", "loadtest", "deploy", "convert-weights")
# subcommands that are tools with options of their own
TOOLS = {
    "loadtest": "bench.loadtest",
    "deploy": "gateway.ops.deploy",
    "convert-weights": "gateway.kokoro.convert_weights",
}
BENCHES = (
    "engine",
    "quality",
    "overhead",
    "transports",
    "ttfb",
    "agent",
    "soak",
    "playback",
    "timestamps",
    "clients",
    "gpu",
    "listeners",
    "firstreply",
    "text",
)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="TOML settings file (default: config/default.toml)")
    p.add_argument("--engine", help="embedded (default), kokoro, container, sagemaker or fake")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override any setting, e.g. --set fake_rtf=0.3 (repeatable)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="run_gateway.py", description="Streaming Kokoro-82M TTS gateway")
    sub = parser.add_subparsers(dest="command", metavar="{" + ",".join(SUBCOMMANDS) + "}")
    serve = sub.add_parser("serve", help="run the gateway (default)")
    _common(serve)
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument(
        "--workers",
        help="processes serving the port: auto (default: 1 for the "
        "embedded and kokoro engines, one per core for container and sagemaker), 0 "
        "(one per core) or a count",
    )
    cont = sub.add_parser("container", help="run the SageMaker model container (port 8080)")
    _common(cont)
    cont.add_argument("--host", default="0.0.0.0")
    cont.add_argument("--port", type=int, default=8080)
    synth = sub.add_parser("synth", help="synthesize TEXT to a file")
    _common(synth)
    synth.add_argument("text")
    synth.add_argument("-o", "--output", required=True)
    synth.add_argument("--voice", default="")
    synth.add_argument("--format", default="", help="mp3, wav, pcm, opus, ulaw or alaw (default: from the file name)")
    synth.add_argument("--sample-rate", type=int, default=None, help="8000, 16000, 22050, 24000, 44100 or 48000")
    synth.add_argument("--speed", type=float, default=1.0)
    wyoming = sub.add_parser("wyoming", help="serve the voices over Home Assistant's Wyoming protocol")
    _common(wyoming)
    wyoming.add_argument(
        "--host",
        help="address to listen on (default: the host setting, 127.0.0.1; "
        "0.0.0.0 for Home Assistant on another machine)",
    )
    wyoming.add_argument("--port", type=int, default=10200)
    bench = sub.add_parser("bench", help="benchmarks: " + ", ".join(BENCHES))
    bench.add_argument("name", choices=BENCHES)
    bench.add_argument("args", nargs=argparse.REMAINDER, help="the benchmark's own options (--help)")
    load = sub.add_parser("loadtest", help="concurrency sweep and auto-scaling targets", add_help=False)
    load.add_argument("args", nargs=argparse.REMAINDER)
    deploy = sub.add_parser("deploy", help="create the SageMaker endpoint and its scaling policy", add_help=False)
    deploy.add_argument("args", nargs=argparse.REMAINDER)
    convert = sub.add_parser(
        "convert-weights",
        add_help=False,
        help="write a kokoro_dir (config.json, .pth) from the shipped model: --out DIR",
    )
    convert.add_argument("args", nargs=argparse.REMAINDER)
    return parser


def settings_from(args: argparse.Namespace) -> Settings:
    overrides: dict[str, object] = {}
    for item in getattr(args, "set", []):
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set expects NAME=VALUE, got {item!r}")
        overrides[name.strip()] = value
    for name in ("engine", "host", "port", "workers"):
        if name == "port" and args.command == "wyoming":
            continue  # the Wyoming port is its own (--port), not the HTTP gateway's
        if getattr(args, name, None) is not None:
            overrides[name] = getattr(args, name)
    try:
        settings = load_settings(getattr(args, "config", None), overrides=overrides)
        parse_trusted(settings.trusted_proxies)
        worker_count(settings)
        log_levels(settings.log_level)
        return settings
    except ValueError as exc:
        raise SystemExit(f"bad settings: {exc}") from None


async def synth(settings: Settings, args: argparse.Namespace) -> None:
    from ..core import batch
    from ..core.options import parse_options
    from ..core.synthesis import SynthesisHub
    from ..engines import create_engine
    from ..text.speakable import speakable

    if not speakable(args.text):
        raise SystemExit("nothing to speak: the text has no letter or digit")
    engine = create_engine(settings)
    await engine.start()
    try:
        fmt = args.format or Path(args.output).suffix.lstrip(".") or "mp3"
        options = parse_options(
            {
                "text": args.text,
                "voice": args.voice,
                "format": fmt,
                "speed": args.speed,
                "sample_rate": args.sample_rate,
            },
            settings,
            engine,
        )
        hub = SynthesisHub(engine, timeout_s=settings.synth_timeout_s)
        audio = await batch.synthesize(hub, options, settings)
    finally:
        await engine.aclose()
    Path(args.output).write_bytes(audio)
    log.info("wrote %s (%d bytes, %s, voice %s)", args.output, len(audio), options.format, options.voice)


def run_module(target: str, argv: list[str]) -> int:
    try:
        module = importlib.import_module(target)
    except ModuleNotFoundError as exc:
        if exc.name != target.split(".")[0]:
            raise
        # benchmarks and the load test live beside the product (bench/), not in its wheel
        message = f"{target} is not installed: run it from a checkout of the repository"
        print(message, file=sys.stderr)  # noqa: T201 (before any logging is set up)
        return 2
    return int(module.main(argv) or 0)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0] not in SUBCOMMANDS and argv[0] not in ("-h", "--help")):
        argv = ["serve", *argv]
    # tools with options of their own get the rest of the line untouched
    if argv[0] in TOOLS:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        return run_module(TOOLS[argv[0]], argv[1:])
    if argv[0] == "bench" and len(argv) > 1 and argv[1] in BENCHES:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        return run_module(f"bench.{argv[1]}", argv[2:])
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "bench":
        return run_module(f"bench.{args.name}", args.args)
    if args.command in TOOLS:
        return run_module(TOOLS[args.command], args.args)
    settings = settings_from(args)
    apply_log_level(settings.log_level)
    if args.command == "synth":
        from ..errors import GatewayError

        try:
            asyncio.run(synth(settings, args))
        except GatewayError as exc:  # a bad voice, format or rate: say which, no traceback
            raise SystemExit(f"synth: {exc.message}") from None
        return 0
    if args.command == "container":
        from ..web.container import make_container_app

        settings = settings.replace(host=args.host, port=args.port)
        run_loop(serve(settings, make_container_app(settings), what="model container"))
        return 0
    if args.command == "wyoming":
        run_loop(serve_wyoming(settings, args.port))
        return 0
    if (workers := worker_count(settings)) > 1:
        from .workers import supervise

        return supervise(settings, workers)
    from ..web.app import make_app

    try:
        app = make_app(settings)
    except (ValueError, ImportError) as exc:  # e.g. agent_backend=openai without agent_url
        raise SystemExit(f"bad settings: {exc}") from None
    run_loop(serve(settings, app))
    return 0
