"""Decoding through PyAV (ffmpeg), for tests, benchmarks and quality checks.

Not used on the serving path. Decoders do not trim an MP3 encoder's delay unless the stream
carries a LAME/Info tag, which a live stream cannot: expect ~1105 leading samples from LAME.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np

# the ffmpeg demuxer for each wire format (pcm needs none)
_DEMUXERS = {"mp3": "mp3", "wav": "wav", "opus": "webm", "ogg": "ogg", "aac": "aac", "flac": "flac"}


@dataclass(frozen=True, slots=True)
class DecodedAudio:
    samples: np.ndarray  # float32 mono in [-1, 1]
    sample_rate: int  # what the decoder produced (Opus always decodes at 48 kHz)

    @property
    def duration_s(self) -> float:
        return len(self.samples) / self.sample_rate


def decode_audio(data: bytes, fmt: str, *, sample_rate: int = 24000) -> DecodedAudio:
    """The whole stream ``data`` of wire format ``fmt`` as mono float samples.

    ``sample_rate`` is only needed for "pcm", which does not say its own rate.
    """
    if fmt == "pcm":
        pcm = np.frombuffer(data[: len(data) & ~1], dtype="<i2")
        return DecodedAudio(pcm.astype(np.float32) / 32768, sample_rate)
    if fmt not in _DEMUXERS:
        raise ValueError(f"cannot decode format {fmt!r}; one of pcm, {', '.join(_DEMUXERS)}")
    import av

    parts: list[np.ndarray] = []
    rate = 0
    with av.open(io.BytesIO(data), "r", format=_DEMUXERS[fmt]) as container:
        for frame in container.decode(audio=0):
            rate = frame.sample_rate
            parts.append(_mono_float(frame.to_ndarray(), frame.format.name))
    samples = np.concatenate(parts) if parts else np.zeros(0, np.float32)
    return DecodedAudio(samples, rate or sample_rate)


def _mono_float(array: np.ndarray, sample_format: str) -> np.ndarray:
    """One decoded frame (planar or packed, any of ffmpeg's sample formats) as mono float32."""
    if array.dtype == np.int16:
        array = array.astype(np.float32) / 32768
    elif array.dtype == np.int32:
        array = array.astype(np.float32) / 2147483648
    else:
        array = array.astype(np.float32)
    if array.ndim == 2 and array.shape[0] > 1:  # planar, several channels
        mono: np.ndarray = array.mean(axis=0)
        return mono
    return array.reshape(-1)


def decode_mp3(data: bytes) -> np.ndarray:
    """Mono float32 samples of a whole MP3 stream (any leading ID3 tag is fine)."""
    return decode_audio(data, "mp3").samples
