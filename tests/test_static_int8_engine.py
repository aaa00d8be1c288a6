"""``embedded_precision = "int8-static"`` on the real model (``gateway.kokoro.floatgraph.static_build``).

The gateway on the static graph streams a sentence over the WebSocket in several chunks (the
streaming vocoder is cut from the same graph) and Whisper hears the words; its text side is the
shipped one, so its durations equal the int8 graph's on the same tokens; a damaged cache file is
rebuilt, not loaded; an unknown precision (or int8-static on cuda) is refused at start in one line. The graph is built
once into the user cache (``~/.cache/kokoro-gateway/float``), as in production.
"""

from __future__ import annotations

import hashlib
import logging
import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import pytest_asyncio

from gateway.kokoro import floatgraph
from gateway.kokoro.floatgraph.static_build import default_calibration

from .conftest import embedded_gateway
from .support.cli import refused_at_start

RATE = 24000
# one sentence, no comma (one segment), over 2 s of audio: streamed in chunks, not in one call
SENTENCE = "The train to the airport leaves from the second platform at eight fifteen tonight so please be early."


def calls(metrics: str) -> float:
    found = re.search(r'^tts_engine_work\{kind="calls"\} (\S+)$', metrics, re.M)
    assert found, metrics[:500]
    return float(found.group(1))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def url() -> AsyncIterator[str]:
    from gateway.web.state import GATEWAY

    async with embedded_gateway(embedded_precision="int8-static") as (base, app):
        assert await app[GATEWAY].engine.wait_vocoder(), app[GATEWAY].engine.vocoder_status
        yield base


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_int8_static_streams_speech_inside_a_sentence(url: str) -> None:
    from bench import wer
    from bench.client import ws_stream
    from gateway.audio.decode import decode_mp3

    logging.getLogger("faster_whisper").setLevel(logging.WARNING)
    async with aiohttp.ClientSession() as http:
        async with http.get(url + "/readyz") as r:
            ready = await r.json()
        assert ready["vocoder"]["state"] == "ready", ready
        async with http.get(url + "/metrics") as r:
            before = calls(await r.text())
        result = await ws_stream(
            http, url.replace("http", "ws") + "/v1/stream/ws", text=SENTENCE, options={"vocoder": "frozen"}, timeout=300
        )
        async with http.get(url + "/metrics") as r:
            after = calls(await r.text())
    assert result.done, result.events[-3:]
    assert result.of("ready")[0]["vocoder"] == "frozen" and len(result.of("sentence")) == 1
    assert after - before >= 2  # one segment, several model calls: streamed inside the sentence
    samples = decode_mp3(result.audio)
    assert len(samples) > 3 * RATE and np.abs(samples).max() > 0.05
    heard = wer.transcribe(samples, RATE)
    assert wer.score(SENTENCE, heard).wer <= 0.1, heard


def durations_and_audio(model: bytes, feed: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    from gateway.kokoro.onnx_model import with_durations
    from gateway.kokoro.vocoder.names import DURATIONS

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    proto = with_durations(onnx.load_from_string(model))
    session = ort.InferenceSession(proto.SerializeToString(), sess_options=opts, providers=["CPUExecutionProvider"])
    durations, audio = session.run([DURATIONS, "audio"], feed)
    return np.asarray(durations), np.asarray(audio).ravel()


@pytest.mark.slow
def test_int8_static_keeps_the_shipped_durations_and_its_cache_is_checked(tmp_path: Path) -> None:
    from gateway.kokoro.onnx_model import load_model_bytes, shipped_sha256

    calibration = default_calibration()
    sha = shipped_sha256()
    static, digest = floatgraph.graph_bytes(floatgraph.STATIC, load_model_bytes, sha, calibration=calibration)
    feed = calibration.feeds()[2]
    (d_static, a_static), (d_int8, a_int8) = (durations_and_audio(m, feed) for m in (static, load_model_bytes()))
    np.testing.assert_array_equal(d_static, d_int8)
    assert a_static.size == a_int8.size and np.abs(a_static).max() > 0.05

    # the cached file, damaged in a copy of the cache: rebuilt from the shipped bytes, not loaded
    name = f"{floatgraph.STATIC}-{calibration.key()[:16]}"
    cached = floatgraph.cache_path(floatgraph.cache_dir(), sha, name)
    copy = floatgraph.cache_path(tmp_path, sha, name)
    for src, dst in ((cached, copy), (cached.with_suffix(".sha256"), copy.with_suffix(".sha256"))):
        shutil.copyfile(src, dst)

    def no_source() -> bytes:
        raise AssertionError("the cached graph should have been used")

    assert floatgraph.graph_bytes(floatgraph.STATIC, no_source, sha, str(tmp_path), calibration) == (static, digest)
    copy.write_bytes(static[: len(static) // 2])
    rebuilt, rebuilt_digest = floatgraph.graph_bytes(
        floatgraph.STATIC, load_model_bytes, sha, str(tmp_path), calibration
    )
    assert hashlib.sha256(copy.read_bytes()).hexdigest() == rebuilt_digest == hashlib.sha256(rebuilt).hexdigest()
    assert copy.with_suffix(".sha256").read_text().split()[0] == rebuilt_digest
    assert "QuantizeLinear" in {n.op_type for n in onnx.load_from_string(rebuilt).graph.node}


def test_an_unknown_precision_is_refused_at_start_in_one_line(tmp_path: Path) -> None:
    line = refused_at_start(tmp_path, "embedded_precision=int4")
    assert "embedded_precision must be one of int8, fp32, fp16, int8-static, not 'int4'" in line
    from gateway.config import Settings
    from gateway.engines.embedded import EmbeddedEngine

    with pytest.raises(ValueError, match="int8-static is for the CPU"):
        EmbeddedEngine(Settings(embedded_precision="int8-static", embedded_provider="cuda"))
