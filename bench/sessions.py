"""The load test's sessions: one voice-agent reply on the WebSocket or SSE channel, timed from
before the connection opens; N closed-loop workers per level; the sweep over levels."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass

import aiohttp

from .client import sse_stream
from .meters import payload_seconds
from .slo import LevelResult, ServiceLevel, SessionStat, playback_stalls, summarize

log = logging.getLogger("bench.loadtest")  # the sweep's progress lines are the load test's

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
        await ws.send_json(
            {"type": "start", "format": plan.fmt, "cache": False, **({"voice": plan.voice} if plan.voice else {})}
        )
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

    return (
        f"c={r.concurrency:<4} sessions={r.sessions:<4} ttfa p50/p90/p99 = {f(r.ttfa_p50_ms, '.0f')}/"
        f"{f(r.ttfa_p90_ms, '.0f')}/{f(r.ttfa_p99_ms, '.0f')} ms  rtf p50 {f(r.rtf_p50, '.2f')}  "
        f"stalled {r.stalled_sessions}  errors {r.errors} {r.error_codes or ''}  {r.rps:.2f}/s"
    )
