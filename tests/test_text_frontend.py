"""The text front-end in a token stream and on the wire: chunking, segments, word times mapped
to the client's words, pauses as exact silence, switches, control markup errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.client import sse_stream, ws_stream
from gateway.core.heard import Transcript
from gateway.errors import BadRequest
from gateway.text.align import display_words
from gateway.text.frontend import TextFrontEnd, TextOptions
from gateway.text.lexicon import Lexicon, load_lexicon

from .conftest import Server

FRAGMENTS = [
    "**Sure!** ", "Here is *what* I found:\n", "\n1. Pasta with garlic — $12.50\n", "2. Tacos (spicy) 🌮\n",
    "### Summary\n", "- [x] done\n", "Call (555) 123-4567 or ", "see [the docs](https://example.com/docs). ",
    "It takes 5-10 minutes at 3:30 PM. ", "Great job! 🎉 ", "Dr. Smith on Main St. said approx. 5 km. ",
    "`code` and ``more`` ", "```\nprint(1)\n```\n", "| a | b |\n|---|---|\n| 1 | 2 |\n", "> quoted\n",
    "Say [Kokoro](/kˈOkəɹO/) [pause:0.3s] now. ", "<break time=\"200ms\"/>", "A <sub alias=\"W W W\">WWW</sub>. ",
    "3 * 4 & 1/3 of 24/7. ", "Email support@example.com! ", "snake_case_x ", "~~old~~ ", "Tom &amp; Jerry. ",
    "v2.1.3 in 2027, the 1990s; ", "![alt text](a.png) ", "<b>bold</b><br>", "\\*not\\* ", "Wait... ",
]  # fmt: skip


def segments(parts: list[str], **options: Any) -> list[tuple[str, str, float]]:
    fe = TextFrontEnd(TextOptions(**options), lang="a", first_clause_words=2)
    out = []
    for part in parts:
        out += fe.feed(part)
    out += fe.end()
    return [(s.display, s.spoken, s.pause_s) for s in out]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=8), st.data())
def test_any_cut_into_tokens_gives_the_same_segments_as_the_whole(fragments: list[str], data: Any) -> None:
    text = "".join(fragments)
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=40)))
    parts = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)]) if text[a:b]]
    assert segments(parts) == segments([text])


@given(st.text(alphabet=st.sampled_from(list("ab *_#-[]()<>/!`|~&;:.1\n 🎉")), max_size=60), st.data())
@settings(max_examples=200, deadline=None)
def test_any_text_in_any_cut_reads_alike_or_fails_alike(text: str, data: Any) -> None:
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=20)))
    parts = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)]) if text[a:b]]

    def outcome(p: list[str]) -> object:
        try:
            return segments(p)
        except BadRequest as exc:
            return exc.code

    assert outcome(parts) == outcome([text])


def test_each_list_item_and_heading_is_its_own_segment_with_a_full_stop() -> None:
    text = "## Your order\n- Pasta with garlic\n- Tacos\n1. First step\n2. Second step!\nThanks."
    assert [(d, s) for d, s, _ in segments([text])] == [
        ("Your order", "Your order."),
        ("Pasta with garlic", "Pasta with garlic."),
        ("Tacos", "Tacos."),
        ("First step", "First step."),
        ("Second step!", "Second step!"),
        ("Thanks.", "Thanks."),
    ]


def test_prosody_sets_the_rate_of_the_segments_it_covers_and_their_words_stay_words() -> None:
    fe = TextFrontEnd(TextOptions(), lang="a")
    segs = fe.feed('<prosody rate="slow">Hi there. And you?</prosody> Next one.') + fe.end()
    assert [(s.display, s.rate) for s in segs] == [("Hi there.", 0.8), ("And you?", 0.8), ("Next one.", 1.0)]
    assert [segs[0].display[a:b] for a, b, _, _ in segs[0].spans] == ["Hi", "there"]


def test_switched_off_the_text_is_spoken_as_written() -> None:
    text = "**Sure!** It takes 5-10 minutes 🎉."
    assert segments([text], enabled=False) == [
        ("**Sure!**", "**Sure!**", 0.0),
        ("It takes 5-10 minutes 🎉.",) * 2 + (0.0,),
    ]


def test_each_switch_turns_its_own_part_off() -> None:
    text = "**Call** 555-1234 🎉"
    assert segments([text], markdown=False)[0][0] == "**Call** 555-1234 🎉"  # the display keeps it
    assert segments([text], normalize=False)[0][1] == "Call 555-1234"
    assert segments([text], emoji="name")[0][1] == "Call five five five, one two three four party popper"
    assert segments(["[pause:1s] Hi."], markup=False)[0][1] == "[pause:1s] Hi."
    assert segments(["Hi.\n```\nx = 1\n```"], code="read")[-1][1] == "x equals one"
    assert segments(["Hi.\n```\nx = 1\n```"], code="skip") == [("Hi.", "Hi.", 0.0)]


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("Wait [pause:abc] now.", 5),
        ("Wait [pause:30s] now.", 5),
        ('A <break time="soon"/> b.', 2),
        ('A <say-as interpret-as="nonsense">x</say-as>.', 2),
        ("A </sub> b.", 2),
        ("A <sub>WWW</sub>.", 2),
        ('A <phoneme ph="">x</phoneme>.', 2),
        ('A <prosody rate="warp">x</prosody>.', 2),
        ('Start <prosody rate="slow">never closed.', 6),
    ],
)
def test_bad_markup_is_invalid_markup_with_its_position(text: str, where: int) -> None:
    with pytest.raises(BadRequest) as caught:
        segments([text])
    assert caught.value.code == "invalid_markup"
    assert f"at character {where})" in caught.value.message


def test_the_lexicon_matches_case_as_documented_and_phonemes_go_to_misaki(tmp_path: Path) -> None:
    path = tmp_path / "lexicon.toml"
    path.write_text('kokoro = "/kˈOkəɹO/"\nUS = "United States"\nnginx = "engine x"\n', encoding="utf-8")
    entries = load_lexicon(str(path))
    said = [s for _, s, _ in segments(["Kokoro and KOKORO run nginx in the US with us."], pronunciations=entries)]
    assert said == ["[Kokoro](/kˈOkəɹO/) and [KOKORO](/kˈOkəɹO/) run engine x in the United States with us."]
    assert [(m.start, m.end) for m in Lexicon({"new york": "/x/", "new": "/y/"}).find("New York is new")] == [
        (0, 8),
        (12, 15),
    ]


def test_caption_words_and_heard_text_are_the_clients_words() -> None:
    fe = TextFrontEnd(TextOptions(), lang="a")
    (seg,) = fe.feed("Call **(555) 123-4567** in 5-10 minutes 🎉") + fe.end()
    spoken = seg.spoken.replace(",", "").split()
    timed = [{"word": w, "start_ms": 100 * k, "end_ms": 100 * k + 80} for k, w in enumerate(spoken)]
    words = display_words(timed, seg)
    assert [w["word"] for w in words] == ["Call", "(555) 123-4567", "in", "5-10", "minutes"]
    assert (words[1]["start_ms"], words[1]["end_ms"]) == (100, 1080)  # its ten digits, first to last
    transcript = Transcript()
    transcript.segment(0, seg.display)
    transcript.started(0, 0.0)
    transcript.words(0, words)
    transcript.sent(10_000)
    assert transcript.heard(1150) == "Call (555) 123-4567 in"
    assert transcript.heard(1250) == "Call (555) 123-4567 in 5-10"


# -- on the wire (fake engine: each word 180 ms of tone, 60 ms after it) -------------------
async def test_words_on_the_wire_name_the_clients_words(fake_server: Server, http: aiohttp.ClientSession) -> None:
    r = await ws_stream(http, fake_server.ws_url, text="It takes **5-10** minutes 🎉", options={"format": "pcm"})
    assert r.done is not None, r.events
    (sentence,) = r.of("sentence")
    assert (sentence["text"], sentence["spoken"]) == ("It takes 5-10 minutes 🎉", "It takes five to ten minutes")
    words = [(w["word"], w["start_ms"], w["end_ms"]) for e in r.of("words") for w in e["words"]]
    assert words == [("It", 0, 180), ("takes", 240, 420), ("5-10", 480, 1140), ("minutes", 1200, 1380)]


async def test_a_pause_is_exact_silence_and_moves_the_words_after_it(
    fake_server: Server, http: aiohttp.ClientSession
) -> None:
    r = await ws_stream(http, fake_server.ws_url, text="One. [pause:0.5s] Two.", options={"format": "pcm"})
    assert r.done is not None, r.events
    assert [(s["text"], s.get("pause_ms")) for s in r.of("sentence")] == [("One.", None), ("Two.", 500)]
    words = [(w["word"], w["start_ms"]) for e in r.of("words") for w in e["words"]]
    assert words == [("One", 0), ("Two", 240 + 500)]
    pcm = np.frombuffer(r.audio, dtype="<i2")
    rate = 24
    assert np.any(pcm[: 180 * rate]) and np.any(pcm[740 * rate : 920 * rate])
    assert not np.any(pcm[240 * rate : 740 * rate])  # the pause: exact zeros


async def test_bad_markup_on_the_websocket_is_a_final_error(fake_server: Server, http: aiohttp.ClientSession) -> None:
    async with http.ws_connect(fake_server.ws_url) as ws:
        await ws.send_json({"type": "start", "format": "pcm"})
        await ws.send_json({"type": "text", "text": "Hello [pause:forever] there."})
        events = []
        async for msg in ws:
            if msg.type == aiohttp.WSMsgType.TEXT:
                events.append(json.loads(msg.data))
        assert events[-1]["type"] == "error" and events[-1]["code"] == "invalid_markup"
        assert ws.close_code == 1008


async def test_bad_markup_on_sse_is_a_400_before_any_audio(fake_server: Server, http: aiohttp.ClientSession) -> None:
    r = await sse_stream(http, fake_server.url + "/v1/stream/sse", text='Hi <say-as interpret-as="x">1</say-as>')
    assert r.error is not None and r.error["code"] == "invalid_markup" and r.error["status"] == 400


async def test_request_pronunciations_and_switches_reach_the_engine(
    fake_server: Server, http: aiohttp.ClientSession
) -> None:
    options = {"format": "pcm", "pronunciations": {"nginx": "engine x"}, "emoji": "name"}
    r = await ws_stream(http, fake_server.ws_url, text="Run nginx 🎉", options=options)
    assert [s["spoken"] for s in r.of("sentence")] == ["Run engine x party popper"]
    r = await sse_stream(http, fake_server.url + "/v1/stream/sse", text="**Bold** 5 km", text_frontend="false")
    assert [s["spoken"] for s in r.of("sentence")] == ["**Bold** 5 km"]


async def test_heard_text_at_barge_in_is_the_clients_text(fake_server: Server, http: aiohttp.ClientSession) -> None:
    """Cancel at 1,000 ms, once the client holds 1,400 ms of audio: "five to ten" began at 480 ms,
    "minutes" begins at 1,200, so the listener heard "It takes 5-10" of the client's text."""
    text = "It takes **5-10** minutes to cook. Then we eat the pasta together. After that we rest."
    async with http.ws_connect(fake_server.ws_url) as ws:
        await ws.send_json({"type": "start", "format": "pcm"})
        await ws.send_json({"type": "text", "text": text})
        await ws.send_json({"type": "flush"})  # not `end`: the reply stays open, no `done` can overtake the cancel
        held, cancelled = 0, None
        async for msg in ws:
            if msg.type == aiohttp.WSMsgType.BINARY:
                held += len(msg.data)
                if held >= 2 * 24 * 1400 and cancelled is None:
                    cancelled = False
                    await ws.send_json({"type": "cancel", "played_ms": 1000})
            elif msg.type == aiohttp.WSMsgType.TEXT and (event := json.loads(msg.data))["type"] == "cancelled":
                cancelled = event
                break
        assert cancelled, "no cancelled event"
        assert cancelled["heard_text"] == "It takes 5-10"
