"""Micro-batching on the torch engine, on a random-weight model on CPU (as in
``test_kokoro_engine``): pieces of different sessions in one forward pass give each session
exactly the audio and word times it gets alone; a session that leaves while its piece waits,
or a batch that fails, touches nobody else.

The model's duration head is set so that every token lasts 2 frames at speed 1 (each of its
50 outputs at sigmoid 0.04): speeds 0.5 / 1 / 2 give 4 / 2 / 1 frames a token, far from any
rounding edge, so the items of a batch differ in length both in tokens and in frames.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from gateway.config import Settings, load_settings
from gateway.errors import EngineError
from gateway.kokoro.timestamps import WordTimes

from .test_kokoro_engine import hub_offline, write_model_folder  # noqa: F401  (hub_offline: autouse)

torch = pytest.importorskip("torch", reason="the kokoro engine needs the torch extra: pip install -e '.[torch]'")
pytest.importorskip("kokoro", reason="the kokoro engine needs the torch extra: pip install -e '.[torch]'")

from gateway.engines.kokoro import KokoroEngine  # noqa: E402

# the full-size Kokoro-82M (random weights) on torch, as in test_kokoro_engine: batching must
# give each session its own audio on the real architecture, so the model is not shrunk
pytestmark = pytest.mark.slow

# (text, voice, speed): lengths, voices (the folder's pack, two of the store's) and speeds differ
SESSIONS = [
    ("Hello.", "af_test", 0.5),
    ("Hello there, this is a longer sentence.", "af_heart", 1.0),
    ("Good morning to you.", "bf_emma", 2.0),
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("kokoro")
    write_model_folder(folder)
    state = torch.load(folder / "model.pth", weights_only=True)
    state["predictor"]["duration_proj.linear_layer.bias"].fill_(math.log(0.04 / 0.96))
    torch.save(state, folder / "model.pth")
    return folder


def kokoro_settings(folder: Path, max_batch: int) -> Settings:
    """A long window: a batch here closes when it is full or nobody else is on the way."""
    return load_settings(
        env={},
        overrides={
            "engine": "kokoro",
            "kokoro_dir": str(folder),
            "kokoro_device": "cpu",
            "kokoro_max_batch": max_batch,
            "kokoro_batch_window_ms": 60_000.0,
        },
    )


async def started(folder: Path, max_batch: int) -> KokoroEngine:
    engine = KokoroEngine(kokoro_settings(folder, max_batch))
    await engine.start()
    return engine


async def speak(engine: KokoroEngine, text: str, voice: str, speed: float) -> list[bytes | WordTimes]:
    return [x async for x in engine.synthesize(text, voice=voice, speed=speed, timestamps=True)]


def assert_same(got: list[bytes | WordTimes], alone: list[bytes | WordTimes]) -> None:
    """The same word times, and the same samples within 2 LSB of 16 bits (float rounding)."""
    assert [type(x) for x in got] == [type(x) for x in alone]
    for mine, theirs in zip(got, alone):
        if isinstance(mine, WordTimes):
            assert mine == theirs
        else:
            a, b = (np.frombuffer(x, "<i2").astype(np.int32) for x in (mine, theirs))  # type: ignore[arg-type]
            assert a.size == b.size and a.size > 0
            assert np.abs(a - b).max() <= 2


async def until(condition: Callable[[], bool]) -> None:
    for _ in range(6000):  # a guard against a hang, not a timing assertion
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition never held")


async def test_a_batch_gives_each_session_what_it_gets_alone(model_dir: Path, start_server, http) -> None:
    engine = await started(model_dir, 0)  # auto: CPU does not batch
    try:
        assert engine.batching == {"max_batch": 1} and engine.max_concurrency == 1
        alone = [await speak(engine, *session) for session in SESSIONS]  # KModel's own forward
    finally:
        await engine.aclose()
    engine = await started(model_dir, 3)
    try:
        assert engine.max_concurrency == 3
        together = await asyncio.gather(*(speak(engine, *session) for session in SESSIONS))
        stats = engine.batching
        # the warm-up alone, then the three sessions in one forward pass: two forward passes in all
        assert (stats["batches"], stats["segments"], stats["largest"], stats["dropped"]) == (2, 4, 3, 0)
        for got, expected in zip(together, alone):
            assert_same(got, expected)
        server = await start_server(kokoro_settings(model_dir, 3), engine)
        async with http.get(f"{server.url}/readyz") as resp:
            shown = (await resp.json())["batching"]  # the server's speed warm-up may have run since
            assert shown["max_batch"] == 3 and shown["largest"] == 3 and shown["segments"] >= 4
    finally:
        await engine.aclose()


async def test_a_session_leaving_while_its_piece_waits_disturbs_nobody(model_dir: Path) -> None:
    engine = await started(model_dir, 3)
    gate = threading.Event()
    try:
        assert engine._executor is not None
        engine._executor.submit(gate.wait)  # the device is busy with someone else's work
        first = asyncio.create_task(speak(engine, *SESSIONS[0]))
        await until(lambda: engine.batching["segments"] == 2)  # its batch of one waits for the device
        waiting = [asyncio.create_task(speak(engine, *s)) for s in (SESSIONS[1], SESSIONS[2], SESSIONS[0])]
        await until(lambda: engine.batching["waiting"] == 3)
        waiting[1].cancel()  # barge-in while its piece waits for the next batch
        gate.set()
        got = list(await asyncio.gather(first, waiting[0], waiting[2]))
        with pytest.raises(asyncio.CancelledError):
            await waiting[1]
        stats = engine.batching
        assert (stats["batches"], stats["segments"], stats["largest"], stats["dropped"]) == (3, 4, 2, 1)
        for session, together in zip((SESSIONS[0], SESSIONS[1], SESSIONS[0]), got):
            assert_same(together, await speak(engine, *session))  # each alone now: a batch of one
    finally:
        gate.set()
        await engine.aclose()


async def test_a_failed_batch_is_an_engine_error_for_every_session_in_it(model_dir: Path) -> None:
    engine = await started(model_dir, 3)
    try:
        assert engine._model is not None
        model = engine._model.model
        working = model.bert_encoder
        model.bert_encoder = torch.nn.Linear(3, 3)  # a broken model: every forward pass fails
        results = await asyncio.gather(*(speak(engine, *s) for s in SESSIONS), return_exceptions=True)
        for result in results:
            assert isinstance(result, EngineError) and result.code == "engine_error", result
            assert "a batch of 3 segments" in result.message
        assert len({id(r) for r in results}) == 3  # each session its own error
        model.bert_encoder = working
        audio = b"".join(x for x in await speak(engine, *SESSIONS[0]) if isinstance(x, bytes))
        assert len(audio) > 0  # the engine goes on serving
    finally:
        await engine.aclose()
