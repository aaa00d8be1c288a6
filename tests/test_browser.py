"""A/B tests of the two channels in a real browser: Debian's Chromium, driven by Playwright.

One real gateway (fake engine: tones, streamed at 0.3x real time) and one browser serve the
module. Every test plays through the demo page as a user would and reads what the page measured
from ``window.demo``; the payload bytes the page received are checked again here in Python.
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
import pytest_asyncio
from playwright.async_api import TimeoutError as PlaywrightTimeout

from gateway.audio.mp3 import count_frames, is_whole_frames
from gateway.bench.transports import CHROMIUM, launch_chromium, open_demo, payloads, play, serve, stats
from tests.conftest import fake_settings

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium"),
]

FRAME_S = 576 / 24000  # one MPEG-2 Layer III frame at 24 kHz
TEXT = "Hello there. This is the first test. Both channels play it now."
LONG = " ".join(["This sentence keeps the speaker busy for a while."] * 6)
ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def gateway_url() -> AsyncIterator[str]:
    async with serve(fake_settings(fake_rtf=0.3)) as url:
        yield url


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def browser() -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        chromium = await launch_chromium(pw)
        yield chromium
        await chromium.close()


@pytest_asyncio.fixture(loop_scope="module")
async def page(browser: Any, gateway_url: str) -> AsyncIterator[Any]:
    page = await open_demo(browser, gateway_url)
    page.set_default_timeout(10_000)
    yield page
    assert page.page_errors == []
    # no build step, no network: everything the page loads comes from the gateway itself
    assert page.requested and all(url.startswith((gateway_url + "/", "data:", "blob:")) for url in page.requested)
    await page.close()


def assert_bytes_match_server(st: dict[str, Any]) -> None:
    """The page's own byte count equals the server's `done` figures, to the byte."""
    done = st["done"]
    assert st["audioBytes"] == done["audio_bytes"] > 0
    assert st["wireBytes"] == done["wire_bytes"]
    assert st["wireBytesTotal"] == done["wire_bytes_total"]
    assert st["overheadPct"] == pytest.approx((done["wire_bytes"] / done["audio_bytes"] - 1) * 100, abs=0.01)


async def wait_decoded(page: Any, names: list[str]) -> dict[str, Any]:
    """Until every channel has `done` and the decode check has seen every payload."""
    await page.wait_for_function(
        """(names) => names.every((n) => { const s = window.demo.channels[n];
             return s && s.done && s.decode.pending === 0 && s.decode.payloads === s.audioMessages; })""",
        arg=names, timeout=20_000, polling=50)
    return await stats(page)


async def test_frame_aligned_mp3_plays_gaplessly_on_both_channels(page: Any) -> None:
    runs = await play(page, "both", text=TEXT, fmt="mp3", timeout_s=30)
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / "demo.png"), full_page=True)
    streams = {}
    for name, st in runs.items():
        assert st["errors"] == [] and st["error"] is None, name
        n = st["audioMessages"]
        # the page's check: every payload starts on a frame sync and is whole frames
        assert n > 3 and st["syncPayloads"] == st["wholePayloads"] == n
        # the same bytes, checked again here
        received = await payloads(page, name)
        assert len(received) == n and all(is_whole_frames(p) for p in received)
        streams[name] = b"".join(received)
        assert count_frames(streams[name]) == st["frames"]
        # MSE took every append, and holds exactly the frames sent
        assert st["mse"]["appends"] == st["mse"]["appendsOk"] == n and st["mse"]["appendErrors"] == 0
        assert st["mse"]["ranges"] == 1
        assert abs(st["mse"]["bufferedS"] - st["frames"] * FRAME_S) <= FRAME_S
        # it played, to the end, audibly, without gaps
        assert st["playResolved"] and st["ended"] and st["firstPlayMs"] is not None
        assert st["firstSoundMs"] is not None and st["peakRms"] > 0.05
        assert st["soundMs"] >= 0.4 * st["done"]["audio_ms"]
        assert st["gaps"] == []
        assert all(s["playMs"] is not None for s in st["sentences"]) and len(st["sentences"]) == 3
        assert_bytes_match_server(st)
        # decoded one by one, every payload of two or more frames gives exactly its samples;
        # the only failures are single frames (Chromium will not probe a stream from one frame)
        for p in st["payloads"]:
            if p["frames"] >= 2:
                assert p["decoded"] == p["frames"] * 576, p
        single = sum(1 for p in st["payloads"] if p["frames"] == 1)
        assert st["decode"]["failures"] == st["decode"]["singleFrameFailures"] == single
    assert streams["sse"] == streams["ws"]  # the same audio, whichever channel carried it
    assert runs["sse"]["overheadPct"] > 30 > 5 > runs["ws"]["overheadPct"]


async def test_naive_byte_chunking_damage_is_detected(page: Any) -> None:
    await play(page, "both", wait=False, text=TEXT, fmt="mp3", chunking="bytes:1000")
    runs = await wait_decoded(page, ["sse", "ws"])
    await page.click("#stop")
    for name, st in runs.items():
        received = await payloads(page, name)
        # the stream itself is intact; only the cuts are wrong
        assert count_frames(b"".join(received)) == st["frames"] > 0
        assert not all(is_whole_frames(p) for p in received)
        assert st["wholePayloads"] < st["audioMessages"]
        dec = st["decode"]
        assert dec["failures"] > 0 or dec["lostSamples"] > 0.05 * st["samples"], dec
        assert_bytes_match_server(st)


async def test_stop_silences_both_channels_within_200ms_and_keeps_the_socket(page: Any) -> None:
    await play(page, "both", wait=False, text=LONG, fmt="mp3")
    await page.wait_for_function(
        "() => ['sse', 'ws'].every((n) => window.demo.channels[n].soundMs >= 300)", timeout=20_000, polling=20)
    await page.click("#stop")
    settled = """() => ['sse', 'ws'].every((n) => window.demo.channels[n].cancel.silentMs !== null)
                  && window.demo.channels.ws.cancel.cancelledMs !== null"""
    with contextlib.suppress(PlaywrightTimeout):  # the assertions below say what is missing
        await page.wait_for_function(settled, timeout=3_000, polling=20)
    runs = await stats(page)
    paused = await page.evaluate("() => ['sse', 'ws'].map((n) => window.demo.runs[n].player.audio.paused)")
    assert paused == [True, True]
    for name, st in runs.items():
        assert st["state"] == "stopped" and st["done"] is None, name
        assert st["cancel"]["silentMs"] is not None and st["cancel"]["silentMs"] <= 200, (name, st["cancel"])
    # the server answered the barge-in
    assert runs["ws"]["cancelSent"] is True and runs["ws"]["cancel"]["cancelledMs"] is not None
    # barge-in leaves the WebSocket open: the next reply goes on the same socket
    again = (await play(page, "ws", text="And now a new reply.", fmt="mp3", timeout_s=20))["ws"]
    assert again["reused"] and again["ended"] and again["error"] is None
    assert again["wholePayloads"] == again["audioMessages"] > 0
    assert again["audioBytes"] == again["done"]["audio_bytes"]


async def test_pcm_plays_over_webaudio(page: Any) -> None:
    runs = await play(page, "both", text=TEXT, fmt="pcm", timeout_s=30)
    for name, st in runs.items():
        assert st["errors"] == [] and st["error"] is None, name
        assert st["format"] == "pcm" and all(p["bytes"] % 2 == 0 for p in st["payloads"])
        assert st["samples"] * 2 == st["audioBytes"]
        assert st["done"]["audio_ms"] == pytest.approx(st["samples"] / 24, abs=1)
        assert st["ended"] and st["firstSoundMs"] is not None and st["peakRms"] > 0.05
        assert st["gaps"] == []
        assert_bytes_match_server(st)
    assert runs["sse"]["overheadPct"] > 30 > 5 > runs["ws"]["overheadPct"]


async def test_agent_reply_streams_captions(page: Any) -> None:
    await play(page, "ws", wait=False, prompt="Where is my order?", fmt="mp3")
    await page.wait_for_selector("#panel-ws .captions .now", timeout=15_000)
    highlighted = await page.inner_text("#panel-ws .captions .now")
    shown_agent_text = await page.inner_text("#panel-ws .agent")
    st = await stats(page, "ws")
    await page.click("#stop")
    # the agent's text streamed in, and what is spoken is cut from it
    assert st["agentText"].strip() and shown_agent_text.strip()
    assert st["firstSoundMs"] is not None and st["sentences"]
    assert all(s["text"] in st["agentText"] for s in st["sentences"])
    # the highlighted caption is a sentence that has started playing
    assert highlighted.strip() in [s["text"] for s in st["sentences"] if s["playMs"] is not None]



# what a browser without MediaSource audio/mpeg (Firefox) reports, emulated in Chromium
NO_MSE_MP3 = """
  const supported = MediaSource.isTypeSupported.bind(MediaSource);
  MediaSource.isTypeSupported = (type) => !type.includes('mpeg') && supported(type);
"""


async def test_without_mse_mp3_the_page_falls_back_to_pcm(browser: Any, gateway_url: str) -> None:
    page = await open_demo(browser, gateway_url, init_script=NO_MSE_MP3)
    try:
        assert await page.evaluate("() => window.demo.supported.mseMp3") is False
        st = (await play(page, "ws", text="Four words of speech.", fmt="mp3", timeout_s=20))["ws"]
        assert st["format"] == "pcm" and st["error"] is None
        assert st["ended"] and st["firstSoundMs"] is not None and st["peakRms"] > 0.05
        assert st["samples"] * 2 == st["audioBytes"] == st["done"]["audio_bytes"]
        assert "PCM" in await page.inner_text("#notice")
        assert page.page_errors == []
    finally:
        await page.close()


async def test_overhead_after_barge_in_is_per_reply(page: Any) -> None:
    await play(page, "ws", wait=False, text=LONG, fmt="mp3")
    await page.wait_for_function("() => window.demo.channels.ws.payloads.length >= 5", polling=20)
    await page.click("#stop")
    await page.wait_for_function("() => window.demo.channels.ws.cancel.cancelledMs !== null", polling=20)
    again = (await play(page, "ws", text="And now a new reply.", fmt="mp3", timeout_s=20))["ws"]
    assert again["reused"]
    assert again["wireBytes"] == again["done"]["wire_bytes"]
