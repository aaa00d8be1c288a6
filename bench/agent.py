"""Voice-agent latency: from the prompt to the first audio, batch against bidirectional streaming.

The reply comes from an agent that streams tokens. By default it is the simulated agent,
paced like a typical hosted LLM (settings ``agent_first_token_ms`` = 350 ms to the first
token, then ``agent_tokens_per_s`` = 60 tokens a second; ``--first-token-ms`` and
``--tokens-per-s`` change both sides). Interleaved, after an uncounted warm-up:

* batch: the same agent, run here at the same pace, until the whole reply is in; then
  ``POST /v1/audio/speech``; time from the prompt to the first body byte;
* ws: the WebSocket channel with ``{type: "prompt"}``: the gateway's own agent (same
  timing) streams tokens into the segmenter; time from the prompt to the first audio frame;
* ws_tokens: the agent run here, each token sent as a ``text`` message as it arrives (how a
  client with its own LLM uses the channel).

With ``--llm-url`` (an OpenAI-compatible streaming chat endpoint) or ``--bedrock-model``
(Bedrock ``converse_stream``), a real LLM replaces the simulated agent for batch and
ws_tokens, through the gateway's own clients (``gateway.agent``). Writes
``bench-results/agent.json``, a bar chart and a timeline of one reply.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol

import aiohttp

from gateway.agent import Agent, SimulatedAgent, one_turn
from gateway.agent.bedrock import BedrockConverse
from gateway.agent.openai_chat import OpenAIChat
from gateway.config import Settings

from .client import StreamResult
from .common import (
    RESULTS_DIR,
    Probe,
    Target,
    bench_settings,
    gateway,
    measure,
    post_speech,
    publish,
    quiet_logs,
    recorded,
    stall_cell,
    stream_run,
    summarize,
    table,
    timeline,
)
from .corpus import agent_prompts
from .plots import plot_timeline
from .remote import RemoteClient

ANCHOR = {
    "local_container_speedup": 2.4,
    "deployed_runtime_speedup": 3.5,
    "where": "bidirectional streaming vs batch with a generative agent",
}
LLM_PROMPTS = (
    "My package has not arrived yet. What should I do?",
    "Can you move my dentist appointment to Monday morning?",
    "What is the weather like today, and should I bring a jacket?",
    "How do I reset my password?",
    "Summarize last quarter's results for me.",
)
SYSTEM = "You are a voice assistant. Answer in two to four short, plain sentences."
WARMUP = "Hello?"


class TokenSource(Protocol):
    def stream(self, prompt: str) -> AsyncIterator[str]: ...


class OneTurn:
    """A gateway agent (``gateway.agent``: the same clients the gateway uses) asked one
    question at a time, with the benchmark's system prompt."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def stream(self, prompt: str) -> AsyncIterator[str]:
        return self.agent.stream(one_turn(prompt, SYSTEM))


async def ws_tokens(
    http: aiohttp.ClientSession,
    url: str,
    source: TokenSource,
    prompt: str,
    options: dict[str, Any],
    timeout: float = 120.0,
) -> StreamResult:
    """One reply over the WebSocket, each token sent as a ``text`` message the moment it arrives."""
    result = StreamResult()
    async with http.ws_connect(url, max_msg_size=0) as ws:
        result.t0 = time.perf_counter()
        await ws.send_json({"type": "start", **options})
        reader = asyncio.create_task(_read(ws, result))
        async for token in source.stream(prompt):
            await ws.send_json({"type": "text", "text": token})
        await ws.send_json({"type": "end"})
        await asyncio.wait_for(reader, timeout)
        result.close_code = ws.close_code
    return result


async def _read(ws: aiohttp.ClientWebSocketResponse, result: StreamResult) -> None:
    async for msg in ws:
        now = time.perf_counter()
        if msg.type == aiohttp.WSMsgType.BINARY:
            result.add_audio(msg.data)
            result.events.append((now, "audio", {"bytes": len(msg.data)}))
        elif msg.type == aiohttp.WSMsgType.TEXT:
            body = json.loads(msg.data)
            result.events.append((now, body.pop("type"), body))
        else:
            break


def probes_for(t: Target, source: TokenSource, fields: dict[str, Any], client: RemoteClient | None) -> dict[str, Probe]:
    """batch and ws_tokens run ``source`` here; ws (the gateway's own agent) runs in ``client``."""

    async def batch(http: aiohttp.ClientSession, prompt: str) -> dict[str, Any]:
        t0 = time.perf_counter()
        text = "".join([token async for token in source.stream(prompt)])
        reply_ms = (time.perf_counter() - t0) * 1000
        b = await post_speech(http, t.speech_url, text, t0=t0, **fields)
        return {"ttfb_ms": b.ttfb_ms, "total_ms": b.total_ms, "reply_ms": reply_ms, "reply": text}

    async def tokens(http: aiohttp.ClientSession, prompt: str) -> dict[str, Any]:
        return stream_run(await ws_tokens(http, t.ws_url, source, prompt, fields), "ws tokens")

    if client is None:
        return {"batch": batch, "ws_tokens": tokens}
    remote = client

    async def ws(http: aiohttp.ClientSession, prompt: str) -> dict[str, Any]:
        return stream_run(await remote.run("ws", t.ws_url, prompt=prompt, options=fields), "ws prompt")

    return {"batch": batch, "ws": ws, "ws_tokens": tokens}


async def draw_timeline(
    client: RemoteClient, t: Target, prompt: str, fields: dict[str, Any], path: Path
) -> dict[str, Any]:
    """One prompt on both channels (WebSocket with msgpack, so audio frames carry their times)."""
    ws = await client.run("ws", t.ws_url, prompt=prompt, options={**fields, "envelope": "msgpack"})
    sse = await client.run("sse", t.sse_url, prompt=prompt, options=fields)
    s = t.settings
    lanes = {
        name: timeline(r, bitrate=64, first_clause_words=s.first_clause_words, max_chars=s.max_segment_chars)
        for name, r in (("ws (prompt)", ws), ("sse (prompt)", sse))
    }
    plot_timeline(
        path,
        f"{t.name}: one agent reply ({s.agent_first_token_ms:g} ms to first token, {s.agent_tokens_per_s:g} tokens/s)",
        lanes,
    )
    return lanes


def sources(http: aiohttp.ClientSession, args: argparse.Namespace) -> dict[str, tuple[TokenSource, list[str]]]:
    n = args.prompts
    found: dict[str, tuple[TokenSource, list[str]]] = {}
    if not args.no_simulated:
        agent = SimulatedAgent(first_token_ms=args.first_token_ms, tokens_per_s=args.tokens_per_s)
        found["simulated"] = (OneTurn(agent), agent_prompts(n))
    if args.llm_url:
        key = os.environ.get(args.llm_key_env, "") if args.llm_key_env else ""
        chat = OpenAIChat(args.llm_url, args.llm_model, key=key, http=http)
        found[f"llm:{args.llm_model}"] = (OneTurn(chat), list(LLM_PROMPTS[:n]))
    if args.bedrock_model:
        bedrock = BedrockConverse(args.bedrock_model, region=args.bedrock_region)
        found[f"bedrock:{args.bedrock_model}"] = (OneTurn(bedrock), list(LLM_PROMPTS[:n]))
    return found


def gateway_settings(args: argparse.Namespace) -> Settings:
    extra: dict[str, Any] = {"agent_first_token_ms": args.first_token_ms, "agent_tokens_per_s": args.tokens_per_s}
    if args.engine == "fake":  # paced like the embedded engine: whole segments, RTF as given
        extra.update(fake_rtf=args.fake_rtf, fake_first_delay_ms=args.fake_first_delay_ms, fake_chunk_ms=600_000)
    return bench_settings(args.engine, args.set, **extra)


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {
        "bench": "agent",
        "anchor": ANCHOR,
        "engine": args.engine,
        "reps": args.reps,
        "agent": {"first_token_ms": args.first_token_ms, "tokens_per_s": args.tokens_per_s},
        "sources": {},
    }
    fields: dict[str, Any] = {"voice": args.voice} if args.voice else {}
    if args.engine == "fake" and args.fake_speed != 1.0:
        fields["speed"] = args.fake_speed
    with recorded(out):
        async with (
            aiohttp.ClientSession() as http,
            gateway(gateway_settings(args)) as t,
            RemoteClient.start() as client,
        ):
            for name, (source, prompts) in sources(http, args).items():
                probes = probes_for(t, source, fields, client if name == "simulated" else None)
                result = summarize(await measure(http, probes, prompts, args.reps, WARMUP, name))
                out["sources"][name] = {**result, "prompts": prompts}
            if not args.no_plots and not args.no_simulated:
                path = args.out / "agent-timeline.png"
                out["timeline"] = await draw_timeline(client, t, agent_prompts()[0], fields, path)
    return out


def render(out: dict[str, Any]) -> str:
    rows: list[list[Any]] = []
    for name, res in out["sources"].items():
        for ch, e in res["channels"].items():
            imp = res["improvement"].get(ch)
            rows.append(
                [
                    name,
                    ch,
                    e["ttfb"].n,
                    e["ttfb"].mean,
                    e["ttfb"].median,
                    e["ttfb"].p90,
                    f"{imp['speedup_mean']:.2f}x" if imp else "",
                    f"{imp['speedup_median']:.2f}x" if imp else "",
                    e["total"].mean,
                    stall_cell(e),
                ]
            )
    headers = [
        "source",
        "channel",
        "n",
        "mean ms",
        "median",
        "p90",
        "speed-up",
        "(median)",
        "last audio ms",
        "stalls (runs, total)",
    ]
    a, ag = out["anchor"], out["agent"]
    lines = [
        f"engine {out['engine']}; simulated agent: {ag['first_token_ms']:g} ms to the first token, then "
        f"{ag['tokens_per_s']:g} tokens/s (typical of a hosted LLM); time from the prompt to the first audio",
        table(headers, rows),
        f"anchor ({a['where']}): {a['local_container_speedup']}x on a local container, "
        f"{a['deployed_runtime_speedup']}x on a deployed agent runtime",
    ]
    sim = out["sources"].get("simulated", {}).get("improvement", {}).get("ws")
    if sim:
        verdict = "met" if sim["speedup_mean"] >= 3 else "NOT met"
        lines.append(f"goal (ws speed-up >= 3x): {sim['speedup_mean']:.2f}x -> {verdict}")
    return "\n".join(lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
    d = Settings()
    p = argparse.ArgumentParser(
        prog="run_gateway.py bench agent", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--engine", default="embedded", help="gateway engine (default: %(default)s)")
    p.add_argument("--reps", type=int, default=2, help="repetitions of the prompts (default: %(default)s)")
    p.add_argument("--prompts", type=int, default=None, metavar="N", help="use the first N prompts (default: all 5)")
    p.add_argument(
        "--first-token-ms",
        type=float,
        default=d.agent_first_token_ms,
        help="simulated agent: delay to the first token (default: %(default)s)",
    )
    p.add_argument(
        "--tokens-per-s",
        type=float,
        default=d.agent_tokens_per_s,
        help="simulated agent: token rate (default: %(default)s)",
    )
    p.add_argument("--voice", default="")
    p.add_argument("--fake-rtf", type=float, default=0.35, help="with --engine fake (default: %(default)s)")
    p.add_argument("--fake-first-delay-ms", type=float, default=0.0)
    p.add_argument(
        "--fake-speed",
        type=float,
        default=1.0,
        help="with --engine fake: request speed (0.7 ~ the embedded voice's audio per word)",
    )
    p.add_argument("--llm-url", help="OpenAI-compatible base URL or /chat/completions URL (off by default)")
    p.add_argument("--llm-model", default="", help="model name for --llm-url")
    p.add_argument(
        "--llm-key-env",
        default="OPENAI_API_KEY",
        help="environment variable holding the key for --llm-url (default: %(default)s; unset: no key)",
    )
    p.add_argument("--bedrock-model", default="", help="Bedrock model id for converse_stream (off by default)")
    p.add_argument("--bedrock-region", default="")
    p.add_argument("--no-simulated", action="store_true", help="only the real LLM source(s)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="gateway setting override")
    p.add_argument("--out", type=Path, default=RESULTS_DIR, help="output folder (default: %(default)s)")
    p.add_argument("--no-plots", action="store_true")
    args = p.parse_args(argv)
    if args.reps < 1:
        p.error("--reps must be >= 1")
    if args.llm_url and not args.llm_model:
        p.error("--llm-url needs --llm-model")
    if args.no_simulated and not (args.llm_url or args.bedrock_model):
        p.error("--no-simulated needs --llm-url or --bedrock-model")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    quiet_logs()
    out = asyncio.run(bench(args))
    publish(
        args.out,
        "agent",
        out,
        render(out),
        plot_title=None if args.no_plots else "agent: prompt to first audio",
        groups_of="sources",
    )
    return 0
