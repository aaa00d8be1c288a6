"""The engine contract: each engine declares what it can do, options are checked once against
that declaration with one code per fault on every channel, and an engine's settings stay its own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bench.client import sse_stream
from bench.servers import serve_app
from gateway.config import Settings, load_settings, section
from gateway.core.batch import synthesize_pcm
from gateway.core.options import parse_options
from gateway.core.stream import StreamSession
from gateway.core.synthesis import SynthesisHub
from gateway.engines.embedded import EmbeddedSettings
from gateway.engines.fake import FakeEngine, fake_duration_s
from gateway.engines.sagemaker import SageMakerEngine, SageMakerOptions
from gateway.errors import BadRequest
from gateway.web.container import STREAM_PATH, make_container_app

from .conftest import Server, fake_settings
from .support.engines import ModalFake
from .support.sessions import spoken

# one request fault each, and the one code every channel answers it with
FAULTS = [
    ({"voice": "nobody"}, "unknown_voice"),
    ({"voice": "tone_a+tone_b"}, "unknown_voice"),  # the fake engine declares no blends
    ({"speed": 9}, "invalid_speed"),
    ({"format": "webm"}, "unknown_format"),
    ({"bitrate": 65}, "invalid_option"),
    ({"vocoder": "frozen"}, "invalid_option"),  # the fake engine declares no vocoder modes
    ({"sample_rate": 11025}, "invalid_option"),  # not one of the rates offered
    ({"format": "opus", "sample_rate": 44100}, "invalid_option"),  # Opus cannot carry it
]
ENGINE_KEYS = ("embedded_", "kokoro_", "container_", "sagemaker_", "fake_")


async def ws_error(url: str, http: aiohttp.ClientSession, fault: dict[str, Any]) -> tuple[str, int | None]:
    async with http.ws_connect(url) as ws:
        await ws.send_json({"type": "start", **fault})
        body = await ws.receive_json(timeout=5)
        assert body["type"] == "error", body
        await ws.receive(timeout=5)
        return body["code"], ws.close_code


async def http_error(resp: aiohttp.ClientResponse) -> tuple[int, str]:
    return resp.status, (await resp.json())["error"]["code"]


@pytest.fixture
async def container_url() -> AsyncIterator[str]:
    """The model container app (fake engine) on a loopback port."""
    settings = fake_settings()
    async with serve_app(make_container_app(settings, FakeEngine(settings))) as url:
        yield url


@pytest.mark.parametrize("fault,code", FAULTS)
async def test_each_fault_has_one_code_on_every_channel(
    fake_server: Server, container_url: str, start_server, http: aiohttp.ClientSession, fault: dict[str, Any], code: str
) -> None:
    sse = await sse_stream(http, fake_server.url + "/v1/stream/sse", text="Hi.", **fault)
    assert sse.error is not None and (sse.error["status"], sse.error["code"]) == (400, code)
    assert await ws_error(fake_server.ws_url, http, fault) == (code, 1008)
    openai = {"input": "Hi.", **{("response_format" if k == "format" else k): v for k, v in fault.items()}}
    async with http.post(fake_server.url + "/v1/audio/speech", json=openai) as resp:
        assert await http_error(resp) == (400, code)
    async with http.post(container_url + "/invocations", json={"text": "Hi.", **fault}) as resp:
        assert await http_error(resp) == (400, code)
    ws_url = container_url.replace("http://", "ws://") + STREAM_PATH
    code_on_container, _ = await ws_error(ws_url, http, fault)
    assert code_on_container == code
    # a gateway in front of the container refuses it itself, from the container's declaration
    gateway = await start_server(fake_settings(engine="container", container_url=ws_url))
    assert await ws_error(gateway.ws_url, http, fault) == (code, 1008)


def sagemaker_engine() -> SageMakerEngine:
    settings = fake_settings(engine="sagemaker", sagemaker_endpoint="tts", sagemaker_mode="batch")
    return SageMakerEngine(settings, SageMakerOptions(endpoint="tts", mode="batch", voices=("af_heart", "bf_emma")))


def test_the_vocoder_default_is_one_value_and_resolved_in_one_place() -> None:
    from gateway.engines.base import Capabilities
    from gateway.kokoro.vocoder.modes import DEFAULT, MODES

    assert Settings().embedded_vocoder == DEFAULT  # config cannot import the kokoro layer
    caps = Capabilities(vocoder_modes=MODES, default_vocoder="frozen")
    assert caps.vocoder_for("exact") == "exact" and caps.vocoder_for("") == "frozen"
    assert caps.vocoder_for(None, live=False) == "exact"  # a whole file: nobody waits on it
    assert Capabilities().vocoder_for("") is None  # no modes: the engine never streams in a segment


def test_engines_refuse_what_their_declaration_lacks() -> None:
    engine = sagemaker_engine()
    caps = engine.capabilities
    assert caps.vocoder_modes == () and caps.default_vocoder is None and caps.timestamps is False
    assert caps.languages == ("en-US", "en-GB") and caps.formats == ("pcm",)
    settings = Settings()
    for raw, code in (
        ({"vocoder": "exact"}, "invalid_option"),
        ({"voice": "af_bella"}, "unknown_voice"),
        ({"voice": "af_heart+bf_emma"}, "unknown_voice"),
        ({"speed": 2.5}, "invalid_speed"),
    ):
        with pytest.raises(BadRequest) as err:
            parse_options(raw, settings, engine)
        assert err.value.code == code, raw
    assert parse_options({"voice": "bf_emma", "speed": 2.0}, settings, engine).voice == "bf_emma"


def test_a_declared_speed_range_is_the_one_checked() -> None:
    engine = FakeEngine(fake_settings())
    engine.declare(min_speed=0.8, max_speed=1.25)
    assert parse_options({"speed": 1.25}, Settings(), engine).speed == 1.25
    for speed in (0.7, 1.3):
        with pytest.raises(BadRequest) as err:
            parse_options({"speed": speed}, Settings(), engine)
        assert err.value.code == "invalid_speed" and "1.25" in err.value.message


async def test_gateway_on_a_container_without_modes_refuses_vocoder(
    container_url: str, start_server, http: aiohttp.ClientSession
) -> None:
    ws_url = container_url.replace("http://", "ws://") + STREAM_PATH
    gateway = await start_server(fake_settings(engine="container", container_url=ws_url))
    assert gateway.engine.capabilities.vocoder_modes == ()
    code, close = await ws_error(gateway.ws_url, http, {"vocoder": "frozen-first"})
    assert (code, close) == ("invalid_option", 1008)


class OnlyCoreSettings:
    """The flat settings without any engine's keys: reading one is an AttributeError."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings

    def __getattr__(self, name: str) -> Any:
        if name.startswith(ENGINE_KEYS):
            raise AttributeError(f"the core read the engine setting {name}")
        return getattr(self._settings, name)


async def test_the_core_reads_no_engine_setting_and_takes_the_default_mode_from_the_engine() -> None:
    settings = fake_settings()
    core = OnlyCoreSettings(settings)
    engine = ModalFake(settings, ("exact", "frozen"), "frozen")  # the settings say frozen-first; the engine frozen
    options = parse_options({"text": "Hello there. How are you?"}, core, engine)  # type: ignore[arg-type]
    ready, events = await spoken(StreamSession(engine, options, core), options.text)  # type: ignore[arg-type]
    assert ready["vocoder"] == "frozen"
    assert events[-1].type == "done", events[-1]
    modes = [mode for mode, _ in engine.asked]
    assert modes and set(modes) == {"frozen"}
    pcm = await synthesize_pcm(SynthesisHub(engine), options, core)  # type: ignore[arg-type]
    assert abs(len(pcm) / 2 / 24000 - fake_duration_s("Hello there.") - fake_duration_s("How are you?")) < 0.01
    assert engine.asked[-1][0] == "exact"  # batch: nobody is waiting, so the whole model


def test_each_engine_reads_its_own_section_from_every_source(tmp_path: Path) -> None:
    toml = tmp_path / "g.toml"
    toml.write_text('[embedded]\nthreads = 3\nvocoder = "exact"\n')
    from_toml = section(load_settings(toml, env={}), "embedded", EmbeddedSettings)
    assert (from_toml.threads, from_toml.vocoder) == (3, "exact")
    from_env = load_settings(toml, env={"GATEWAY_EMBEDDED_THREADS": "4"})
    assert section(from_env, "embedded", EmbeddedSettings).threads == 4
    from_cli = load_settings(toml, env={"GATEWAY_EMBEDDED_THREADS": "4"}, overrides={"embedded_threads": "2"})
    assert section(from_cli, "embedded", EmbeddedSettings).threads == 2
    # every field of the section is a documented flat setting with the engine's prefix
    assert {f"embedded_{f.name}" for f in fields(EmbeddedSettings)} <= {f.name for f in fields(Settings)}
