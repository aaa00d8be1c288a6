"""Sample-rate conversion for a reply: the engine's rate (24 kHz) -> the rate a client asked for.

One ``soxr.ResampleStream`` per reply, like one encoder per reply: its filter state carries
across chunks and segments, so a join is as smooth as the middle of a chunk (a fresh resampler
per chunk would start each from silence and click). soxr removes its own filter delay: output
sample n is input time n / out_rate, and it holds back a few ms of output until the next
chunk, or the end (``flush``).
"""

from __future__ import annotations

import numpy as np

from .encoders import Encoder, make_encoder

SAMPLE_RATES = (8000, 16000, 22050, 24000, 44100, 48000)


class Resampler:
    """s16le mono at ``in_rate`` -> s16le mono at ``out_rate``, streaming."""

    def __init__(self, in_rate: int, out_rate: int) -> None:
        import soxr  # only replies at another rate pay for it

        self.in_rate, self.out_rate = in_rate, out_rate
        self._stream = soxr.ResampleStream(in_rate, out_rate, 1, dtype="int16")
        self._odd = b""

    def push(self, pcm: bytes) -> bytes:
        data = self._odd + bytes(pcm)
        cut = len(data) & ~1
        data, self._odd = data[:cut], data[cut:]
        if not data:
            return b""
        return _s16(self._stream.resample_chunk(np.frombuffer(data, "<i2")))

    def flush(self) -> bytes:
        """The samples still held in the filter: the end of the reply."""
        return _s16(self._stream.resample_chunk(np.zeros(0, np.int16), last=True))


def _s16(samples: np.ndarray) -> bytes:
    return samples.astype("<i2").tobytes()


class ResamplingEncoder:
    """An ``Encoder`` at ``inner.sample_rate`` fed PCM at ``in_rate``: what goes in is
    resampled first. ``delay_samples`` is counted at ``in_rate``, the pipeline's timeline."""

    def __init__(self, inner: Encoder, in_rate: int) -> None:
        self.inner = inner
        self.format, self.content_type = inner.format, inner.content_type
        self.sample_rate, self.bitrate = inner.sample_rate, inner.bitrate
        self.delay_samples = inner.delay_samples * in_rate / inner.sample_rate
        self._resampler = Resampler(in_rate, inner.sample_rate)

    def encode(self, pcm: bytes) -> bytes:
        return self.inner.encode(self._resampler.push(pcm))

    def flush(self) -> bytes:
        return self.inner.encode(self._resampler.flush()) + self.inner.flush()


def at_rate(encoder: Encoder, in_rate: int) -> Encoder:
    """``encoder`` fed at ``in_rate``: itself when the rates agree, else through a resampler."""
    return encoder if encoder.sample_rate == in_rate else ResamplingEncoder(encoder, in_rate)


def reply_encoder(fmt: str, *, in_rate: int, out_rate: int, bitrate: int = 64) -> Encoder:
    """One reply's encoder for ``fmt`` at ``out_rate``, fed the engine's PCM at ``in_rate``."""
    return at_rate(make_encoder(fmt, sample_rate=out_rate, bitrate=bitrate), in_rate)
