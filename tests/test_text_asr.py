"""What a listener hears from an agent's reply: the real engine, token-streamed, through Whisper.

Agent-style replies (markdown, emoji, a link, an email, a phone number, numbers, units,
abbreviations) go token by token over the WebSocket to the embedded engine; Whisper tiny.en
transcribes the reply's audio. The transcript must hold no symbol or emoji names (what the
gateway said before its text front-end: "asterisk", "hash", "party popper", "smiling face") and
the words the text means ("doctor", "street", "kilometers", "third", "example dot com").
"""

from __future__ import annotations

import logging

import aiohttp
import numpy as np
import pytest

from bench import wer
from bench.client import ws_stream

from .conftest import embedded_gateway

REPLIES = (
    (
        "**Sure!** Here's your order 🎉\n\n1. *Pasta* with garlic\n2. Tacos\n\n### Summary\n"
        "Dr. Smith on Main St. said it's approx. 5 km away, about 1/3 of the way. 😊",
        ["sure", "pasta", "garlic", "tacos", "summary", "doctor", "smith", "street", "approximately", "five",
         "kilometers", "third"],
    ),
    (
        "Write to support@example.com or see [the docs](https://example.com/docs). "
        "It takes 5-10 minutes, and we're #1! 👍",
        ["write", "support", "example", "dot", "com", "docs", "takes", "five", "ten", "minutes", "number", "one"],
    ),
)  # fmt: skip
NEVER = ("asterisk", "hash", "hashtag", "party", "popper", "smiling", "emoji", "bracket", "parenthesis", "thumbs")


def tokens(text: str, size: int = 4) -> list[str]:
    return [text[k : k + size] for k in range(0, len(text), size)]


@pytest.mark.slow
async def test_agent_replies_are_heard_without_symbol_names_and_with_their_words(
    http: aiohttp.ClientSession,
) -> None:
    logging.getLogger("faster_whisper").setLevel(logging.WARNING)
    async with embedded_gateway() as (url, _app):
        ws_url = url.replace("http://", "ws://") + "/v1/stream/ws"
        for text, expected in REPLIES:
            r = await ws_stream(http, ws_url, tokens=tokens(text), options={"format": "pcm"}, timeout=300)
            assert r.done is not None, r.events
            pcm = np.frombuffer(r.audio, "<i2").astype(np.float32) / 32768.0
            heard = wer.normalize(wer.transcribe(pcm, 24000))
            assert not [w for w in heard if w in NEVER], heard
            missing = [w for w in expected if w not in heard]
            assert len(missing) <= 1, (missing, heard)  # one word of twelve may be misheard
            captions = " ".join(s["text"] for s in r.of("sentence"))
            assert "**" not in captions and "###" not in captions and "](" not in captions, captions
