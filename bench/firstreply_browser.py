"""``bench firstreply --browser``: the same question in Chromium on the demo page.

Per order, a fresh gateway; the moment it logs that it is ready, Chromium (Debian's, headless,
launched beforehand) opens the demo page and presses "Play both" on the default text: that is
the very first reply. Then "Play both" again (warm), then the batch baseline of the same text
(MP3, ``cache: false``) in the same run, once after each press (their mean is the baseline).
The figure is the page's own ``firstSoundMs`` (its level meter first hears the channel, from the
press) and ``ttfbMs`` (first audio payload); beside them, when the page called play()
(``playCalledMs``) and the browser's CPU (cores) from the press until both channels did: what
it took from the engine on the same cores while the first audio was made.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import aiohttp

from .common import post_speech
from .firstreply import ORDERS, Gateway
from .procs import browser_cpu_seconds, browser_quiet
from .transports import FINISHED_JS, launch_chromium, open_demo, stats

# every channel called play() (or is over): the reply's making, up to its start
STARTED_JS = (
    "(names) => names.every((n) => { const s = window.demo.channels[n]; "
    "return s && (s.playCalledMs !== null || s.finished); })"
)


async def _press(page: Any) -> dict[str, Any]:
    cpu, t0 = browser_cpu_seconds(), time.perf_counter()
    await page.click("#play-both")
    await page.wait_for_function(STARTED_JS, arg=["sse", "ws"], timeout=180_000, polling=20)
    # the browser's own CPU while the engine made the first audio, on the same cores
    cores = (browser_cpu_seconds() - cpu) / (time.perf_counter() - t0)
    await page.wait_for_function(FINISHED_JS, arg=["sse", "ws"], timeout=180_000, polling=50)
    runs = await stats(page)
    return {
        n: {
            "first_audio_ms": runs[n]["ttfbMs"],
            "sound_ms": runs[n]["firstSoundMs"],
            "start_preroll_ms": runs[n]["startPrerollMs"],
            "start_held_ms": runs[n]["startHeldMs"],
            "play_called_ms": runs[n]["playCalledMs"],
            # the clock starts offered (``start_in_ms``) and the holds in force, as the page saw them
            "start_in_ms": [e[2]["ms"] for e in runs[n]["timeline"] if e[1] == "start_in"],
            "prerolls_ms": [e[2]["ms"] for e in runs[n]["timeline"] if e[1] == "preroll"],
            "browser_cores": round(cores, 2),
            "gaps": len(runs[n]["gaps"]),
            "gaps_ms": [round(g["ms"]) for g in runs[n]["gaps"]],  # each one the listener heard
            "error": runs[n]["error"],
        }
        for n in ("sse", "ws")
    }


async def _batch_ms(url: str, text: str) -> float:
    async with aiohttp.ClientSession() as http:
        return (await post_speech(http, url + "/v1/audio/speech", text, response_format="mp3")).total_ms


async def one_order(order: str, press: str, args: argparse.Namespace, browser: Any) -> dict[str, Any]:
    async with Gateway(args.engine, ORDERS[order] + args.set) as gw:
        assert gw.ready_at is not None
        page = await open_demo(browser, gw.url)
        opened_ms = round((time.perf_counter() - gw.ready_at) * 1000)
        if press == "settled":  # as a person would: once the page is drawn (``browser_quiet``)
            await browser_quiet()
        pressed_ms = round((time.perf_counter() - gw.ready_at) * 1000)
        try:  # the batch twice, between and after the presses: the machine's load drifts
            cold = await _press(page)
            batches = [await _batch_ms(gw.url, args.text)]
            replies = {"first (cold)": cold, "second": await _press(page)}
            batches.append(await _batch_ms(gw.url, args.text))
        finally:
            await page.close()
        batch_ms = sum(batches) / len(batches)
        rows = []
        for label, channels in replies.items():
            for name, r in channels.items():
                sound = r["sound_ms"]
                rows.append(
                    {
                        "reply": f"{label}: {name}",
                        **r,
                        "start_vs_batch": round(sound / batch_ms, 3) if sound is not None else None,
                    }
                )
        return {
            "order": order,
            "press": press,
            "ready_s": round(gw.ready_at - gw.spawned_at, 2),
            "page_open_ms": opened_ms,
            "pressed_ms": pressed_ms,  # the first press, from the ready line
            "batch_ms": round(batch_ms, 1),
            "batches_ms": [round(b) for b in batches],
            "replies": rows,
            "log_after_ready": gw.after_ready(),
        }


async def bench(args: argparse.Namespace, out: dict[str, Any]) -> None:
    from playwright.async_api import async_playwright

    out["players"] = "Chromium (the demo page, MP3 over MSE)"
    async with async_playwright() as pw:
        browser = await launch_chromium(pw)
        try:
            for order in args.orders:
                for press in args.press:
                    out["orders"].append(await one_order(order, press, args, browser))
        finally:
            await browser.close()
