"""The ``sagemaker`` engine in batch mode: boto3's ``InvokeEndpoint`` against a local stand-in.

The stand-in (``tests.support.sagemaker_stub``) serves the runtime API's own path,
``POST /endpoints/{name}/invocations``, reached through boto3's ``endpoint_url``, and relays
to a REAL model container subprocess (``run_gateway.py container --engine fake``). boto3 signs
with SigV4 from credentials in the environment, as the AWS chain would find them. The
bidirectional (HTTP/2) path needs Python 3.12: see ``tests/sagemaker312``.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator

import aiohttp
import pytest

from bench.client import ws_stream
from bench.servers import serve_app
from gateway.audio.decode import decode_mp3
from gateway.audio.mp3 import is_whole_frames
from gateway.engines import create_engine
from gateway.engines.fake import FakeEngine
from gateway.engines.sagemaker import SageMakerEngine, SageMakerOptions
from gateway.errors import BadRequest, EngineError
from tests.support.sagemaker_stub import Stub, make_invocations_app

from .conftest import fake_settings, free_port
from .test_container import Container, running_container

REPLY = "Sure, I can help with that. The train leaves at nine tonight."
VOICES = ("tone_a", "tone_b", "tone_x")  # tone_x: a voice the gateway allows but the container lacks


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Credentials and region from the environment only: no profile files, no instance metadata."""
    empty = tmp_path_factory.mktemp("aws")
    for name, value in {
        "AWS_ACCESS_KEY_ID": "AKIDGATEWAYTEST",
        "AWS_SECRET_ACCESS_KEY": "not-a-secret",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": str(empty / "config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(empty / "credentials"),
    }.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def container() -> Iterator[Container]:
    with running_container() as c:
        yield c


@pytest.fixture
async def stub(container: Container) -> AsyncIterator[tuple[Stub, str]]:
    """The stand-in service on a loopback port: (its state, its URL)."""
    state = Stub(container.url, endpoints=frozenset({"kokoro-tts"}))
    async with serve_app(make_invocations_app(state)) as url:
        yield state, url


def batch_engine(url: str, endpoint: str = "kokoro-tts") -> SageMakerEngine:
    options = SageMakerOptions(endpoint=endpoint, mode="batch", endpoint_url=url, voices=VOICES)
    return SageMakerEngine(fake_settings(sagemaker_endpoint=endpoint), options)


async def collect(engine: SageMakerEngine, text: str, voice: str = "tone_a", speed: float = 1.0) -> bytes:
    return b"".join([pcm async for pcm in engine.synthesize(text, voice=voice, speed=speed)])


async def test_batch_pcm_is_the_containers_exact_audio(stub: tuple[Stub, str]) -> None:
    state, url = stub
    engine = batch_engine(url)
    await engine.start()
    try:
        for text, voice, speed in (("The train leaves at nine tonight.", "tone_b", 1.0), ("Hello.", "tone_a", 1.5)):
            pcm = await collect(engine, text, voice, speed)
            # byte for byte what the fake engine inside the container renders: nothing lost or padded
            assert pcm == FakeEngine(fake_settings()).render(text, voice, speed).tobytes()
        assert state.stats.invocations == 2
    finally:
        await engine.aclose()


async def test_gateway_streams_speech_through_invoke_endpoint(
    stub: tuple[Stub, str], start_server, http: aiohttp.ClientSession
) -> None:
    state, url = stub
    server = await start_server(fake_settings(engine="sagemaker", sagemaker_endpoint="kokoro-tts"), batch_engine(url))
    async with http.get(server.url + "/v1/voices") as resp:
        body = await resp.json()
    assert body["engine"] == "sagemaker" and [v["id"] for v in body["voices"]] == list(VOICES)
    result = await ws_stream(http, server.ws_url, text=REPLY, options={"voice": "tone_b"})
    assert result.done is not None and result.error is None, result.events
    segments = ["Sure, I can help with that.", "The train leaves at nine tonight."]
    assert [s["text"] for s in result.of("sentence")] == segments
    assert state.stats.invocations == len(segments)  # one InvokeEndpoint per segment
    assert all(is_whole_frames(p) for p in result.payloads)
    expected = sum(len(FakeEngine(fake_settings()).render(s, "tone_b", 1.0)) for s in segments) / 24000
    assert abs(len(decode_mp3(result.audio)) / 24000 - expected) < 0.1


async def test_batch_errors_keep_the_service_and_container_codes(
    stub: tuple[Stub, str], start_server, http: aiohttp.ClientSession
) -> None:
    state, url = stub
    engine = batch_engine(url)
    await engine.start()
    try:
        # the container rejects the voice (400): the service's ModelError carries its body
        with pytest.raises(BadRequest) as bad_voice:
            await collect(engine, "Hello there.", voice="tone_x")
        assert bad_voice.value.code == "unknown_voice" and "tone_x" in bad_voice.value.message
    finally:
        await engine.aclose()
    # an endpoint the service does not know: its ValidationError, to the browser as an error event
    server = await start_server(
        fake_settings(engine="sagemaker", sagemaker_endpoint="nowhere"), batch_engine(url, endpoint="nowhere")
    )
    result = await ws_stream(http, server.ws_url, text="Hello there.")
    assert result.error is not None and result.error["code"] == "ValidationError", result.events
    assert "nowhere" in result.error["message"] and result.done is None
    assert state.stats.invocations == 1  # only the bad-voice call reached the container


async def test_unreachable_service_is_engine_unavailable() -> None:
    engine = batch_engine(f"http://127.0.0.1:{free_port()}")  # nothing listens there
    await engine.start()
    try:
        with pytest.raises(EngineError) as failed:
            await collect(engine, "Hello there.")
        assert failed.value.code == "engine_unavailable"
    finally:
        await engine.aclose()


def test_construction_checks() -> None:
    settings = fake_settings()
    with pytest.raises(ValueError, match="sagemaker_endpoint"):
        SageMakerEngine(settings, SageMakerOptions(endpoint="", mode="batch"))
    with pytest.raises(ValueError, match="sagemaker_mode"):
        SageMakerEngine(settings, SageMakerOptions(endpoint="e", mode="stereo"))
    engine = SageMakerEngine(settings, SageMakerOptions(endpoint="e", mode="batch"))
    assert engine.default_voice == "af_heart" and len(engine.voices) >= 3  # Kokoro-82M's English voices
    assert {v.language for v in engine.voices} == {"en-US", "en-GB"}
    options = SageMakerOptions.from_settings(fake_settings(sagemaker_endpoint="tts", sagemaker_region="eu-west-1"))
    assert (options.endpoint, options.region, options.mode) == ("tts", "eu-west-1", "stream")


def test_engine_registry_builds_the_stream_engine_where_the_sdk_installs() -> None:
    settings = fake_settings(engine="sagemaker", sagemaker_endpoint="tts")
    if sys.version_info >= (3, 12):
        assert isinstance(create_engine(settings), SageMakerEngine)
    else:  # the default stream mode cannot run here: say what to do, at start-up
        with pytest.raises(ImportError, match=r"sagemaker-http2"):
            create_engine(settings)


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="the HTTP/2 SDK installs on Python 3.12+")
def test_stream_mode_names_the_extra_and_python_version() -> None:
    with pytest.raises(ImportError) as missing:
        SageMakerEngine(fake_settings(), SageMakerOptions(endpoint="e", mode="stream"))
    text = str(missing.value)
    assert "pip install -e '.[sagemaker-http2]'" in text and "3.12" in text and sys.version.split()[0] in text
