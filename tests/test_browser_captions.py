"""The demo page's agent-style sample in Chromium: captions without markup, what was spoken under them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio

from bench.servers import serve_gateway
from tests.conftest import fake_settings
from tests.support.engines import EnglishFake

from .test_browser import ARTIFACTS, FINISHED_JS, browser, open_demo, pytestmark, stats

__all__ = ["browser", "pytestmark"]  # the module's browser fixture and marks, shared


@pytest_asyncio.fixture(loop_scope="module")
async def english_url() -> AsyncIterator[str]:
    """The fake engine with an English voice id: the text front-end reads numbers as said."""
    settings = fake_settings(fake_rtf=0.3, cache_mb=0)
    async with serve_gateway(settings, EnglishFake(settings)) as (url, _):
        yield url


async def test_the_agent_style_sample_shows_clean_captions_and_what_was_spoken(browser: Any, english_url: str) -> None:
    """The "Sample" menu's agent-style reply (markdown, emoji, a link, a phone number): the
    captions show the text without its markup, and a line under a sentence says what the engine
    was given where that differs (the phone number as said)."""
    page = await open_demo(browser, english_url)
    try:
        page.set_default_timeout(10_000)
        await page.check("input[name=input][value=prompt]")  # picking a sample goes back to the text box
        await page.select_option("#sample", "agent")
        assert await page.is_checked("input[name=input][value=text]")
        assert "**Sure!**" in await page.input_value("#text")
        await page.select_option("#format", "mp3")
        await page.click("#play-both")
        await page.wait_for_function(FINISHED_JS, arg=["sse", "ws"], timeout=60_000, polling=50)
        runs = await stats(page)
        # the page draws on its next animation frame: wait for every sentence's caption
        await page.wait_for_function(
            """(ns) => ['sse', 'ws'].every((n) =>
                 document.querySelectorAll(`#panel-${n} .captions .s`).length === ns[n])""",
            arg={name: len(st["sentences"]) for name, st in runs.items()},
            timeout=5_000,
        )
        ARTIFACTS.mkdir(exist_ok=True)
        await page.screenshot(path=str(ARTIFACTS / "demo-spoken.png"), full_page=True)
        for name, st in runs.items():
            assert st["error"] is None and st["errors"] == [], (name, st["error"])
            panel = f"#panel-{name} .captions"
            captions = " ".join(await page.locator(f"{panel} .s").all_inner_texts())
            assert not any(mark in captions for mark in ("**", "###", "](")), (name, captions)
            assert "Sure!" in captions and "🎉" in captions, (name, captions)  # emoji kept on screen
            assert "(555) 123-4567" in captions, (name, captions)  # the caption as written
            phone = [s for s in st["sentences"] if "(555) 123-4567" in s["text"]]
            assert len(phone) == 1, (name, st["sentences"])
            line = page.locator(f'{panel} .spoken[data-sentence="{phone[0]["index"]}"]')
            assert "five five five" in await line.inner_text(), name  # and under it, as said
            # no line where the engine was given the words shown (a closing full stop aside)
            same = [s["index"] for s in st["sentences"] if s["text"].rstrip(".!?") == s["spoken"].rstrip(".!?")]
            assert same, (name, st["sentences"])
            for index in same:
                assert await page.locator(f'{panel} .spoken[data-sentence="{index}"]').count() == 0, (name, index)
        assert page.page_errors == []
        assert all(url.startswith((english_url + "/", "data:", "blob:")) for url in page.requested)
    finally:
        await page.close()
