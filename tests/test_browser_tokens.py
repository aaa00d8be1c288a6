"""The demo page on a gateway with ``auth_token`` set, in Debian's Chromium (issue 22): it plays
a reply with a browser token from its URL fragment, and the token never travels in a URL.
"""

from __future__ import annotations

import logging
from pathlib import Path

import aiohttp
import pytest
from playwright.async_api import async_playwright

from bench.transports import CHROMIUM, launch_chromium, open_demo, play
from tests.conftest import fake_settings

from .test_edges import access_lines, until_logged

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium"),
]

MASTER = "the-servers-own-key"


async def test_the_demo_page_plays_with_a_token_from_its_fragment(
    start_server, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="aiohttp.access")
    server = await start_server(fake_settings(auth_token=MASTER, fake_rtf=0.3, cache_mb=0))
    async with aiohttp.ClientSession() as http:  # the page's own server mints, with the master key
        async with http.post(
            server.url + "/v1/tokens",
            json={"ttl_s": 300, "scope": ["ws", "sse", "voices"]},
            headers={"Authorization": f"Bearer {MASTER}"},
        ) as r:
            token = (await r.json())["token"]
    async with async_playwright() as pw:
        browser = await launch_chromium(pw)
        try:
            # without a token the page says what it needs instead of failing silently
            bare = await open_demo(browser, server.url)
            assert not await bare.is_hidden("#token-label")
            assert "needs a token" in await bare.inner_text("#notice")
            await bare.close()

            page = await open_demo(browser, server.url, path=f"/#token={token}")
            page.set_default_timeout(10_000)
            assert await page.evaluate("() => sessionStorage.getItem('gatewayToken')") == token
            assert token not in await page.evaluate("() => location.href")  # dropped from the address bar
            assert await page.locator("#voice option").count() > 0  # /v1/voices answered the token
            runs = await play(page, "both", text="Hello there. This reply needs a token.", fmt="mp3", timeout_s=30)
            for name, st in runs.items():
                assert st["error"] is None and st["errors"] == [], (name, st["error"])
                assert st["done"] is not None and st["audioBytes"] == st["done"]["audio_bytes"] > 0, name
                assert st["ended"] and st["firstSoundMs"] is not None and st["peakRms"] > 0.05, name
            # a reload in the same tab keeps the token (sessionStorage), with no fragment
            await page.reload()
            await page.wait_for_function("() => window.demo && window.demo.ready")
            assert await page.locator("#voice option").count() > 0
            assert page.page_errors == []
            assert page.requested and not any(token in url for url in page.requested)
        finally:
            await browser.close()
    await until_logged(caplog, r'"GET /v1/stream/ws HTTP/1.1" 101 ')
    lines = access_lines(caplog)
    assert any('"GET /v1/stream/sse?' in line and '" 200 ' in line for line in lines), lines
    assert not any(token in line or MASTER in line for line in lines)
