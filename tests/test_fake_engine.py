"""What the real-client tests (tests/clients/) rely on, in the main suite: the fake engine's gate
holds a segment back until a file exists, and OpenAI's voice names speak on an engine without
the mapped Kokoro voice (Pipecat sends no other names)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from gateway.engines.fake import fake_duration_s

from .conftest import fake_settings


async def test_gate_holds_the_marked_segment_until_its_file_exists(
    start_server, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    gate = tmp_path / "open"
    server = await start_server(fake_settings(fake_gate_word="Zebra", fake_gate_path=str(gate)))
    first, last = "One two three four five six.", "The Zebra speaks last."
    body = {"input": f"{first} {last}", "response_format": "pcm", "stream": True}
    async with http.post(server.url + "/v1/audio/speech", json=body) as r:
        assert r.status == 200
        head = await asyncio.wait_for(r.content.readexactly(4800), 10)  # audio while the gate is shut
        assert not gate.exists()
        gate.touch()
        audio = head + await r.read()
    assert len(audio) == round(fake_duration_s(first) * 24000) * 2 + round(fake_duration_s(last) * 24000) * 2


async def test_openai_voice_names_fall_back_to_the_engines_default(fake_server, http: aiohttp.ClientSession) -> None:
    for name in ("alloy", "ash"):
        async with http.post(
            fake_server.url + "/v1/audio/speech", json={"input": "One two.", "voice": name, "response_format": "pcm"}
        ) as r:
            assert r.status == 200 and r.headers["X-Voice"] == "tone_a"
            assert len(await r.read()) == round(fake_duration_s("One two.") * 24000) * 2
    async with http.post(fake_server.url + "/v1/audio/speech", json={"input": "One.", "voice": "nobody"}) as r:
        assert r.status == 400 and (await r.json())["error"]["code"] == "unknown_voice"
