"""OpenAI's other response formats through PyAV (ffmpeg): Ogg Opus, AAC in ADTS, FLAC.

``ContainerEncoder`` follows the ``Encoder`` protocol (``encode`` returns what the muxer has
written so far, ``flush`` ends the stream), so ``POST /v1/audio/speech`` can stream these per
sentence as well as return them whole. Streamed, the output cannot be rewound: FLAC's
STREAMINFO then leaves the total length unset, which FLAC allows; whole (``encode_whole``) it
is written into a seekable buffer and carries it.
"""

from __future__ import annotations

import io

import numpy as np

# response_format -> (ffmpeg muxer, codec, content type, bitrate applies)
CONTAINERS: dict[str, tuple[str, str, str, bool]] = {
    "ogg": ("ogg", "libopus", "audio/ogg", True),  # OpenAI's "opus": Opus in Ogg
    "aac": ("adts", "aac", "audio/aac", True),
    "flac": ("flac", "flac", "audio/flac", False),
}


class _Sink:
    """A write-only file for the muxer: what it writes is taken after each call."""

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> int:
        self.data += data
        return len(data)

    def take(self) -> bytes:
        out = bytes(self.data)
        self.data.clear()
        return out


class ContainerEncoder:
    """One utterance of s16le mono PCM into ``fmt`` (``ogg``, ``aac`` or ``flac``)."""

    delay_samples = 0  # whole files for batch replies, which carry no word times

    def __init__(self, fmt: str, *, sample_rate: int = 24000, bitrate: int = 64, seekable: bool = False) -> None:
        import av  # heavy: only requests for these formats pay for it

        if fmt not in CONTAINERS:
            raise ValueError(f"unknown container format {fmt!r}; one of {', '.join(CONTAINERS)}")
        muxer, codec, self.content_type, has_bitrate = CONTAINERS[fmt]
        self.format, self.sample_rate, self.bitrate = fmt, sample_rate, bitrate
        self._av = av
        self._out: io.BytesIO | _Sink = io.BytesIO() if seekable else _Sink()
        # Ogg pages of at most 100 ms (ffmpeg's default is 1 s), so a streamed sentence leaves soon
        options = {"page_duration": "100000"} if muxer == "ogg" else {}
        self._container = av.open(self._out, "w", format=muxer, options=options)
        stream = self._container.add_stream(codec, rate=sample_rate, layout="mono")
        if not isinstance(stream, av.AudioStream):  # CONTAINERS names audio codecs only
            raise TypeError(f"{codec} is not an audio codec")
        self._stream = stream
        if has_bitrate:
            self._stream.bit_rate = bitrate * 1000
        self._pts = 0
        self._odd = b""
        self._closed = False

    def _taken(self) -> bytes:
        if isinstance(self._out, _Sink):
            return self._out.take()
        return b""  # seekable: all at the end, once the muxer has rewritten its headers

    def encode(self, pcm: bytes) -> bytes:
        if self._closed:
            raise RuntimeError("encoder already flushed: use one encoder per utterance")
        data = self._odd + bytes(pcm)
        cut = len(data) & ~1
        data, self._odd = data[:cut], data[cut:]
        if data:
            samples = np.frombuffer(data, "<i2").reshape(1, -1)
            frame = self._av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
            frame.sample_rate, frame.pts = self.sample_rate, self._pts
            self._pts += samples.shape[1]
            for packet in self._stream.encode(frame):
                self._container.mux(packet)
        return self._taken()

    def flush(self) -> bytes:
        if self._closed:
            return b""
        self._closed = True
        for packet in self._stream.encode(None):
            self._container.mux(packet)
        self._container.close()
        if isinstance(self._out, io.BytesIO):
            return self._out.getvalue()
        return self._out.take()


def encode_whole(fmt: str, pcm: bytes, *, sample_rate: int = 24000, bitrate: int = 64) -> bytes:
    """A whole utterance at once, with complete headers (FLAC's length and MD5)."""
    encoder = ContainerEncoder(fmt, sample_rate=sample_rate, bitrate=bitrate, seekable=True)
    encoder.encode(pcm)
    return encoder.flush()
