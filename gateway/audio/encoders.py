"""Streaming encoders from s16le mono PCM to the wire formats.

The stream core keeps ONE encoder per utterance (a whole reply of several sentences): MP3
encoders delay their output by about 1105 samples and pad the end, so a fresh encoder per
sentence leaves a ~55 ms hole at every join. Each ``encode`` returns what can be sent now
and holds nothing back that it could already emit; ``flush`` ends the utterance. After
``flush`` an encoder is spent: make a new one for the next utterance. Not thread-safe.
"""

from __future__ import annotations

import logging
import struct
from typing import TYPE_CHECKING, Any, Protocol

import lameenc
import numpy as np

from . import g711, webm
from .mp3 import FrameAligner, Mp3FormatError, mp3_bitrates

if TYPE_CHECKING:
    import av

log = logging.getLogger(__name__)

FORMATS: tuple[str, ...] = ("mp3", "pcm", "wav", "opus", "ulaw", "alaw")
CONTENT_TYPES: dict[str, str] = {
    "mp3": "audio/mpeg",
    "pcm": "audio/pcm",  # s16le mono at the stream's sample_rate (24000 for Kokoro)
    "wav": "audio/wav",
    "opus": "audio/webm;codecs=opus",
    "ulaw": "audio/PCMU",  # G.711 (RFC 4856), one byte a sample, no header
    "alaw": "audio/PCMA",
}
#: LAME's algorithm quality (2 best .. 7 fastest). Measured on 20 s of speech, 24 kHz,
#: 64 kbps, per core: q2 190x real time, PESQ-WB 3.82; q5 317x, 3.93; q7 583x, 4.05. q7 is
#: fastest but falls to 2.79 at 32 kbps (q5 3.25), so q5 is the setting that holds up.
MP3_QUALITY = 5
OPUS_SAMPLE_RATES = (8000, 12000, 16000, 24000, 48000)
_STREAMING_SIZE = 0xFFFFFFFF  # WAV sizes when the length is not known yet


class Encoder(Protocol):
    content_type: str
    format: str
    sample_rate: int
    bitrate: int  # kbps (for pcm and wav: the raw PCM rate)

    @property
    def delay_samples(self) -> float:
        """Samples a player hears before the first one encoded (the codec's lead-in it keeps); a
        resampling encoder counts them at its input rate, in fractions."""
        ...

    def encode(self, pcm: bytes) -> bytes:
        """s16le mono in; out: bytes ready to send now (mp3: whole frames only)."""
        ...

    def flush(self) -> bytes:
        """End of utterance: everything left (mp3: whole frames)."""
        ...


class _Samples:
    """Keeps PCM whole samples: an engine may cut a chunk between the two bytes of one."""

    def __init__(self) -> None:
        self._odd = b""
        self.flushed = False

    def take(self, pcm: bytes | bytearray | memoryview) -> bytes:
        if self.flushed:
            raise RuntimeError("encoder already flushed: use one encoder per utterance")
        if not self._odd and len(pcm) % 2 == 0:
            return bytes(pcm)
        data = self._odd + bytes(pcm)
        cut = len(data) & ~1
        self._odd = data[cut:]
        return data[:cut]

    def finish(self) -> bool:
        """Marks the end; False if it was already flushed (flush is idempotent)."""
        if self.flushed:
            return False
        if self._odd:
            log.warning("PCM ended with half a sample; dropped one byte")
        self.flushed = True
        return True


class Mp3Encoder:
    """CBR MP3 through lameenc (the fastest LAME binding), aligned to whole frames."""

    content_type = CONTENT_TYPES["mp3"]
    format = "mp3"
    # LAME's 576 samples and the decoder's 529: a live stream has no Info tag to trim them with,
    # so players play them first (PyAV: a click encoded at sample 6,000 decodes at 7,107)
    delay_samples = 1105

    def __init__(self, *, sample_rate: int = 24000, bitrate: int = 64, quality: int = MP3_QUALITY) -> None:
        if bitrate not in mp3_bitrates(sample_rate):
            raise ValueError(
                f"MP3 at {sample_rate} Hz takes a bitrate in {mp3_bitrates(sample_rate)} kbps, not {bitrate}"
            )
        self.sample_rate, self.bitrate = sample_rate, bitrate
        self._lame = lameenc.Encoder()
        self._lame.set_bit_rate(bitrate)
        self._lame.set_in_sample_rate(sample_rate)
        # LAME would otherwise resample to 16 kHz at low bitrates, behind the client's back
        self._lame.set_out_sample_rate(sample_rate)
        self._lame.set_channels(1)
        self._lame.set_quality(quality)
        self._lame.silence()
        self._aligner = FrameAligner()
        self._samples = _Samples()
        self._started = False  # LAME refuses to flush a stream it never saw

    def encode(self, pcm: bytes) -> bytes:
        data = self._samples.take(pcm)
        if not data:
            return b""
        self._started = True
        return self._aligner.feed(self._lame.encode(data))

    def flush(self) -> bytes:
        if not self._samples.finish() or not self._started:
            return b""
        out = self._aligner.feed(self._lame.flush())
        if self._aligner.flush():
            raise Mp3FormatError("LAME ended its stream mid-frame")
        return out


class PcmEncoder:
    """Raw s16le passthrough, cut only between samples."""

    content_type = CONTENT_TYPES["pcm"]
    format = "pcm"
    delay_samples = 0

    def __init__(self, *, sample_rate: int = 24000) -> None:
        self.sample_rate = sample_rate
        self.bitrate = sample_rate * 16 // 1000
        self._samples = _Samples()

    def encode(self, pcm: bytes) -> bytes:
        return self._samples.take(pcm)

    def flush(self) -> bytes:
        self._samples.finish()
        return b""


def wav_header(sample_rate: int, data_bytes: int | None = None) -> bytes:
    """A 44-byte PCM WAV header; ``data_bytes=None`` gives the streaming form (max sizes)."""
    if data_bytes is None:
        riff_size = data_size = _STREAMING_SIZE
    else:
        riff_size, data_size = 36 + data_bytes, data_bytes
    fmt = struct.pack("<HHIIHH", 1, 1, sample_rate, sample_rate * 2, 2, 16)
    return (
        b"RIFF"
        + struct.pack("<I", riff_size)
        + b"WAVEfmt "
        + struct.pack("<I", len(fmt))
        + fmt
        + b"data"
        + struct.pack("<I", data_size)
    )


class WavEncoder(PcmEncoder):
    """Streaming WAV: a header with unknown (maximum) sizes first, then the PCM."""

    content_type = CONTENT_TYPES["wav"]
    format = "wav"

    def __init__(self, *, sample_rate: int = 24000) -> None:
        super().__init__(sample_rate=sample_rate)
        self._header_sent = False

    def _header(self) -> bytes:
        if self._header_sent:
            return b""
        self._header_sent = True
        return wav_header(self.sample_rate)

    def encode(self, pcm: bytes) -> bytes:
        return self._header() + super().encode(pcm)

    def flush(self) -> bytes:
        return self._header() + super().flush()


class OpusEncoder:
    """Opus (libopus through PyAV) in live WebM, one cluster per batch of packets."""

    content_type = CONTENT_TYPES["opus"]
    format = "opus"
    delay_samples = 0  # the pre-skip is in the header: decoders drop it (measured: 0)

    def __init__(self, *, sample_rate: int = 24000, bitrate: int = 64) -> None:
        import av  # heavy: only sessions that ask for Opus pay for it

        if sample_rate not in OPUS_SAMPLE_RATES:
            raise ValueError(f"Opus takes a sample rate in {OPUS_SAMPLE_RATES}, not {sample_rate}")
        if not 6 <= bitrate <= 256:
            raise ValueError(f"Opus bitrate must be 6..256 kbps, not {bitrate}")
        self.sample_rate, self.bitrate = sample_rate, bitrate
        self._av = av
        ctx = av.CodecContext.create("libopus", "w")
        ctx.sample_rate, ctx.layout, ctx.format = sample_rate, "mono", "s16"
        ctx.bit_rate = bitrate * 1000
        ctx.open()
        self._ctx = ctx
        head = ctx.extradata  # OpusHead, made by open()
        if head is None:
            raise RuntimeError("libopus gave no OpusHead")
        # OpusHead's pre-skip (at 48 kHz): the first packet starts this far before zero
        self._preskip_48k = int.from_bytes(head[10:12], "little")
        self._head: bytes | None = webm.header(
            bytes(head), channels=1, codec_delay_ns=self._preskip_48k * 1_000_000_000 // 48000
        )
        self._pts = 0
        self._samples = _Samples()

    def _blocks(self, packets: list[av.Packet[Any]]) -> bytes:
        offset = self._preskip_48k * self.sample_rate // 48000
        blocks = []
        for packet in packets:
            if packet.pts is None or packet.duration is None:
                raise RuntimeError("libopus gave a packet without its timing")
            start = packet.pts + offset  # in samples at sample_rate, from the stream's start
            padding = self._ctx.frame_size - packet.duration  # only the last packet is short
            blocks.append(
                webm.Block(
                    timestamp_ms=start * 1000 // self.sample_rate,
                    data=bytes(packet),
                    discard_ns=max(0, padding) * 1_000_000_000 // self.sample_rate,
                )
            )
        head, self._head = self._head or b"", None
        return head + webm.clusters(blocks)

    def encode(self, pcm: bytes) -> bytes:
        data = self._samples.take(pcm)
        if not data:
            return self._blocks([])
        samples = np.frombuffer(data, dtype="<i2").reshape(1, -1)
        frame = self._av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
        frame.sample_rate, frame.pts = self.sample_rate, self._pts
        self._pts += samples.shape[1]
        return self._blocks(self._ctx.encode(frame))

    def flush(self) -> bytes:
        if not self._samples.finish():
            return b""
        return self._blocks(self._ctx.encode(None))


def make_encoder(fmt: str, *, sample_rate: int = 24000, bitrate: int = 64) -> Encoder:
    """A fresh encoder for one utterance. ``bitrate`` (kbps) applies to mp3 and opus."""
    if fmt == "mp3":
        return Mp3Encoder(sample_rate=sample_rate, bitrate=bitrate)
    if fmt == "pcm":
        return PcmEncoder(sample_rate=sample_rate)
    if fmt == "wav":
        return WavEncoder(sample_rate=sample_rate)
    if fmt == "opus":
        return OpusEncoder(sample_rate=sample_rate, bitrate=bitrate)
    if fmt in g711.LAWS:
        return g711.G711Encoder(fmt, sample_rate=sample_rate)
    raise ValueError(f"unknown audio format {fmt!r}; choose one of {', '.join(FORMATS)}")


def encode_all(fmt: str, pcm: bytes, *, sample_rate: int = 24000, bitrate: int = 64) -> bytes:
    """A whole utterance at once (batch synthesis); WAV gets a header with the real sizes."""
    if fmt == "wav":
        data = PcmEncoder(sample_rate=sample_rate).encode(pcm)
        return wav_header(sample_rate, len(data)) + data
    encoder = make_encoder(fmt, sample_rate=sample_rate, bitrate=bitrate)
    return encoder.encode(pcm) + encoder.flush()
