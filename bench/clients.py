"""First audio through the clients voice agents are built with, on the same reply, in one run.

``run_gateway.py bench clients`` starts one gateway subprocess (``--engine fake`` by default,
with ``fake_rtf`` 0.35, the embedded engine's measured speed; ``--engine embedded`` for the real
model; the segment cache off, so every client's request is synthesized) and speaks one reply,
interleaved round by round after a warm-up that is not counted, through:

* ``ws``: the WebSocket channel, the reply as one ``text`` message (PCM): first binary frame;
* ``openai-sdk``: OpenAI's SDK, ``with_streaming_response`` (PCM, streamed by default): first bytes;
* ``openai-sdk-batch``: the same with ``stream: false``, the whole file: the batch baseline;
* ``livekit-default``: LiveKit Agents' ``openai.TTS()`` (default model: OpenAI's SSE events);
* ``livekit-tts-1``: the same with ``model="tts-1"``, PCM (raw audio, chunked);
* ``pipecat``: Pipecat's ``OpenAITTSService`` in a ``Pipeline``: first ``TTSAudioRawFrame``.

LiveKit and Pipecat run in ``.venv-clients`` (``make test-clients`` builds it; or
``--clients-python``) as one long-lived process (``clients_probe.py``) the bench talks to over
its stdin and stdout; without that venv their rows are skipped with a note. Ratios are to ``ws``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from .client import ws_stream
from .common import RESULTS_DIR, publish, quiet_logs, recorded, stats, table
from .procs import ROOT, GatewayProcess

REPLY = (
    "Sure, I can help with that. Your order shipped this morning from our warehouse in Ohio, "
    "and it should arrive on Thursday. The tracking number is in your inbox. "
    "Is there anything else I can do for you today?"
)
WARMUP = "Hi there, warming up. Not counted."
DEFAULT_RTF = 0.35  # DESIGN's measured embedded speed (seconds of compute per audio second)
PROBED = ("livekit-default", "livekit-tts-1", "pipecat")


class Probe:
    """``clients_probe.py`` in the clients' venv: one request a line, one answer a line."""

    def __init__(self, python: str) -> None:
        self.python = python
        self.proc: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> Probe:
        self.proc = await asyncio.create_subprocess_exec(
            self.python,
            str(ROOT / "bench" / "clients_probe.py"),
            cwd=ROOT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        return self

    async def ask(self, client: str, url: str, text: str) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write((json.dumps({"client": client, "url": url, "text": text}) + "\n").encode())
            await self.proc.stdin.drain()
            line = await asyncio.wait_for(self.proc.stdout.readline(), 120)
        except ConnectionError:
            line = b""
        if not line:
            raise RuntimeError(f"the clients' probe ({self.python}) exited: its error is above")
        return json.loads(line)

    async def __aexit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.stdin is not None:
            self.proc.stdin.close()
            await asyncio.wait_for(self.proc.wait(), 30)


def _openai(url: str, stream: bool) -> Callable[[str], Awaitable[dict[str, Any]]]:
    async def run(text: str) -> dict[str, Any]:
        import openai

        async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) as client:
            t0 = time.perf_counter()
            first, size = None, 0
            async with client.audio.speech.with_streaming_response.create(
                model="tts-1", voice="alloy", input=text, response_format="pcm", extra_body={"stream": stream}
            ) as response:
                async for chunk in response.iter_bytes():
                    first = first or time.perf_counter()
                    size += len(chunk)
        assert first is not None, "no audio"
        return {
            "first_ms": round((first - t0) * 1000, 1),
            "total_ms": round((time.perf_counter() - t0) * 1000, 1),
            "audio_s": round(size / 2 / 24000, 3),
        }

    return run


def _ws(ws_url: str) -> Callable[[str], Awaitable[dict[str, Any]]]:
    async def run(text: str) -> dict[str, Any]:
        async with aiohttp.ClientSession() as http:
            result = await ws_stream(http, ws_url, text=text, options={"format": "pcm"})
        if result.ttfb_ms is None:
            raise RuntimeError(f"no audio: {result.error}")
        done = result.done or {}
        return {
            "first_ms": round(result.ttfb_ms, 1),
            "total_ms": done.get("total_ms"),
            "audio_s": round(len(result.audio) / 2 / 24000, 3),
        }

    return run


async def run(args: argparse.Namespace) -> dict[str, Any]:
    settings = {"cache_mb": "0", "speed_warmup_text": ""}
    if args.engine == "fake":
        settings["fake_rtf"] = str(args.fake_rtf)
    python = args.clients_python or str(ROOT / ".venv-clients" / "bin" / "python")
    out: dict[str, Any] = {
        "engine": args.engine,
        "settings": settings,
        "reply": REPLY,
        "rounds": args.rounds,
        "notes": [],
    }
    async with GatewayProcess(args.engine, settings) as gw:
        local = {"ws": _ws(gw.ws_url), "openai-sdk": _openai(gw.url, True), "openai-sdk-batch": _openai(gw.url, False)}
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in (*local, *PROBED)}
        probe = Probe(python) if Path(python).exists() else None
        if probe is None:
            out["notes"].append(f"no {python}: LiveKit and Pipecat skipped (make test-clients builds it)")
        async with probe or _Nothing():
            for n in range(args.rounds + 1):  # round 0 warms up every client and is not counted
                text = WARMUP if n == 0 else REPLY
                for name, call in local.items():
                    result = await call(text)
                    if n:
                        runs[name].append(result)
                for name in PROBED if probe else ():
                    result = await probe.ask(name, gw.url, text)
                    if "error" in result:
                        raise RuntimeError(f"{name}: {result['error']}")
                    if n:
                        runs[name].append(result)
    out["clients"] = {
        name: {"first_ms": stats([r["first_ms"] for r in rs]), "audio_s": rs[0]["audio_s"]}
        for name, rs in runs.items()
        if rs
    }
    return out


class _Nothing:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


def render(out: dict[str, Any]) -> str:
    clients = out["clients"]
    ws = clients["ws"]["first_ms"]
    rows = [
        (
            name,
            e["first_ms"].mean,
            e["first_ms"].median,
            e["first_ms"].min,
            e["first_ms"].max,
            f"{e['first_ms'].mean / ws.mean:.2f}x",
            e["audio_s"],
        )
        for name, e in clients.items()
    ]
    head = f"first audio, {out['engine']} engine, {out['rounds']} rounds interleaved, ratios to ws\n"
    notes = "".join(f"\nnote: {n}" for n in out["notes"])
    return head + table(("client", "mean ms", "median", "min", "max", "vs ws", "audio s"), rows) + notes


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="run_gateway.py bench clients", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--engine", default="fake", choices=("fake", "embedded"))
    p.add_argument("--fake-rtf", type=float, default=DEFAULT_RTF)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--clients-python", help="the Python of the venv with LiveKit and Pipecat (default: .venv-clients/bin/python)"
    )
    p.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = p.parse_args(argv)
    quiet_logs()
    with recorded({}) as out:
        out.update(asyncio.run(run(args)))
    publish(args.out, "clients", out, render(out), plot_title=None, groups_of="clients")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
