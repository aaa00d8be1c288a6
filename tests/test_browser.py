"""A/B tests of the two channels in a real browser: Debian's Chromium, driven by Playwright.

One real gateway (fake engine: tones, streamed at 0.3x real time) and one browser serve the
module. Every test plays through the demo page as a user would and reads what the page measured
from ``window.demo``; the payload bytes the page received are checked again here in Python.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from playwright.async_api import TimeoutError as PlaywrightTimeout

from bench.transports import (
    CHROMIUM,
    FINISHED_JS,
    launch_chromium,
    open_demo,
    payloads,
    play,
    serve,
    stats,
)
from gateway.audio.mp3 import count_frames, is_whole_frames
from gateway.config import load_settings
from gateway.kokoro.timestamps import words_of
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
    # no cache of finished replies: tests replay the same texts and expect them synthesized (Stop
    # must find the reply still streaming)
    async with serve(fake_settings(fake_rtf=0.3, cache_mb=0)) as url:
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
        arg=names,
        timeout=20_000,
        polling=50,
    )
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
        # from the counts, not the page's ``lostSamples``: that is refreshed on the page's next
        # monitor tick, which the wait above can beat (it read 0 once with 13,248 samples lost)
        lost = st["samples"] - dec["decodedSamples"]
        assert dec["failures"] > 0 or lost > 0.05 * st["samples"], (lost, dec)
        assert_bytes_match_server(st)


async def test_stop_silences_both_channels_within_200ms_and_keeps_the_socket(page: Any) -> None:
    await play(page, "both", wait=False, text=LONG, fmt="mp3")
    await page.wait_for_function(
        "() => ['sse', 'ws'].every((n) => window.demo.channels[n].soundMs >= 300)", timeout=20_000, polling=20
    )
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


async def test_the_conversation_names_the_agent_and_goes_on_one_socket(page: Any) -> None:
    assert "simulated" in await page.inner_text("#agent-name")
    await play(page, "ws", wait=False, prompt="Where is my order?", fmt="mp3")
    await page.wait_for_function("() => window.demo.channels.ws && window.demo.channels.ws.done", timeout=15_000)
    # the turn is over and the socket stays open for the next one
    assert await page.evaluate(
        "() => window.demo.transports.ws.turnOver && window.demo.transports.ws.ws.readyState === 1"
    )
    await play(page, "ws", wait=False, prompt="And my refund?", fmt="mp3")
    await page.wait_for_function("() => window.demo.channels.ws.done", timeout=15_000)
    st = await stats(page, "ws")
    await page.click("#stop")
    assert st["reused"]  # the same socket, so the server sent the first turn with the second
    turns = await page.locator("#turns li").all_inner_texts()
    assert len(turns) == 2 and "Where is my order?" in turns[0] and "And my refund?" in turns[1]
    assert all("simulated:" in t for t in turns) and st["agentText"].strip() in turns[1]
    await page.click("#new-conversation")
    # the list is redrawn on the next animation frame, not within the click
    await page.wait_for_function("() => document.querySelectorAll('#turns li').length === 0", timeout=2_000)


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


# -- holding back playback: the server's `preroll_ms` ------------------------------------------
SLOW_TEXT = "Hello there. This engine is slower than real time. The page holds audio before it plays."
MAX_GAP_MS = 100
GAPLESS_TRIES = 3  # replies the real engine's Play both may take to play one through gapless
HELD_SLACK_MS = 400  # held audio passes the preroll by at most about a payload


async def test_karaoke_follows_the_words_and_stop_says_what_was_heard(page: Any) -> None:
    await play(page, "both", wait=False, text=LONG, fmt="mp3")
    # the highlighted word moves on with playback, on both channels
    await page.wait_for_function(
        "() => ['sse', 'ws'].every((n) => window.demo.channels[n].wordLog.length >= 4)", timeout=20_000, polling=20
    )
    shown = await page.inner_text("#panel-ws .captions .w.now")
    await page.click("#stop")
    await page.wait_for_function("() => window.demo.channels.ws.cancel.server !== null", timeout=5_000, polling=20)
    runs = await stats(page)
    for name, st in runs.items():
        words = st["words"]
        assert words and st["audioBeforeWords"] == 0, name  # each segment's words before its audio
        for sentence in st["sentences"]:  # the segment's words as written, in order
            got = [w["word"] for w in words if w["sentence"] == sentence["index"]]
            assert got in ([], words_of(sentence["text"])), (name, sentence, got)
        log = st["wordLog"]
        assert [e["index"] for e in log] == sorted({e["index"] for e in log}), (name, log)
        for e in log:  # highlighted once it had started, and not after the next one started
            assert words[e["index"]]["start_ms"] <= e["playedMs"], (name, e)
            after = words[e["index"] + 1 :]
            assert not after or e["playedMs"] < after[0]["start_ms"] + 100, (name, e)
        played = st["cancel"]["playedMs"]
        assert played >= log[-1]["playedMs"] > 0, name
    assert shown in [w["word"] for w in runs["ws"]["words"]]
    # the WebSocket's `cancel` carried the position; `cancelled` says what was heard up to it
    ws = runs["ws"]
    played = ws["cancel"]["playedMs"]
    assert ws["cancel"]["server"]["played_ms"] == played
    heard = ws["cancel"]["server"]["heard_text"]
    assert words_of(heard) == [w["word"] for w in ws["words"] if w["start_ms"] < played]
    assert ws["heardText"] == heard
    # and the panel shows it (the page renders at most every 100 ms: wait for it, not a frame)
    await page.wait_for_function(
        "(t) => document.querySelector('#panel-ws .heard').textContent.includes(t)", arg=heard, timeout=2_000
    )
    # SSE has no cancel message: the page works out the same from the words it was sent
    sse = runs["sse"]
    assert sse["heardText"].split() == [w["word"] for w in sse["words"] if w["start_ms"] < sse["cancel"]["playedMs"]]


def gaps_over(st: dict[str, Any], ms: float) -> list[dict[str, Any]]:
    return [g for g in st["gaps"] if g["ms"] > ms]


@pytest_asyncio.fixture(loop_scope="module")
async def slow_url() -> AsyncIterator[str]:
    """The fake engine at 1.3 s of compute per second of audio: it falls behind playback.

    One per test: a gateway that has synthesized the text once would serve it again at once.
    """
    async with serve(fake_settings(fake_rtf=1.3)) as url:
        yield url


@pytest.mark.parametrize("fmt", ["mp3", "pcm"])  # MediaSource, WebAudio
async def test_players_hold_the_servers_preroll_then_play_without_gaps(browser: Any, slow_url: str, fmt: str) -> None:
    page = await open_demo(browser, slow_url)
    try:
        runs = await play(page, "both", text=SLOW_TEXT, fmt=fmt, timeout_s=60)
        assert page.page_errors == []
    finally:
        await page.close()
    for name, st in runs.items():
        assert st["error"] is None and st["errors"] == [], (name, st["error"], st["errors"])
        assert st["format"] == fmt and st["ended"] and st["peakRms"] > 0.05
        # the server asked for a preroll, and playback began only once about that much was held
        assert st["prerollMaxMs"] > 0, "the server sent no preroll_ms > 0"
        asked, held = st["startPrerollMs"], st["startHeldMs"]
        # the preroll can fall while the player holds (the first is forecast with a prior
        # margin, later ones on measured calls): what it held is bounded by the most asked
        assert 0 < asked <= held <= st["prerollMaxMs"] + HELD_SLACK_MS, (name, asked, held, st["prerollMaxMs"])
        assert st["firstPlayMs"] > st["ttfbMs"]
        assert gaps_over(st, MAX_GAP_MS) == [], (name, st["gaps"], st["prerollMs"])


# -- Play both on the real engine -------------------------------------------------------------
async def engine_settled(url: str, timeout_s: float = 180.0) -> None:
    """Until streaming inside a segment is built and the speed warm-up has measured its mode.

    Both run after readiness; a request that came before would share the engine with them.
    """
    deadline = time.monotonic() + timeout_s
    body: dict[str, Any] = {}
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            async with http.get(url + "/readyz") as r:
                body = await r.json()
            vocoder = body.get("vocoder") or {}
            if vocoder.get("state") == "ready" and (body.get("speed") or {}).get(vocoder["mode"]):
                return
            await asyncio.sleep(0.5)
    raise TimeoutError(f"the engine did not settle in {timeout_s} s: {body}")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def embedded_url() -> AsyncIterator[str]:
    # no cache of finished segments: the two channels share a live synthesis, not a replay
    async with serve(load_settings(env={}, overrides={"engine": "embedded", "cache_mb": 0})) as url:
        await engine_settled(url)
        yield url


@pytest.mark.shared_synthesis
async def test_play_both_on_the_real_embedded_engine(browser: Any, embedded_url: str) -> None:
    """Play both, the page's default text, real speech: both channels play through, no gaps.

    Depends on the server's shared synthesis: both channels ask for the same segments, and the
    server synthesizes each once for both. Two syntheses would share the engine's one inference
    slot on 2 cores, fall behind playback and start apart.
    """
    page = await open_demo(browser, embedded_url)
    replies: list[dict[str, Any]] = []
    try:
        # One reply first, not asserted: the engine rate was measured before Chromium decoded
        # two streams on the same 2 cores, and the first reply after such a change of load is
        # the one it learns from (a full-suite run once stalled 2.6 s there; README, Gapless
        # playback). The asserted replies are the next ones, as a user's next clicks.
        for attempt in range(1 + GAPLESS_TRIES):
            await page.click("#play-both")
            await page.wait_for_function(FINISHED_JS, arg=["sse", "ws"], timeout=120_000, polling=50)
            runs = await stats(page)
            if attempt == 0:
                continue
            replies.append(runs)
            for name, st in runs.items():  # every reply: no error, played through, real speech
                assert st["error"] is None and st["errors"] == [], (name, st["error"], st["errors"])
                assert st["ended"] and st["state"] == "ended" and st["peakRms"] > 0.05, name
                assert st["sentences"], name
            if not any(gaps_over(st, MAX_GAP_MS) for st in runs.values()):
                break
        ARTIFACTS.mkdir(exist_ok=True)
        await page.screenshot(path=str(ARTIFACTS / "demo-embedded.png"), full_page=True)
        assert page.page_errors == []
    finally:
        await page.close()
    # gapless on both channels in one of GAPLESS_TRIES replies: a schedule that leaves the player
    # short fails every time; a machine shared with the rest of a full suite can stall one reply
    # (1 of 3 full runs on 4 December, gaps of 48-232 ms, none in 8 runs alone)
    gapless = [r for r in replies if not any(gaps_over(st, MAX_GAP_MS) for st in r.values())]
    assert gapless, [(name, st["gaps"], st["prerollMs"], st["startHeldMs"]) for r in replies for name, st in r.items()]
    first = [gapless[0][name]["ttfbMs"] for name in ("sse", "ws")]
    assert abs(first[0] - first[1]) <= 150, first  # one synthesis for both channels
