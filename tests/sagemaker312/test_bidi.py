"""``InvokeEndpointWithBidirectionalStream`` end to end, with the real HTTP/2 SDK (Python 3.12+).

The service's stand-in is ``tests.support.sagemaker_stub.BidiApp`` served by hypercorn over TLS
(the SDK speaks HTTP/2 only over TLS) with a CA and certificate made here; the SDK trusts that
CA through the engine's CRT transport. The stand-in decodes the signed event-stream frames with
the SDK's own codecs and relays every PayloadPart to a REAL model container subprocess
(``run_gateway.py container --engine fake``) over its WebSocket, and every container frame back.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest

from bench.client import ws_stream
from gateway.audio.decode import decode_mp3
from gateway.audio.mp3 import is_whole_frames
from gateway.config import Settings
from gateway.engines.fake import FakeEngine
from gateway.engines.sagemaker import SageMakerEngine, SageMakerOptions, crt_transport
from gateway.errors import EngineError
from gateway.text.segmenter import split_text
from tests.support.sagemaker_stub import Stub, TlsFiles, make_test_certs, serve_bidi

from ..conftest import fake_settings, free_port
from ..test_container import Container, running_container
from ..test_sagemaker import REPLY, VOICES, aws_env, collect  # noqa: F401  (aws_env: an autouse fixture)

ENDPOINT = "kokoro-tts"


def render(text: str, voice: str = "tone_a", speed: float = 1.0) -> bytes:
    return FakeEngine(fake_settings()).render(text, voice, speed).tobytes()


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_test_certs(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def container() -> Iterator[Container]:
    with running_container() as c:
        yield c


@pytest.fixture
def slow_container() -> Iterator[Container]:
    """A container speaking in real time (a reply lasts seconds), which a test may kill."""
    with running_container("fake_rtf=1.0") as c:
        yield c


@contextlib.asynccontextmanager
async def bidi_service(
    c: Container, certs: TlsFiles, max_part_bytes: int = 0, port: int = 0
) -> AsyncIterator[tuple[Stub, str]]:
    """The stand-in on a loopback port over TLS: (its state, its https URL)."""
    stub = Stub(c.url, endpoints=frozenset({ENDPOINT}), max_part_bytes=max_part_bytes)
    port, stop = port or free_port(), asyncio.Event()
    server = asyncio.create_task(serve_bidi(stub, port, certs, stop=stop))
    deadline = time.monotonic() + 5
    while True:  # hypercorn binds inside serve(): wait until the port answers
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            break
        except OSError:
            if server.done() or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.02)
    try:
        yield stub, f"https://localhost:{port}"
    finally:
        stop.set()
        await asyncio.wait_for(server, 10)


@pytest.fixture
async def service(container: Container, certs: TlsFiles) -> AsyncIterator[tuple[Stub, str]]:
    """The stand-in in front of the shared container. Ask for it BEFORE start_server, so that
    the gateways (and their SDK clients) are closed before the stand-in stops."""
    async with bidi_service(container, certs) as running:
        yield running


@pytest.fixture
async def slow_service(slow_container: Container, certs: TlsFiles) -> AsyncIterator[tuple[Stub, str]]:
    async with bidi_service(slow_container, certs) as running:
        yield running


def stream_engine(url: str, certs: TlsFiles, endpoint: str = ENDPOINT) -> SageMakerEngine:
    options = SageMakerOptions(endpoint=endpoint, mode="stream", endpoint_url=url, ca_file=str(certs.ca), voices=VOICES)
    return SageMakerEngine(fake_settings(sagemaker_endpoint=endpoint), options)


async def bidi_gateway(start_server: Any, url: str, certs: TlsFiles, endpoint: str = ENDPOINT) -> Any:
    """A gateway whose engine streams through the stand-in at ``url`` to ``endpoint``."""
    return await start_server(
        fake_settings(engine="sagemaker", sagemaker_endpoint=endpoint), stream_engine(url, certs, endpoint=endpoint)
    )


@pytest.fixture
async def slow_gateway(slow_service: tuple[Stub, str], certs: TlsFiles, start_server: Any) -> tuple[Stub, Any]:
    """(the stand-in's state, a gateway) in front of the real-time container; asks for the
    stand-in before start_server, so that the gateway closes first."""
    stub, url = slow_service
    return stub, await bidi_gateway(start_server, url, certs)


async def sdk_client(url: str, certs: TlsFiles) -> Any:
    from aws_sdk_sagemaker_runtime_http2.client import AsyncSageMakerRuntimeHTTP2Client
    from aws_sdk_sagemaker_runtime_http2.config import AsyncSageMakerRuntimeHTTP2Config

    config = await AsyncSageMakerRuntimeHTTP2Config.resolve(endpoint_uri=url, transport=crt_transport(str(certs.ca)))
    return AsyncSageMakerRuntimeHTTP2Client(config=config)


async def open_stream(client: Any, *parts: tuple[bytes, str]) -> tuple[Any, Any]:
    from aws_sdk_sagemaker_runtime_http2.models import (
        InvokeEndpointWithBidirectionalStreamInput,
        RequestPayloadPart,
        RequestStreamEventPayloadPart,
    )

    stream = await client.invoke_endpoint_with_bidirectional_stream(
        InvokeEndpointWithBidirectionalStreamInput(endpoint_name=ENDPOINT)
    )
    for data, kind in parts:
        await stream.input_stream.send(
            RequestStreamEventPayloadPart(value=RequestPayloadPart(bytes_=data, data_type=kind))
        )
    _, output = await stream.await_output()
    return stream, output


def control(*messages: dict[str, Any]) -> list[tuple[bytes, str]]:
    return [(json.dumps(m).encode(), "UTF8") for m in messages]


# -- the SDK against the stand-in ----------------------------------------------------------------
async def test_sdk_parts_out_and_back(container: Container, certs: TlsFiles) -> None:
    text = "The train leaves at nine tonight."
    async with bidi_service(container, certs, max_part_bytes=4096) as (stub, url):
        client = await sdk_client(url, certs)
        try:
            stream, output = await open_stream(
                client,
                *control(
                    {"type": "start", "format": "pcm", "voice": "tone_b"},
                    {"type": "text", "text": text},
                    {"type": "end"},
                ),
            )
            events, pcm, states = [], bytearray(), []
            while True:
                part = (await output.receive()).value
                states.append(part.completion_state)
                if part.data_type == "UTF8":
                    events.append(json.loads(part.bytes_))
                    if events[-1]["type"] == "done":
                        break
                else:
                    pcm += part.bytes_
            await stream.input_stream.close()  # the stand-in then closes the container's socket
            assert await output.receive() is None  # ... and ends the response
            await stream.close()
        finally:
            await client.close()
    assert [e["type"] for e in events] == ["ready", "sentence", "words", "done"]
    assert bytes(pcm) == render(text, "tone_b")  # the container's PCM, byte for byte, out of 4 KiB parts
    assert "PARTIAL" in states and stub.stats.parts_out == len(states)
    assert stub.stats.parts_in == 3 and stub.stats.streams == 1 and stub.stats.unsigned_frames == 0


async def test_container_closing_the_socket_is_a_model_stream_error(container: Container, certs: TlsFiles) -> None:
    from aws_sdk_sagemaker_runtime_http2.models import ModelStreamError

    async with bidi_service(container, certs) as (stub, url):
        client = await sdk_client(url, certs)
        try:
            # a binary part over the container's 64 KiB message limit: it closes its socket (1009)
            stream, output = await open_stream(client, (b"\x00" * 70_000, "BINARY"))
            with pytest.raises(ModelStreamError) as failed:
                while await output.receive() is not None:
                    pass
            await stream.input_stream.close()
            with contextlib.suppress(Exception):
                await stream.close()
        finally:
            await client.close()
    assert failed.value.error_code == "StreamBroken" and "1009" in failed.value.message
    assert stub.stats.stream_errors == ["StreamBroken"]


# -- the engine ----------------------------------------------------------------------------------
async def test_engine_streams_each_segment_on_its_own_stream(container: Container, certs: TlsFiles) -> None:
    texts = ["Sure,", "I can help with that.", "The train leaves at nine tonight.", "Does that work?"]
    async with bidi_service(container, certs, max_part_bytes=3001) as (stub, url):  # odd parts split samples
        engine = stream_engine(url, certs)
        await engine.start()
        try:
            assert await collect(engine, texts[0], "tone_b", 1.25) == render(texts[0], "tone_b", 1.25)
            together = await asyncio.gather(*(collect(engine, t) for t in texts[1:]))  # multiplexed on HTTP/2
            assert together == [render(t) for t in texts[1:]]
        finally:
            await engine.aclose()
    assert stub.stats.streams == len(texts) and stub.stats.parts_in == 3 * len(texts)


async def test_gateway_speaks_through_the_bidirectional_stream(
    service: tuple[Stub, str], certs: TlsFiles, start_server, http: aiohttp.ClientSession
) -> None:
    stub, url = service
    server = await bidi_gateway(start_server, url, certs)
    result = await ws_stream(http, server.ws_url, text=REPLY, options={"voice": "tone_b"})
    assert result.done is not None and result.error is None, result.events
    segments = split_text(REPLY, first_clause_words=Settings().first_clause_words)
    assert [s["text"] for s in result.of("sentence")] == segments and stub.stats.streams == len(segments)
    assert all(is_whole_frames(p) for p in result.payloads)
    expected = sum(len(render(s, "tone_b")) for s in segments) / 2 / 24000
    assert abs(len(decode_mp3(result.audio)) / 24000 - expected) < 0.1


async def test_errors_reach_the_browser_with_their_codes(
    service: tuple[Stub, str], certs: TlsFiles, start_server, http: aiohttp.ClientSession
) -> None:
    stub, url = service
    server = await bidi_gateway(start_server, url, certs)
    # the container's own error event (a voice it lacks), relayed as a UTF8 PayloadPart
    bad_voice = await ws_stream(http, server.ws_url, text="Hello there.", options={"voice": "tone_x"})
    # the service refusing the stream: InputValidationError, ErrorCode ValidationError
    other = await bidi_gateway(start_server, url, certs, endpoint="nowhere")
    no_endpoint = await ws_stream(http, other.ws_url, text="Hello there.")
    assert bad_voice.error is not None and bad_voice.error["code"] == "unknown_voice", bad_voice.events
    assert no_endpoint.error is not None and no_endpoint.error["code"] == "ValidationError", no_endpoint.events
    assert "nowhere" in no_endpoint.error["message"] and no_endpoint.done is None


async def test_barge_in_closes_the_containers_socket(
    slow_container: Container, slow_gateway: tuple[Stub, Any], http: aiohttp.ClientSession
) -> None:
    stub, server = slow_gateway
    result = await ws_stream(http, server.ws_url, text=REPLY, cancel_after_payloads=1, timeout=20)
    assert result.of("cancelled") and result.done is None, result.events
    deadline = time.monotonic() + 30  # a hang guard: the assertion is on the sockets left
    while await container_sockets(http, slow_container) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert await container_sockets(http, slow_container) == 0  # the container stopped speaking


async def test_container_crash_reaches_the_browser_as_model_stream_error(
    slow_container: Container, slow_gateway: tuple[Stub, Any], http: aiohttp.ClientSession
) -> None:
    stub, server = slow_gateway
    async with http.ws_connect(server.ws_url) as ws:
        for message in ({"type": "start"}, {"type": "text", "text": REPLY}, {"type": "end"}):
            await ws.send_json(message)
        events, payloads = [], 0
        async for msg in ws:
            if msg.type == aiohttp.WSMsgType.BINARY:
                payloads += 1
                if payloads == 1:
                    slow_container.kill()  # mid-reply: its socket drops under the stream
            elif msg.type == aiohttp.WSMsgType.TEXT:
                events.append(json.loads(msg.data))
    error = next(e for e in events if e["type"] == "error")
    assert error["code"] == "StreamBroken" and "ModelStreamError" in error["message"], events
    assert stub.stats.stream_errors == ["StreamBroken"] and not any(e["type"] == "done" for e in events)


async def container_sockets(http: aiohttp.ClientSession, c: Container) -> float:
    async with http.get(c.url + "/metrics") as resp:
        text = await resp.text()
    line = next(s for s in text.splitlines() if s.startswith('tts_sessions_active{channel="container"}'))
    return float(line.split()[-1])


def test_certificates_chain_to_the_test_ca(certs: TlsFiles) -> None:
    from cryptography import x509

    ca = x509.load_pem_x509_certificate(certs.ca.read_bytes())
    server = x509.load_pem_x509_certificate(certs.cert.read_bytes())
    server.verify_directly_issued_by(ca)
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in names.get_values_for_type(x509.DNSName)
    assert certs.key.read_bytes().startswith(b"-----BEGIN PRIVATE KEY")


async def test_unreachable_service_is_engine_unavailable(certs: TlsFiles) -> None:
    engine = stream_engine(f"https://localhost:{free_port()}", certs)  # nothing listens there
    await engine.start()
    try:
        with pytest.raises(EngineError) as failed:
            await collect(engine, "Hello there.")
        assert failed.value.code == "engine_unavailable" and engine.retries == 1  # tried twice
    finally:
        await engine.aclose()


async def test_engine_reconnects_after_the_service_drops_its_connection(container: Container, certs: TlsFiles) -> None:
    port = free_port()
    engine = stream_engine(f"https://localhost:{port}", certs)
    await engine.start()
    try:
        for _ in range(2):  # the same port each time: the second service is new, its connection too
            async with bidi_service(container, certs, port=port) as (stub, _):
                assert await collect(engine, "Hello there.") == render("Hello there.")
                assert stub.stats.streams == 1
    finally:
        await engine.aclose()


async def test_stream_mode_forwards_the_containers_words(certs: TlsFiles) -> None:
    """The container's ``words`` events come back through the service as ``WordTimes``, each
    before its sentence's audio; not asked for, they are dropped."""
    from yarl import URL

    from gateway.kokoro.timestamps import WordTimes, words_of

    from ..test_engine_words import stand_in

    text = "Sure thing. The train leaves at nine tonight"
    async with stand_in(True) as (it, ws_url):
        standin = Container(URL(ws_url).port or 0)
        standin.log.close()  # no subprocess: no log
        async with bidi_service(standin, certs) as (_, url):
            engine = stream_engine(url, certs)
            assert engine.capabilities.timestamps
            await engine.start()
            try:
                items = [x async for x in engine.synthesize(text, voice="tone_a", speed=1.0, timestamps=True)]
                plain = [x async for x in engine.synthesize(text, voice="tone_a", speed=1.0)]
            finally:
                await engine.aclose()
    # issue 22, finding 4: the text is one segment, which the container must not cut again
    assert it.starts and all(start["first_clause"] is False for start in it.starts)
    kinds = ["words" if isinstance(x, WordTimes) else "audio" for x in items]
    assert kinds[0] == "words" and kinds.count("words") == 2 and kinds[-1] == "audio"
    pcm = b"".join(x for x in items if isinstance(x, bytes))
    words = [w for x in items if isinstance(x, WordTimes) for w in x.words]
    assert [w.word for w in words] == words_of(text)
    assert all(a.end <= b.start for a, b in zip(words, words[1:])) and words[-1].end <= len(pcm) // 2
    assert all(isinstance(x, bytes) for x in plain) and b"".join(plain) == pcm  # type: ignore[arg-type]
