"""Home Assistant's Wyoming protocol: ``run_gateway.py wyoming`` in a subprocess on the fake
engine, driven by the ``wyoming`` package's own client (``AsyncTcpClient``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.event import Event
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeStopped, SynthesizeVoice

from bench.procs import ServerProcess
from gateway.engines.fake import FakeEngine, fake_duration_s

from .conftest import fake_settings

RATE = 24000
FIRST, SECOND = "Good evening, the lights are off.", "The front door is locked."


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    with ServerProcess("wyoming", "--engine", "fake", settings=["speed_warmup_text="]) as server:
        yield server.port


@pytest.fixture
async def client(port: int) -> AsyncIterator[AsyncTcpClient]:
    async with AsyncTcpClient("127.0.0.1", port) as c:
        yield c


async def read(client: AsyncTcpClient) -> Event:
    event = await client.read_event()
    assert event is not None, "the server closed the connection"
    return event


async def audio_run(client: AsyncTcpClient) -> bytes:
    """One ``audio-start``, its chunks and ``audio-stop``: the PCM they carried."""
    start = await read(client)
    assert AudioStart.is_type(start.type), start
    fmt = AudioStart.from_event(start)
    assert (fmt.rate, fmt.width, fmt.channels) == (RATE, 2, 1)
    pcm = b""
    while AudioChunk.is_type((event := await read(client)).type):
        pcm += AudioChunk.from_event(event).audio
    assert AudioStop.is_type(event.type), event
    return pcm


def samples(*texts: str) -> int:
    return sum(round(fake_duration_s(t) * RATE) for t in texts)


async def test_describe_lists_every_voice_and_language(client: AsyncTcpClient) -> None:
    await client.write_event(Describe().event())
    info = Info.from_event(await read(client))
    (program,) = info.tts
    assert program.supports_synthesize_streaming is True and program.installed
    assert {v.name: v.languages for v in program.voices} == {"tone_a": ["en-US"], "tone_b": ["en-US"]}


@pytest.mark.parametrize(
    "voice,expected",
    [
        (None, "tone_a"),
        (SynthesizeVoice(name="tone_b"), "tone_b"),
        (SynthesizeVoice(language="en_US"), "tone_a"),
        (SynthesizeVoice(language="en"), "tone_a"),
    ],
)
async def test_synthesize_streams_the_reply_as_pcm(
    client: AsyncTcpClient, voice: SynthesizeVoice | None, expected: str
) -> None:
    await client.write_event(Synthesize(text=f"{FIRST} {SECOND}", voice=voice).event())
    pcm = await audio_run(client)
    assert len(pcm) == samples(FIRST, SECOND) * 2
    # the fake engine's tones, word by word in the voice chosen: the very samples
    assert pcm == FakeEngine(fake_settings()).render(f"{FIRST} {SECOND}", expected, 1.0).tobytes()


async def test_streaming_text_speaks_a_sentence_before_the_text_ends(client: AsyncTcpClient) -> None:
    await client.write_event(SynthesizeStart(voice=SynthesizeVoice(name="tone_a")).event())
    for word in FIRST.split():
        await client.write_event(SynthesizeChunk(text=word + " ").event())
    # the first sentence is complete: its audio comes while the text is still open
    start = await read(client)
    assert AudioStart.is_type(start.type), start
    first = await read(client)
    assert AudioChunk.is_type(first.type) and AudioChunk.from_event(first).audio
    for word in SECOND.split():
        await client.write_event(SynthesizeChunk(text=word + " ").event())
    await client.write_event(Synthesize(text=f"{FIRST} {SECOND}").event())  # sent for old servers: ignored
    await client.write_event(SynthesizeStop().event())
    pcm = AudioChunk.from_event(first).audio
    while AudioChunk.is_type((event := await read(client)).type):
        pcm += AudioChunk.from_event(event).audio
    assert AudioStop.is_type(event.type), event
    assert SynthesizeStopped.is_type((await read(client)).type)
    assert len(pcm) == samples(FIRST, SECOND) * 2


@pytest.mark.parametrize(
    "voice,code",
    [(SynthesizeVoice(name="nobody"), "unknown_voice"), (SynthesizeVoice(language="xx"), "unknown_language")],
)
async def test_a_bad_voice_is_an_error_and_the_connection_goes_on(
    client: AsyncTcpClient, voice: SynthesizeVoice, code: str
) -> None:
    await client.write_event(Synthesize(text=FIRST, voice=voice).event())
    error = Error.from_event(await read(client))
    assert error.code == code and ("tone_a" in error.text or "en-US" in error.text)  # says what is valid
    # a stream that starts with a bad voice: one error, then its stop is answered
    await client.write_event(SynthesizeStart(voice=voice).event())
    await client.write_event(SynthesizeChunk(text=FIRST).event())
    await client.write_event(SynthesizeStop().event())
    assert Error.from_event(await read(client)).code == code
    assert SynthesizeStopped.is_type((await read(client)).type)
    await client.write_event(Synthesize(text=SECOND).event())
    assert len(await audio_run(client)) == samples(SECOND) * 2


async def test_nothing_to_speak_and_a_stray_chunk_are_errors(client: AsyncTcpClient, port: int) -> None:
    await client.write_event(Synthesize(text="...").event())
    assert Error.from_event(await read(client)).code == "nothing_to_speak"
    await client.write_event(SynthesizeChunk(text="Hello.").event())
    assert Error.from_event(await read(client)).code == "no_stream"
    async with AsyncTcpClient("127.0.0.1", port) as other:  # the server still serves others
        await other.write_event(Synthesize(text=FIRST).event())
        assert len(await audio_run(other)) == samples(FIRST) * 2
