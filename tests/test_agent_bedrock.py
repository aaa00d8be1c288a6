"""The Bedrock agent (boto3 ``converse_stream``) against a local stand-in of the runtime API
speaking AWS's event-stream encoding (``tests/support/bedrock_stub.py``), with the fake engine."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from bench.client import sse_stream
from bench.servers import serve_app
from tests.conftest import Server, fake_settings, free_port
from tests.support.agent_client import Talk, fails_then_recovers, heard, texts
from tests.support.bedrock_stub import ConverseStub, Reply

pytest.importorskip("boto3")

MODEL = "anthropic.claude-3-haiku-20240307-v1:0"  # a ':' in the path, as real model ids have
SYSTEM = "You are a test. Be brief."
REPLY = ["Your", " order", " shipped", " today.", " It", " arrives", " on", " Friday."]
HELD = 5


@pytest.fixture
async def bedrock() -> AsyncIterator[tuple[ConverseStub, str]]:
    stub = ConverseStub()
    async with serve_app(stub.app()) as url:
        yield stub, url
        stub.stopping.set()


@pytest.fixture
def bedrock_server(
    start_server: Callable[..., Awaitable[Server]], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Awaitable[Server]]:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "AKIDEXAMPLETESTONLY",
        "AWS_SECRET_ACCESS_KEY": "test-secret-not-real",
        "AWS_CONFIG_FILE": "/nonexistent",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)

    async def start(url: str, **overrides: Any) -> Server:
        return await start_server(
            fake_settings(
                agent_backend="bedrock",
                agent_url=url,
                agent_model=MODEL,
                agent_region="us-east-1",
                agent_system_prompt=SYSTEM,
                **overrides,
            )
        )

    return start


def text_message(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "content": [{"text": text}]}


async def test_converse_stream_is_spoken_as_it_arrives_turn_after_turn(bedrock, bedrock_server, http) -> None:
    stub, url = bedrock
    server = await bedrock_server(url, agent_max_tokens=77)
    reply = Reply(REPLY, hold_after=HELD)
    stub.replies.extend([reply, Reply(["Sure."])])
    async with http.ws_connect(server.ws_url) as ws:
        talk = Talk(ws)
        first = await talk.turn("Where is my order?", on_audio=reply.release.set)
        first_audio = next(i for i, (kind, _) in enumerate(first) if kind == "audio")
        assert len(texts(first[:first_audio])) == HELD  # audio began while the model was held
        assert texts(first) == REPLY and first[-1][0] == "done"
        second = await talk.turn("And my refund?")
        assert texts(second) == ["Sure."]
    one, two = stub.requests
    assert one["model"] == two["model"] == MODEL
    assert one["body"]["system"] == [{"text": SYSTEM}] and one["body"]["inferenceConfig"] == {"maxTokens": 77}
    assert two["body"]["messages"] == [
        text_message("user", "Where is my order?"),
        text_message("assistant", "".join(REPLY)),
        text_message("user", "And my refund?"),
    ]
    sse = await sse_stream(http, server.url + "/v1/stream/sse", prompt="Hello?")
    assert sse.of("ready")[0]["agent"] == MODEL and texts([("text", t) for t in sse.of("text")]) == stub.default.tokens


async def test_cancel_stops_the_stream_and_keeps_what_was_heard(bedrock, bedrock_server, http) -> None:
    stub, url = bedrock
    server = await bedrock_server(url)
    stub.replies.extend([Reply(REPLY, hold_after=HELD), Reply(["Okay."])])
    async with http.ws_connect(server.ws_url) as ws:
        talk = Talk(ws)
        first = await talk.turn("Where is my order?", cancel_on_audio=True)
        assert first[-1][0] == "cancelled"
        await asyncio.wait_for(stub.disconnected.wait(), 10)  # the blocked boto3 read was ended
        assert (await talk.turn("Go on."))[-1][0] == "done"
    said = first[-1][1]["heard_text"]  # word by word: the words whose audio was sent
    assert said and "".join(REPLY).startswith(said) and heard(first).startswith(said)
    assert stub.requests[1]["body"]["messages"][1] == text_message("assistant", said)


@pytest.mark.parametrize(
    "failure,code",
    [
        ({"status": 429, "error_type": "ThrottlingException"}, "agent_error"),
        ({"status": 500}, "agent_error"),
        ({"stream_error_after": 2}, "agent_error"),
        ({"hold_after": 0}, "agent_timeout"),
    ],
)
async def test_failures_answer_an_error_and_the_next_turn_works(bedrock, bedrock_server, http, failure, code) -> None:
    stub, url = bedrock
    server = await bedrock_server(url, agent_timeout_s=1.0)
    error = await fails_then_recovers(http, server.ws_url, stub.replies, Reply(REPLY, **failure), code)
    assert "test-secret-not-real" not in error["message"]


async def test_an_unreachable_endpoint_is_agent_unavailable(bedrock_server, http: aiohttp.ClientSession) -> None:
    server = await bedrock_server(f"http://127.0.0.1:{free_port()}", agent_timeout_s=5.0)
    async with http.ws_connect(server.ws_url) as ws:
        failed = await Talk(ws).turn("Hello?")
    assert failed[-1][1]["code"] == "agent_unavailable"
