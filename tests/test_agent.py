"""The agent behind ``prompt`` against a real OpenAI-compatible server on loopback
(``tests/support/openai_stub.py``: real HTTP, real SSE chunks, a required bearer key), with the
fake engine: streaming into speech, multi-turn history, barge-in, failures, secrecy."""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from bench.client import sse_stream
from bench.servers import serve_app
from gateway.agent import create_agent
from tests.conftest import Server, fake_settings, free_port
from tests.support.agent_client import Talk, fails_then_recovers, heard, texts
from tests.support.openai_stub import ChatStub, Reply

KEY = "sk-test-" + secrets.token_hex(20)
SYSTEM = "You are a test. Be brief."
REPLY = ["Your", " order", " shipped", " today.", " It", " arrives", " on", " Friday.", " Anything", " else?"]
HELD = 5  # tokens sent before the stand-in holds its stream: one whole sentence and the next word


@pytest.fixture
async def chat() -> AsyncIterator[tuple[ChatStub, str]]:
    stub = ChatStub(KEY)
    async with serve_app(stub.app()) as url:
        yield stub, url + "/v1"
        stub.stopping.set()


@pytest.fixture
def agent_server(
    start_server: Callable[..., Awaitable[Server]], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Awaitable[Server]]:
    monkeypatch.setenv("TEST_AGENT_KEY", KEY)

    async def start(url: str, **overrides: Any) -> Server:
        return await start_server(
            fake_settings(
                agent_backend="openai",
                agent_url=url,
                agent_model="test-model",
                agent_api_key_env="TEST_AGENT_KEY",
                agent_system_prompt=SYSTEM,
                **overrides,
            )
        )

    return start


async def metric(http: aiohttp.ClientSession, server: Server, line: str) -> float:
    async with http.get(server.url + "/metrics") as r:
        for row in (await r.text()).splitlines():
            if row.startswith(line + " "):
                return float(row.split()[-1])
    return 0.0


async def test_deltas_are_the_models_stream_and_audio_starts_before_it_ends(chat, agent_server, http) -> None:
    stub, url = chat
    server = await agent_server(url)
    reply = Reply(REPLY, hold_after=HELD)
    stub.replies.append(reply)
    async with http.ws_connect(server.ws_url) as ws:
        talk = Talk(ws)
        events = await talk.turn("Where is my order?", on_audio=reply.release.set)
        # the stand-in sent the rest of its stream only once this client had audio
        first_audio = next(i for i, (kind, _) in enumerate(events) if kind == "audio")
        assert len(texts(events[:first_audio])) == HELD
        assert texts(events) == REPLY  # one text event per model delta, in order
        assert events[-1][0] == "done" and events[-1][1]["sentences"] == 3
        spoken = [body["text"] for kind, body in events if kind == "sentence"]
        assert " ".join(spoken) == "".join(REPLY)
        # the socket stays open: the next prompt is the next turn
        again = await talk.turn("Thanks.")
        assert texts(again) == stub.default.tokens and again[-1][0] == "done"
        await ws.send_json({"type": "end"})
        assert (await ws.receive(timeout=10)).type == aiohttp.WSMsgType.CLOSE and ws.close_code == 1000
    sse = await sse_stream(http, server.url + "/v1/stream/sse", prompt="Where is my order?")
    assert [t["delta"] for t in sse.of("text")] == stub.default.tokens and sse.done
    assert sse.of("ready")[0]["agent"] == "test-model"


async def test_each_turn_sends_the_system_prompt_and_earlier_turns(chat, agent_server, http) -> None:
    stub, url = chat
    server = await agent_server(url, agent_max_tokens=123)
    stub.replies.extend([Reply(REPLY), Reply(["Sure."])])
    async with http.ws_connect(server.ws_url) as ws:
        talk = Talk(ws)
        await talk.turn("Where is my order?")
        await talk.turn("And my refund?")
    first, second = stub.requests
    assert first["stream"] is True and first["model"] == "test-model" and first["max_tokens"] == 123
    assert first["messages"] == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Where is my order?"},
    ]
    assert second["messages"] == first["messages"] + [
        {"role": "assistant", "content": "".join(REPLY)},
        {"role": "user", "content": "And my refund?"},
    ]
    assert await metric(http, server, 'tts_agent_turns_total{backend="openai",outcome="done"}') == 2


async def test_history_is_capped_at_agent_history_turns(chat, agent_server, http) -> None:
    stub, url = chat
    server = await agent_server(url, agent_history_turns=1)
    async with http.ws_connect(server.ws_url) as ws:
        talk = Talk(ws)
        for n in range(3):
            await talk.turn(f"Question {n}?")
    users = [m["content"] for m in stub.requests[-1]["messages"] if m["role"] == "user"]
    assert users == ["Question 1?", "Question 2?"]


async def test_a_cancelled_turn_keeps_only_what_was_heard(chat, agent_server, http) -> None:
    stub, url = chat
    server = await agent_server(url)
    held = Reply(REPLY, hold_after=HELD)  # never released: the model is still talking at barge-in
    stub.replies.extend([held, Reply(["Okay."])])
    async with http.ws_connect(server.ws_url) as ws:
        talk = Talk(ws)
        first = await talk.turn("Where is my order?", cancel_on_audio=True)
        assert first[-1][0] == "cancelled"
        said = first[-1][1]["heard_text"]  # word by word: the words whose audio was sent
        assert said and said != "".join(REPLY) and "".join(REPLY).startswith(said)
        assert heard(first).startswith(said)  # within the sentences whose audio arrived
        second = await talk.turn("Sorry, go on.")
        assert second[-1][0] == "done"
    assert stub.requests[1]["messages"][2] == {"role": "assistant", "content": said}
    assert await metric(http, server, 'tts_agent_turns_total{backend="openai",outcome="cancelled"}') == 1


async def test_a_turn_cancelled_before_any_audio_leaves_no_trace(chat, agent_server, http) -> None:
    stub, url = chat
    server = await agent_server(url)
    stub.replies.extend([Reply(REPLY, hang=True), Reply(["Okay."])])
    async with http.ws_connect(server.ws_url) as ws:
        await ws.send_json({"type": "prompt", "prompt": "Hello?"})
        assert (await ws.receive_json(timeout=10))["type"] == "ready"
        await asyncio.wait_for(stub.arrived.wait(), 10)  # the model is working on it
        await ws.send_json({"type": "cancel"})
        assert (await ws.receive_json(timeout=10))["type"] == "cancelled"
        await Talk(ws).turn("Are you there?")
    # no user message without its answer: the history still alternates
    assert [m["role"] for m in stub.requests[1]["messages"]] == ["system", "user"]


@pytest.mark.parametrize(
    "failure,code",
    [
        ({"status": 500}, "agent_error"),
        ({"status": 404}, "agent_error"),
        ({"hang": True}, "agent_timeout"),
        ({"cut_after": HELD}, "agent_error"),
    ],
)
async def test_failures_answer_an_error_and_the_next_turn_works(chat, agent_server, http, failure, code) -> None:
    stub, url = chat
    server = await agent_server(url, agent_timeout_s=0.5)
    error = await fails_then_recovers(http, server.ws_url, stub.replies, Reply(REPLY, **failure), code)
    assert set(error) == {"code", "message"}
    assert await metric(http, server, f'tts_agent_turns_total{{backend="openai",outcome="{code}"}}') == 1
    assert await metric(http, server, f'tts_errors_total{{channel="ws",code="{code}"}}') == 1


async def test_an_unreachable_server_is_agent_unavailable_until_it_is_up(agent_server, http) -> None:
    port = free_port()
    server = await agent_server(f"http://127.0.0.1:{port}/v1")
    async with http.ws_connect(server.ws_url) as ws:
        talk = Talk(ws)
        assert (await talk.turn("Hello?"))[-1][1]["code"] == "agent_unavailable"
        async with serve_app(ChatStub(KEY).app(), port):
            assert (await talk.turn("Hello?"))[-1][0] == "done"
    sse = await sse_stream(http, server.url + "/v1/stream/sse", prompt="Hi")
    assert sse.error and sse.error["code"] == "agent_unavailable"


async def test_the_key_never_appears_in_events_or_logs(chat, agent_server, http, caplog, monkeypatch) -> None:
    stub, url = chat
    caplog.set_level(logging.DEBUG)
    server = await agent_server(url, agent_timeout_s=0.5)
    stub.replies.extend([Reply(REPLY), Reply(REPLY, status=500), Reply(REPLY, cut_after=2)])
    async with http.ws_connect(server.ws_url) as ws:
        talk = Talk(ws)
        for prompt in ("One?", "Two?", "Three?"):
            await talk.turn(prompt)
        stub.key = "sk-another-key"  # now the server refuses ours, and echoes it back as OpenAI does
        refused = await talk.turn("Four?")
    assert refused[-1][1]["code"] == "agent_error" and "401" in refused[-1][1]["message"]
    assert [kind for kind, _ in talk.seen].count("done") == 1
    assert KEY not in json.dumps(talk.seen)
    assert KEY not in caplog.text and KEY[-8:] not in caplog.text
    assert KEY not in repr(create_agent(server.settings))
    async with http.get(server.url + "/metrics") as r:
        assert KEY not in await r.text()


async def test_settings_name_the_backend(agent_server, http) -> None:
    with pytest.raises(ValueError, match="agent_url"):
        create_agent(fake_settings(agent_backend="openai", agent_model="m"))
    with pytest.raises(ValueError, match="unknown agent_backend"):
        create_agent(fake_settings(agent_backend="llama"))
    assert create_agent(fake_settings()).label == "simulated"


async def test_an_agent_reply_with_markdown_is_spoken_clean_and_bad_markup_ends_it_with_an_error(
    chat, agent_server, http
) -> None:
    """The agent's text goes through the text front-end like a client's: markdown is not spoken,
    and control markup the model got wrong ends the turn with a final `invalid_markup`."""
    stub, url = chat
    server = await agent_server(url)
    stub.replies.append(Reply(["**Sure", "!** Call", " 555-1234", " 🎉", "."]))
    stub.replies.append(Reply(["Hold", " on.", " [pause:", "forever]", " Done."]))
    async with http.ws_connect(server.ws_url) as ws:
        events = await Talk(ws).turn("Call me?")
        sentences = [body for kind, body in events if kind == "sentence"]
        assert [(s["text"], s["spoken"]) for s in sentences] == [
            ("Sure!", "Sure!"),
            ("Call 555-1234 🎉.", "Call five five five, one two three four."),
        ]
        events = await Talk(ws).turn("Wait?")
        assert events[-1][0] == "error" and events[-1][1]["code"] == "invalid_markup", events
        assert "forever" not in " ".join(body.get("spoken", "") for kind, body in events if kind == "sentence")
