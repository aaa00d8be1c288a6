"""The core as a pipeline: bounded look-ahead, one synthesis path for batch and streaming, one
channel for the gateway's socket and the model container's (fake engine, real servers)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from bench.client import ws_stream
from gateway.core import batch
from gateway.core.events import OUT_EVENTS
from gateway.core.options import parse_options
from gateway.core.stream import StreamSession
from gateway.core.synthesis import SynthesisHub
from gateway.engines.fake import FakeEngine
from gateway.web.container import STREAM_PATH, make_container_app
from gateway.web.state import GATEWAY

from .conftest import Server, fake_settings, free_port

SENTENCES = [f"This is sentence number {n} of a long reply." for n in range(12)]
REPLY = "Sure, I can help with that. The train leaves at nine tonight. Does that work for you?"


async def until(condition: Callable[[], bool], deadline_s: float = 5.0) -> None:
    """Let the loop run until ``condition`` holds; fail at the deadline."""
    async with asyncio.timeout(deadline_s):
        while not condition():
            await asyncio.sleep(0)


@pytest.mark.parametrize("lookahead", [1, 3])
async def test_a_consumer_that_does_not_read_bounds_synthesis(lookahead: int) -> None:
    settings = fake_settings(lookahead=lookahead, lookahead_s=0)
    engine = FakeEngine(settings)  # instant: only the queues hold synthesis back
    hub = SynthesisHub(engine)
    session = StreamSession(engine, parse_options({}, settings, engine), settings, hub=hub)
    try:
        session.push_text(" ".join(SENTENCES))
        session.end()
        pipeline = session.pipeline
        # nobody reads: the encoder waits for the channel, and synthesis for room in `ready`
        # (holding the next text: taken from `texts`, its engine call not started)
        await until(
            lambda: (
                not session.out.empty()
                and pipeline.ready.full()
                and not hub.flights
                and pipeline.texts.qsize() == len(SENTENCES) - engine.calls
            )
        )
        # the encoder's segment and `lookahead` more were synthesized; the next one waits
        assert engine.calls == lookahead + 1 and engine.active == 0
        sentences = []
        async for event in session.events():  # reading lets it all through
            if event.type == "sentence":
                sentences.append(event.fields["text"])
        assert event.type == "done" and sentences == SENTENCES
        assert engine.calls == len(SENTENCES)
    finally:
        await session.aclose()


@pytest.mark.parametrize("fmt", ["mp3", "pcm"])
async def test_batch_and_stream_give_the_same_audio(fmt: str) -> None:
    settings = fake_settings()
    engine = FakeEngine(settings)
    options = parse_options({"text": REPLY, "format": fmt, "cache": "false"}, settings, engine)
    session = StreamSession(engine, options, settings)
    try:
        session.push_text(REPLY)
        session.end()
        streamed = b"".join([e.audio async for e in session.events() if e.type == "audio"])
    finally:
        await session.aclose()
    whole = await batch.synthesize(SynthesisHub(engine), options, settings)
    assert streamed and whole == streamed


async def test_openai_batch_and_its_stream_and_the_socket_give_the_same_pcm(
    fake_server: Server, http: aiohttp.ClientSession
) -> None:
    body = {"input": REPLY, "response_format": "pcm", "voice": "tone_a"}
    async with http.post(fake_server.url + "/v1/audio/speech", json={**body, "stream": False}) as resp:
        assert resp.status == 200
        whole = await resp.read()
    async with http.post(fake_server.url + "/v1/audio/speech", json={**body, "stream": True}) as resp:
        streamed = await resp.read()
    socket = await ws_stream(http, fake_server.ws_url, text=REPLY, options={"format": "pcm"})
    assert whole and whole == streamed == socket.audio


async def _reply(http: aiohttp.ClientSession, url: str, messages: list[Any]) -> list[Any]:
    """What a socket sends back for ``messages``, up to ``done``."""
    got: list[Any] = []
    async with http.ws_connect(url) as ws:
        for m in messages:
            await ws.send_str(m if isinstance(m, str) else json.dumps(m))
        async for msg in ws:
            if msg.type == aiohttp.WSMsgType.BINARY:
                got.append(bytes(msg.data))
                continue
            event = json.loads(msg.data)
            got.append(event)
            if event["type"] == "done":
                break
    return got


async def test_the_container_socket_and_the_gateway_socket_run_one_channel(
    fake_server: Server, http: aiohttp.ClientSession
) -> None:
    runner = web.AppRunner(make_container_app(fake_settings()))
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        await runner.app[GATEWAY].ready.wait()
        messages = [
            "not json",
            {"type": "start", "format": "mp3", "cache": False},
            {"type": "text", "text": REPLY},
            {"type": "end"},
        ]
        gateway = await _reply(http, fake_server.ws_url, messages)
        container = await _reply(http, f"ws://127.0.0.1:{port}{STREAM_PATH}", messages)
    finally:
        await runner.cleanup()
    shape = [(e["type"], sorted(e)) if isinstance(e, dict) else "audio" for e in gateway]
    assert shape == [(e["type"], sorted(e)) if isinstance(e, dict) else "audio" for e in container]
    assert gateway[0] == container[0] and gateway[0]["code"] == "invalid_json"
    assert [e for e in gateway if isinstance(e, bytes)] == [e for e in container if isinstance(e, bytes)]
    g_done, c_done = gateway[-1], container[-1]
    assert (g_done["channel"], c_done["channel"]) == ("ws", "container")
    for name in ("sentences", "audio_bytes", "payloads", "wire_bytes"):
        assert g_done[name] == c_done[name], name


class FailingAgent:
    """An agent whose first turn streams words (no sentence end yet), then fails once ``fail``
    is set; later turns answer "Fine." (a real Agent, paced by the test instead of a network)."""

    backend = label = "failing"

    def __init__(self, words: int) -> None:
        self.words, self.turns = words, 0
        self.fail, self.failing = asyncio.Event(), asyncio.Event()

    async def aclose(self) -> None:
        pass

    async def stream(self, messages: list[dict[str, str]]) -> Any:
        from gateway.agent import AgentError

        self.turns += 1
        if self.turns > 1:
            yield "Fine."
            return
        for _ in range(self.words):
            yield "and "
        await self.fail.wait()
        self.failing.set()
        raise AgentError("the model's stream broke")


async def test_nothing_of_a_cancelled_turn_follows_its_cancelled() -> None:
    """Issue 22, finding 7: an agent turn that failed while it was being cancelled sent its
    ``error`` after ``cancelled`` (and the error then ended the conversation). Here the client
    reads nothing for a while, so the turn's ``error`` waits for room in the session's queue
    when the ``cancel`` comes; the failing turn had taken its task out of the pipeline's, so
    the cancel could not stop it, and the room the cancel made let the error through."""
    settings = fake_settings()
    engine, agent = FakeEngine(settings), FailingAgent(words=OUT_EVENTS)
    session = StreamSession(
        engine, parse_options({}, settings, engine), settings, agent=agent, hub=SynthesisHub(engine)
    )
    session.multi_turn = True  # as on the WebSocket
    try:
        session.push_prompt("Hi?")
        await until(session.out.full)  # a `text` event per word: the client has not read them
        async with asyncio.timeout(20):  # a deadlock fails here rather than hang the suite
            agent.fail.set()
            await agent.failing.wait()  # the turn's error is on its way out: the client barges in
            await session.cancel()
            session.push_prompt("Still there?")
            session.end()
            seen = [event.type async for event in session.events()]
        assert seen[0] == "cancelled", seen  # the queued events were dropped
        assert "error" not in seen and seen[1] == "text" and seen[-1] == "done", seen  # the next turn, whole
    finally:
        await session.aclose()
