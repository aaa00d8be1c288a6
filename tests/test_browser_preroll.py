"""The demo page's MediaSource player at a segment's end, in Chromium: what it counts as held.

The gateway's ``preroll_ms`` counts the audio it has made; an MP3 stream carries that audio
only up to the encoder's look-ahead (80-127 ms at 24 kHz), the rest comes with the next
segment's audio. The reply here is real (fake engine, real gateway, real MP3), held after its
first segment by the fake engine's gate, and played into the page's own ``Run`` and player.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bench.transports import CHROMIUM, launch_chromium, open_demo, serve
from gateway.engines.fake import fake_duration_s

from .conftest import fake_settings

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium"),
]

FIRST = "One two three."
TEXT = f"{FIRST} The gated sentence comes much later."

# the page's Run fed what a channel delivers: [kind, body] events, audio as base64
FEED_JS = """async ([events, prerollMs, format]) => {
  if (!window.replay) {
    const { Run } = await import('/static/run.js');
    const { Graph } = await import('/static/players.js');
    const ctx = new AudioContext();
    window.replay = new Run('ws', { format: format || 'mp3', chunking: 'frames' }, ctx, new Graph(ctx), () => {});
  }
  const run = window.replay;
  for (const [kind, body] of events) {
    if (kind === 'audio') {
      const bytes = Uint8Array.from(atob(body), (c) => c.charCodeAt(0));
      run.audio(bytes, { sentence: 0 }, bytes.length);
    } else {
      run.event(kind, { ...body, preroll_ms: prerollMs }, 0);
    }
  }
}"""


async def first_segment(url: str, fmt: str = "mp3") -> tuple[list[list[Any]], dict[str, Any]]:
    """The reply over the WebSocket up to the gated segment's `sentence` (its audio never comes)."""
    seen: list[list[Any]] = []
    ws_url = url.replace("http://", "ws://") + "/v1/stream/ws"
    async with aiohttp.ClientSession() as http, http.ws_connect(ws_url) as ws:
        await ws.send_json({"type": "start", "format": fmt, "text": TEXT, "cache": False})
        await ws.send_json({"type": "end"})
        while True:
            msg = await ws.receive(timeout=20)
            if msg.type == aiohttp.WSMsgType.BINARY:
                seen.append(["audio", base64.b64encode(msg.data).decode()])
                continue
            body = json.loads(msg.data)
            if body["type"] == "sentence" and body["index"] == 1:
                return seen, body
            seen.append([body["type"], body])


async def test_the_mse_player_starts_once_it_holds_the_audio_made(tmp_path: Path) -> None:
    """Told to hold exactly the first segment's audio, the player plays once that segment is in
    and the next `sentence` says what the encoder still holds (``held_back_ms``), though the
    stream alone is short of it. Counting only the stream, it waited for the next segment's
    audio: here never (the gate stays shut), on the real engine a whole synthesis later."""
    gate = tmp_path / "open"
    settings = fake_settings(fake_rtf=0.0, fake_gate_word="gated", fake_gate_path=str(gate))
    from playwright.async_api import async_playwright

    async with serve(settings) as url:
        before, sentence = await first_segment(url)
        gate.touch()  # let the gated flight end
        hold_ms = round(fake_duration_s(FIRST) * 1000)
        audio = sum(1 for kind, _ in before if kind == "audio")
        assert audio and sentence["held_back_ms"] > 0
        async with async_playwright() as pw:
            browser = await launch_chromium(pw)
            page = await open_demo(browser, url)
            try:
                await page.evaluate(FEED_JS, [before, hold_ms])
                await page.wait_for_function(f"() => window.replay.stats.mse.appendsOk === {audio}", timeout=10_000)
                st = await page.evaluate("() => JSON.parse(JSON.stringify(window.replay.stats))")
                # the stream is short of the hold: the encoder keeps the segment's tail
                assert st["firstPlayMs"] is None and st["mse"]["bufferedS"] * 1000 < hold_ms, st["mse"]
                await page.evaluate(FEED_JS, [[["sentence", sentence]], hold_ms])
                await page.wait_for_function("() => window.replay.stats.firstPlayMs !== null", timeout=10_000)
                st = await page.evaluate("() => JSON.parse(JSON.stringify(window.replay.stats))")
                assert st["startPrerollMs"] == hold_ms and st["errors"] == [] and page.page_errors == []
                await page.evaluate("() => window.replay.stop()")
            finally:
                await page.close()
                await browser.close()


@pytest.mark.parametrize("fmt", ["mp3", "pcm"])
async def test_a_player_starts_on_the_clock_below_its_hold(tmp_path: Path, fmt: str) -> None:
    """Both of the page's players, holding the first segment against a hold it never reaches:
    a `sentence` with `start_in_ms` starts them (the gateway's forecast of when every later
    payload is in time), with less held than the hold in force."""
    gate = tmp_path / "open"
    settings = fake_settings(fake_rtf=0.0, fake_gate_word="gated", fake_gate_path=str(gate))
    from playwright.async_api import async_playwright

    hold_ms = 60_000
    async with serve(settings) as url:
        before, sentence = await first_segment(url, fmt)
        gate.touch()
        audio = sum(1 for kind, _ in before if kind == "audio")
        async with async_playwright() as pw:
            browser = await launch_chromium(pw)
            page = await open_demo(browser, url)
            try:
                await page.evaluate(FEED_JS, [before, hold_ms, fmt])
                if fmt == "mp3":
                    await page.wait_for_function(f"() => window.replay.stats.mse.appendsOk === {audio}", timeout=10_000)
                st = await page.evaluate("() => JSON.parse(JSON.stringify(window.replay.stats))")
                assert st["firstPlayMs"] is None and st["playCalledMs"] is None, st["timeline"]
                await page.evaluate(FEED_JS, [[["sentence", {**sentence, "start_in_ms": 200}]], hold_ms, fmt])
                await page.wait_for_function("() => window.replay.stats.playCalledMs !== null", timeout=10_000)
                st = await page.evaluate("() => JSON.parse(JSON.stringify(window.replay.stats))")
                assert st["startPrerollMs"] == hold_ms and 0 < st["startHeldMs"] < hold_ms, st["timeline"]
                assert st["errors"] == [] and page.page_errors == []
                await page.evaluate("() => window.replay.stop()")
            finally:
                await page.close()
                await browser.close()
