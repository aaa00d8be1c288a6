"""SSE vs WebSocket, measured in a real browser: bytes, overhead, first byte, first sound.

Starts a gateway itself on a free loopback port (the fake engine by default, ``--engine
embedded`` for real speech), opens the demo page in Debian's Chromium through Playwright and
plays the same text over each channel, one at a time, with frame-aligned payloads and with
naive byte chunking. Every figure comes from the page (``window.demo``), so it is what a
browser saw. Prints a side-by-side table; writes ``bench-results/transports.json``.

The browser helpers here (``launch_chromium``, ``open_demo``, ``play``) are shared with
``tests/test_browser.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from gateway.config import Settings, load_settings

from .servers import serve_gateway

log = logging.getLogger(__name__)

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--autoplay-policy=no-user-gesture-required",
)
TEXT = (
    "Thanks for calling. Your order shipped this morning and should arrive on Thursday. "
    "Is there anything else I can help with?"
)
# window.demo's stats minus functions (JSON drops them), for one channel or all
STATS_JS = "(name) => JSON.parse(JSON.stringify(name ? window.demo.channels[name] : window.demo.channels))"
FINISHED_JS = "(names) => names.every((n) => window.demo.channels[n] && window.demo.channels[n].finished)"


async def launch_chromium(playwright: Any) -> Any:
    """Debian's Chromium, headless, offline-friendly, audio allowed to start without a gesture."""
    return await playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=list(CHROMIUM_ARGS))


async def open_demo(browser: Any, url: str, *, init_script: str | None = None, path: str = "/") -> Any:
    """A new page on the demo, once its voices have loaded.

    Page errors and every URL the page requests are kept on the page (``page_errors``,
    ``requested``), so a test can check that nothing went anywhere but the gateway.
    """
    page = await browser.new_page(viewport={"width": 1180, "height": 1000})
    page.page_errors = []
    page.requested = []
    page.on("pageerror", lambda exc: page.page_errors.append(str(exc)))
    page.on("request", lambda req: page.requested.append(req.url))
    if init_script:
        await page.add_init_script(init_script)
    await page.goto(url + path)  # path may hold a fragment: /#token=...
    await page.wait_for_function("() => window.demo && window.demo.ready")
    return page


async def set_options(
    page: Any,
    *,
    text: str = TEXT,
    prompt: str | None = None,
    fmt: str = "mp3",
    chunking: str = "frames",
    speed: float = 1.0,
    voice: str | None = None,
) -> None:
    """Fill the form as a user would."""
    await page.check("input[name=input][value=%s]" % ("prompt" if prompt else "text"))
    if prompt:
        await page.fill("#prompt", prompt)
    else:
        await page.fill("#text", text)
    if voice:
        await page.select_option("#voice", voice)
    await page.select_option("#format", fmt)
    await page.eval_on_selector("#speed", "(el, v) => { el.value = v; }", str(speed))
    naive = chunking.startswith("bytes:")
    await page.set_checked("#naive", naive)
    if naive:
        await page.fill("#naive-bytes", chunking.split(":", 1)[1])


async def play(
    page: Any, which: str = "both", *, wait: bool = True, timeout_s: float = 60.0, **options: Any
) -> dict[str, Any]:
    """Set the options, press a play button, and (by default) wait until each run is finished."""
    await set_options(page, **options)
    await page.click({"both": "#play-both", "sse": "#play-sse", "ws": "#play-ws"}[which])
    names = ["sse", "ws"] if which == "both" else [which]
    if wait:
        await page.wait_for_function(FINISHED_JS, arg=names, timeout=timeout_s * 1000, polling=50)
    return await stats(page)


async def stats(page: Any, name: str | None = None) -> dict[str, Any]:
    return await page.evaluate(STATS_JS, name)


async def payloads(page: Any, name: str) -> list[bytes]:
    """The audio payloads exactly as the page received them on ``name``."""
    return [base64.b64decode(p) for p in await page.evaluate("(n) => window.demo.payloadsBase64(n)", name)]


# -- the benchmark ------------------------------------------------------------------------
@asynccontextmanager
async def serve(settings: Settings) -> AsyncIterator[str]:
    """A real gateway on a free loopback port; yields its URL."""
    async with serve_gateway(settings) as (url, _):
        yield url


def row(channel: str, chunking: str, st: dict[str, Any]) -> dict[str, Any]:
    done = st.get("done") or {}
    dec = st["decode"]
    return {
        "channel": channel,
        "chunking": chunking,
        "audio_bytes": st["audioBytes"],
        "wire_bytes": st["wireBytes"],
        "wire_bytes_total": st["wireBytesTotal"],
        "overhead_pct": st["overheadPct"],
        "overhead_total_pct": st["overheadTotalPct"],
        "server_wire_bytes": done.get("wire_bytes"),
        "messages": st["messages"],
        "payloads": st["audioMessages"],
        "whole_frame_payloads": st["wholePayloads"],
        "ttfb_ms": st["ttfbMs"],
        "server_ttfb_ms": done.get("ttfb_ms"),
        "first_play_ms": st["firstPlayMs"],
        "first_sound_ms": st["firstSoundMs"],
        "decode_failures": dec["failures"],
        "single_frame_failures": dec["singleFrameFailures"],
        "lost_samples": dec["lostSamples"],
        "lost_pct": dec["lostPct"],
        "mse_append_errors": st["mse"]["appendErrors"],
        "gaps": len(st["gaps"]),
        "gap_ms": round(sum(g["ms"] for g in st["gaps"]), 1),
        "ended": st["ended"],
        "errors": st["errors"],
    }


def print_table(rows: list[dict[str, Any]]) -> None:
    cols = (
        ("channel", 8),
        ("chunking", 11),
        ("audio_bytes", 8),
        ("wire_bytes", 8),
        ("overhead_pct", 9),
        ("overhead_total_pct", 10),
        ("ttfb_ms", 8),
        ("first_sound_ms", 9),
        ("payloads", 9),
        ("whole_frame_payloads", 7),
        ("decode_failures", 9),
        ("single_frame_failures", 8),
        ("lost_pct", 8),
        ("gaps", 5),
    )
    heads = (
        "channel",
        "chunking",
        "audio B",
        "wire B",
        "overhead",
        "all msgs",
        "TTFB ms",
        "sound ms",
        "payloads",
        "whole",
        "dec.fail",
        "1-frame",
        "lost %",
        "gaps",
    )
    line = "".join(h.rjust(w) if i > 1 else h.ljust(w) for i, (h, (_, w)) in enumerate(zip(heads, cols)))
    out = [line, "-" * len(line)]
    for r in rows:
        cells = []
        for i, (key, width) in enumerate(cols):
            value = r[key]
            text = (
                f"{value:+.1f}%"
                if key.startswith("overhead") and value is not None
                else (f"{value:.0f}" if isinstance(value, float) else str(value))
            )
            cells.append(text.rjust(width) if i > 1 else text.ljust(width))
        out.append("".join(cells))
    print("\n".join(out))


async def measure(settings: Settings, text: str, naive_bytes: int, fmt: str) -> list[dict[str, Any]]:
    from playwright.async_api import async_playwright

    rows: list[dict[str, Any]] = []
    async with serve(settings) as url:
        async with async_playwright() as pw:
            browser = await launch_chromium(pw)
            try:
                page = await open_demo(browser, url)
                await play(page, "ws", text="Warm up.", fmt=fmt)  # first call loads lazily: keep it out
                for chunking in ("frames", f"bytes:{naive_bytes}"):
                    for channel in ("sse", "ws"):
                        st = (await play(page, channel, text=text, fmt=fmt, chunking=chunking, timeout_s=120))[channel]
                        rows.append(row(channel, chunking, st))
                        log.info("%s %s: %s", channel, chunking, rows[-1])
                Path("artifacts").mkdir(exist_ok=True)
                await page.screenshot(path="artifacts/transports.png", full_page=True)
            finally:
                await browser.close()
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="run_gateway.py bench transports", description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", default="fake", help="fake (default) or embedded")
    parser.add_argument("--text", default=TEXT)
    parser.add_argument("--naive-bytes", type=int, default=1000, help="N for the naive bytes:N chunking")
    parser.add_argument("--format", default="mp3", choices=("mp3", "pcm"))
    parser.add_argument("--fake-rtf", type=float, default=0.3, help="fake engine: compute seconds per audio second")
    parser.add_argument("--out", default="bench-results/transports.json")
    args = parser.parse_args(argv)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    # cache_mb=0: each channel synthesizes its own reply (repeats would come from the cache)
    overrides: dict[str, Any] = {"engine": args.engine, "cache_mb": 0}
    if args.engine == "fake":
        overrides["fake_rtf"] = args.fake_rtf
    settings = load_settings(overrides=overrides)
    rows = asyncio.run(measure(settings, args.text, args.naive_bytes, args.format))
    print_table(rows)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"engine": args.engine, "format": args.format, "text": args.text, "rows": rows}, indent=2)
    )
    log.info("wrote %s", out)
    return 0
