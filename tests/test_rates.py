"""Sample rates and G.711: ``sample_rate`` on every route and channel, resampled with soxr (one
stream a reply, no click at a join), and ``ulaw``/``alaw`` for telephony. A sine engine's tone
goes through the real gateway on loopback and is decoded back: its length and its frequency."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest

from bench.client import sse_stream, ws_stream
from gateway.audio import g711
from gateway.audio.decode import decode_audio
from gateway.audio.resample import SAMPLE_RATES, Resampler
from gateway.engines.fake import FakeEngine, fake_duration_s
from gateway.kokoro.timestamps import WordTimes

from .conftest import fake_settings

SR = 24000
FREQ = 440.0
TEXT = "One two three four. Five six seven eight."
SENTENCES = ("One two three four.", "Five six seven eight.")
N = sum(round(fake_duration_s(s) * SR) for s in SENTENCES)  # samples the engine makes


class SineEngine(FakeEngine):
    """The fake engine making one steady 440 Hz sine (phase continuous across segments) for as
    long as its tones would last: a signal whose frequency and length can be checked anywhere."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.at = 0

    def render_timed(self, text: str, voice: str, speed: float) -> tuple[np.ndarray, WordTimes]:
        n = round(fake_duration_s(text, speed) * SR)
        t = (np.arange(n) + self.at) / SR
        self.at += n
        return (0.5 * 32767 * np.sin(2 * np.pi * FREQ * t)).astype(np.int16), WordTimes(())


def sine(n: int, rate: int, *, start: int = 0) -> np.ndarray:
    return 0.5 * 32767 * np.sin(2 * np.pi * FREQ * (np.arange(n) + start) / rate)


def peak_hz(samples: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples))))
    return float(np.argmax(spectrum) * rate / len(samples))


def decoded(audio: bytes, fmt: str, rate: int) -> tuple[np.ndarray, int]:
    """s16 samples as floats (full scale 32767) from ``fmt`` at ``rate``, and the rate they
    decode at (Opus: always 48 kHz; the rate it was made from is in its OpusHead)."""
    if fmt in g711.LAWS:
        return np.frombuffer(g711.decode(fmt, audio), "<i2").astype(float), rate
    if fmt == "pcm":
        return np.frombuffer(audio, "<i2").astype(float), rate
    out = decode_audio(audio, {"opus": "ogg"}.get(fmt, fmt))
    if fmt == "opus":
        head = audio.index(b"OpusHead")
        assert int.from_bytes(audio[head + 12 : head + 16], "little") == rate  # the input rate
    else:
        assert out.sample_rate == rate, (fmt, out.sample_rate, rate)
    return out.samples.astype(float) * 32767, out.sample_rate


# -- G.711 ----------------------------------------------------------------------------------


def _audioop() -> Any:
    with warnings.catch_warnings():  # deprecated since 3.11, removed in 3.13
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            import audioop
        except ImportError:
            return None
    return audioop


@pytest.mark.parametrize("law", g711.LAWS)
def test_g711_known_values_and_audioop_for_every_sample(law: str) -> None:
    # ITU-T G.711's ends and zero (μ-law: 0xFF is +0; A-law's even bits inverted: 0xD5 is +0)
    known = {
        "ulaw": {0: 0xFF, -1: 0x7E, 32767: 0x80, -32768: 0x00, 1000: 0xCE, -1000: 0x4E},
        "alaw": {0: 0xD5, -1: 0x55, 32767: 0xAA, -32768: 0x2A, 1000: 0xFA, -1000: 0x7A},
    }[law]
    pcm = np.array(list(known), "<i2").tobytes()
    assert list(g711.encode(law, pcm)) == list(known.values())
    back = {
        "ulaw": {0x80: 32124, 0x00: -32124, 0xFF: 0, 0x7F: 0},
        "alaw": {0xAA: 32256, 0x2A: -32256, 0xD5: 8, 0x55: -8},
    }[law]
    assert np.frombuffer(g711.decode(law, bytes(back)), "<i2").tolist() == list(back.values())
    if (audioop := _audioop()) is not None:
        every = np.arange(-32768, 32768, dtype="<i2").tobytes()
        assert g711.encode(law, every) == getattr(audioop, f"lin2{law}")(every, 2)
        assert g711.decode(law, bytes(range(256))) == getattr(audioop, f"{law}2lin")(bytes(range(256)), 2)


# -- the resampler --------------------------------------------------------------------------


@pytest.mark.parametrize("rate", [r for r in SAMPLE_RATES if r != SR])
def test_a_sine_through_many_small_chunks_has_no_click_at_any_join(rate: int) -> None:
    x = sine(SR, SR).astype("<i2").tobytes()  # one second
    rng = np.random.default_rng(rate)
    sizes = rng.integers(1, 160, size=2000)  # 1-159 samples a chunk: joins everywhere
    cuts = np.minimum(np.cumsum(np.concatenate([[0], sizes])) * 2, len(x))
    stream, fresh = Resampler(SR, rate), []
    out = []
    for a, b in zip(cuts[:-1], cuts[1:]):
        out.append(stream.push(x[a:b]))
        one = Resampler(SR, rate)  # what a resampler per chunk would do: a filter from silence
        fresh.append(one.push(x[a:b]) + one.flush())
    y = np.frombuffer(b"".join(out) + stream.flush(), "<i2").astype(float)
    assert len(y) == rate  # exactly one second at the new rate
    ideal = sine(rate, rate)
    edge = rate // 100  # the filter's own ramp at the very start and end of the signal
    err = np.abs(y - ideal)[edge:-edge]
    assert err.max() < 0.002 * 32767, err.max()  # no join stands out from the sine
    naive = np.frombuffer(b"".join(fresh), "<i2").astype(float)
    n = min(len(naive), len(ideal))
    assert np.abs(naive[:n] - ideal[:n])[edge:-edge].max() > 0.05 * 32767  # it would click


# -- the routes -----------------------------------------------------------------------------

FORMAT_RATES = (
    [("pcm", r) for r in SAMPLE_RATES]
    + [("wav", r) for r in SAMPLE_RATES]
    + [("mp3", r) for r in SAMPLE_RATES]
    + [("ulaw", 8000), ("alaw", 8000), ("ulaw", 16000)]
    + [("opus", 16000), ("opus", 48000), ("aac", 16000), ("flac", 44100)]
)


@pytest.mark.parametrize("fmt,rate", FORMAT_RATES)
@pytest.mark.parametrize("stream", [True, False])
async def test_every_rate_and_law_round_trips(
    start_server, http: aiohttp.ClientSession, fmt: str, rate: int, stream: bool
) -> None:
    server = await start_server(fake_settings(), engine=SineEngine(fake_settings()))
    body = {"input": TEXT, "voice": "tone_a", "response_format": fmt, "sample_rate": rate, "stream": stream}
    async with http.post(server.url + "/v1/audio/speech", json=body) as r:
        assert r.status == 200, await r.text()
        assert r.headers["X-Sample-Rate"] == str(rate)
        audio = await r.read()
    y, rate = decoded(audio, fmt, rate)
    expected = round(N * rate / SR)
    if fmt in ("pcm", "ulaw", "alaw") or (fmt in ("wav", "flac") and not stream):
        assert len(y) == expected
    elif fmt == "mp3" and not stream:  # the Info frame's delay and padding: gapless
        assert abs(len(y) - expected) <= 1
    else:  # a codec's own padding (MP3: its 1,105-sample lead-in, 1-2 frames), or a streamed
        # WAV's header that cannot say where it ends
        slack = 1105 + 2 * 1152 if fmt == "mp3" else rate // 10
        assert expected <= len(y) < expected + slack or fmt == "wav", (len(y), expected)
    assert abs(peak_hz(y, rate) - FREQ) < 2.0 * rate / len(y) + 1, peak_hz(y, rate)
    if fmt in ("pcm", "wav", "ulaw", "alaw", "flac"):  # lossless but for G.711's steps
        body_ = y[-expected:] if fmt == "wav" and stream else y
        tol = 0.03 if fmt in g711.LAWS else 0.002
        edge = rate // 50
        assert np.abs(body_ - sine(expected, rate))[edge:-edge].max() < tol * 32767


async def test_g711_defaults_to_8000_and_says_so(start_server, http: aiohttp.ClientSession) -> None:
    server = await start_server(fake_settings(), engine=SineEngine(fake_settings()))
    for law, ctype in (("ulaw", "audio/PCMU;rate=8000"), ("alaw", "audio/PCMA;rate=8000")):
        async with http.post(server.url + "/v1/audio/speech", json={"input": TEXT, "response_format": law}) as r:
            assert r.headers["Content-Type"] == ctype
            assert len(await r.read()) == round(N * 8000 / SR)  # a byte a sample at 8 kHz


async def test_channels_resample_and_keep_word_times_in_ms(start_server, http: aiohttp.ClientSession) -> None:
    server = await start_server()  # the plain fake engine: word times
    runs = {}
    for fmt, rate in (("pcm", 24000), ("pcm", 8000), ("ulaw", 8000), ("mp3", 48000), ("mp3", 24000)):
        result = await ws_stream(
            http, server.ws_url, text=TEXT, options={"format": fmt, "sample_rate": rate, "voice": "tone_a"}
        )
        assert result.done is not None, result.events
        assert result.of("ready")[0]["sample_rate"] == rate
        runs[fmt, rate] = result
    width = {"pcm": 2, "ulaw": 1}
    for (fmt, rate), result in runs.items():
        if fmt in width:
            assert len(result.audio) == round(N * rate / SR) * width[fmt]
    words = {key: [w for e in r.of("words") for w in e["words"]] for key, r in runs.items()}
    assert words["pcm", 8000] == words["ulaw", 8000] == words["pcm", 24000]  # ms, at any rate
    # MP3's lead-in (1,105 samples at its own rate) moves every word by 46 ms at 24 kHz, 23 at 48
    for key, lead in ((("mp3", 24000), 46.0), (("mp3", 48000), 23.0)):
        shifts = [m["start_ms"] - p["start_ms"] for m, p in zip(words[key], words["pcm", 24000])]
        assert shifts and all(abs(s - lead) <= 1 for s in shifts), (key, shifts)
    sse = await sse_stream(http, server.url + "/v1/stream/sse", text=TEXT, format="alaw", sample_rate=16000)
    assert sse.done is not None and sse.of("ready")[0]["sample_rate"] == 16000
    assert len(sse.audio) == round(N * 16000 / SR)


def test_synth_writes_any_rate_and_refuses_a_bad_one(tmp_path: Path) -> None:
    out = tmp_path / "reply.ulaw"
    cmd = [sys.executable, "run_gateway.py", "synth", TEXT, "-o", str(out), "--engine", "fake"]
    # both at once: each is mostly an interpreter starting and importing the gateway
    good, bad = (
        subprocess.Popen([*cmd, "--sample-rate", rate], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for rate in ("16000", "11025")
    )
    _, stderr = good.communicate(timeout=120)
    assert good.returncode == 0, stderr
    assert out.stat().st_size == round(N * 16000 / SR)  # a byte a sample
    _, stderr = bad.communicate(timeout=120)
    assert bad.returncode == 1 and "sample_rate must be one of 8000" in stderr and "Traceback" not in stderr
