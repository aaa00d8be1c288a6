"""MPEG audio frame parsing and alignment: the basis of frame-aligned MP3 payloads.

Every audio payload the gateway sends holds whole MPEG frames only, so a client can hand any
payload to a decoder. Encoders (lameenc in particular) return bytes that end mid-frame, and no
library aligns a byte stream to frames, so this module parses frame headers itself.

The parser is strict: it walks from frame to frame by header length and refuses anything that
is not a frame, rather than resynchronising past junk, because silently dropping bytes would
drop audio. A stream also keeps one version, layer, sample rate and channel count throughout.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

log = logging.getLogger(__name__)

_VERSIONS = {0b00: "2.5", 0b10: "2", 0b11: "1"}  # 0b01 is reserved
_LAYERS = {0b01: 3, 0b10: 2, 0b11: 1}  # 0b00 is reserved
_SAMPLE_RATES = {
    "1": (44100, 48000, 32000),
    "2": (22050, 24000, 16000),
    "2.5": (11025, 12000, 8000),
}
# kbps by bitrate index 1..14 (0 = free format and 15 = bad are refused)
_V1_BITRATES = {
    1: (32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448),
    2: (32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384),
    3: (32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
}
_V2_BITRATES = {
    1: (32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256),
    2: (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
    3: (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}
HEADER_SIZE = 4


class Mp3FormatError(ValueError):
    """The bytes are not a sequence of whole MPEG audio frames."""


@dataclass(frozen=True, slots=True)
class FrameHeader:
    version: str  # "1", "2" or "2.5" (MPEG-2.5: the unofficial 8-12 kHz extension)
    layer: int  # 1, 2 or 3
    bitrate_kbps: int
    sample_rate: int
    padding: bool
    channels: int  # 1 (mono) or 2
    length: int  # bytes in the whole frame, header included
    samples: int  # samples per channel the frame decodes to
    protected: bool = False  # a 16-bit CRC follows the header

    @property
    def duration_s(self) -> float:
        return self.samples / self.sample_rate

    def same_stream(self, other: FrameHeader) -> bool:
        """True when ``other`` can follow this frame in one stream (bitrate may vary: VBR)."""
        return (self.version, self.layer, self.sample_rate, self.channels) == (
            other.version,
            other.layer,
            other.sample_rate,
            other.channels,
        )


def parse_header(data: bytes | bytearray | memoryview, offset: int = 0) -> FrameHeader | None:
    """The frame header at ``offset``, or None if there is no valid header there."""
    if offset < 0 or len(data) - offset < HEADER_SIZE:
        return None
    word = int.from_bytes(data[offset : offset + HEADER_SIZE], "big")
    if word >> 21 != 0x7FF:
        return None
    version = _VERSIONS.get((word >> 19) & 0b11)
    layer = _LAYERS.get((word >> 17) & 0b11)
    bitrate_index = (word >> 12) & 0b1111
    rate_index = (word >> 10) & 0b11
    if version is None or layer is None or bitrate_index in (0, 15) or rate_index == 3:
        return None
    if word & 0b11 == 0b10:  # reserved emphasis: a false sync, not a frame
        return None
    table = _V1_BITRATES if version == "1" else _V2_BITRATES
    bitrate = table[layer][bitrate_index - 1]
    sample_rate = _SAMPLE_RATES[version][rate_index]
    padding = bool((word >> 9) & 1)
    if layer == 1:
        length = (12 * bitrate * 1000 // sample_rate + padding) * 4
        samples = 384
    else:
        per_kbps = 72 if layer == 3 and version != "1" else 144
        length = per_kbps * bitrate * 1000 // sample_rate + padding
        samples = 576 if layer == 3 and version != "1" else 1152
    return FrameHeader(
        version=version,
        layer=layer,
        bitrate_kbps=bitrate,
        sample_rate=sample_rate,
        padding=padding,
        channels=1 if (word >> 6) & 0b11 == 0b11 else 2,
        length=length,
        samples=samples,
        protected=not (word >> 16) & 1,
    )


def id3v2_size(data: bytes | bytearray) -> int | None:
    """Bytes taken by a leading ID3v2 tag: 0 if none, None if ``data`` is too short to say."""
    if len(data) < 3:
        could_be_tag = bool(data) and b"ID3".startswith(bytes(data))
        return None if could_be_tag else 0
    if data[:3] != b"ID3":
        return 0
    if len(data) < 10:
        return None
    size = 0
    for byte in data[6:10]:  # "syncsafe": 7 bits a byte
        size = (size << 7) | (byte & 0x7F)
    footer = 10 if data[5] & 0x10 else 0
    return 10 + size + footer


def _walk(
    data: bytes | bytearray, start: int, first: FrameHeader | None, partial_ok: bool
) -> Iterator[tuple[int, FrameHeader]]:
    """Frames from ``start``; a trailing partial frame is left alone if ``partial_ok``."""
    pos, end = start, len(data)
    while pos < end:
        header = parse_header(data, pos)
        if header is None:
            if partial_ok and end - pos < HEADER_SIZE and data[pos] == 0xFF:
                return  # the first bytes of a header; the rest is still to come
            raise Mp3FormatError(f"no MPEG frame header at byte {pos}")
        if first is not None and not first.same_stream(header):
            raise Mp3FormatError(f"the stream changes format at byte {pos}: {header}")
        first = first or header
        if pos + header.length > end:
            if partial_ok:
                return
            raise Mp3FormatError(f"frame at byte {pos} needs {header.length} bytes, {end - pos} left")
        yield pos, header
        pos += header.length


def iter_frames(data: bytes | bytearray) -> Iterator[tuple[int, FrameHeader]]:
    """(offset, header) of every frame; raises Mp3FormatError unless all are whole frames.

    A leading ID3v2 tag (as ffmpeg's muxer writes) is skipped; nothing else is tolerated.
    """
    skip = id3v2_size(data)
    if skip is None or skip > len(data):
        raise Mp3FormatError("truncated ID3v2 tag")
    yield from _walk(data, skip, None, partial_ok=False)


def is_whole_frames(data: bytes | bytearray) -> bool:
    """True when ``data`` starts at a frame sync and every byte belongs to a complete frame.

    No ID3 tag is allowed here: this is the check for a payload on the wire. Empty data is
    trivially whole.
    """
    try:
        for _ in _walk(data, 0, None, partial_ok=False):
            pass
    except Mp3FormatError:
        return False
    return True


def count_frames(data: bytes | bytearray) -> int:
    """Number of whole frames in ``data`` (which must be whole frames, see iter_frames)."""
    return sum(1 for _ in iter_frames(data))


def split_frames(data: bytes | bytearray, frames_per_payload: int) -> list[bytes]:
    """``data`` (whole frames, no tag) cut into payloads of at most ``frames_per_payload`` frames.

    The frames are spread evenly (9 frames at 8 a payload give 5 + 4, not 8 + 1): Chromium's
    decodeAudioData refuses a lone one-frame payload, so no payload is left that small when
    there are frames enough to avoid it.
    """
    if frames_per_payload < 1:
        raise ValueError(f"frames_per_payload must be at least 1, got {frames_per_payload}")
    offsets = [pos for pos, _ in _walk(data, 0, None, partial_ok=False)]
    groups = -(-len(offsets) // frames_per_payload)
    base, extra = divmod(len(offsets), groups) if groups else (0, 0)
    starts, at = [], 0
    for g in range(groups):
        starts.append(offsets[at])
        at += base + (1 if g < extra else 0)
    cuts = starts + [len(data)]
    return [bytes(data[a:b]) for a, b in zip(cuts, cuts[1:])]


def info_tag(frame: bytes | bytearray) -> str | None:
    """The tag ("Xing", "Info" or "VBRI") when ``frame`` is a metadata frame, else None.

    Encoders that can seek back write such a first frame (encoder delay, frame count); it
    parses and decodes as a frame of silence, so it is harmless in a stream.
    """
    header = parse_header(frame)
    if header is None or header.layer != 3:
        return None
    side_info = (32 if header.channels == 2 else 17) if header.version == "1" else (17 if header.channels == 2 else 9)
    at = HEADER_SIZE + (2 if header.protected else 0) + side_info
    if frame[at : at + 4] in (b"Xing", b"Info"):
        return bytes(frame[at : at + 4]).decode()
    if frame[HEADER_SIZE + 32 : HEADER_SIZE + 36] == b"VBRI":
        return "VBRI"
    return None


class FrameAligner:
    """Turns an MP3 byte stream cut anywhere into chunks of whole frames.

    ``feed`` returns every frame completed so far at once (never holds one back: time to
    first audio depends on it) and keeps the partial tail. A leading ID3v2 tag is dropped.
    Raises Mp3FormatError on bytes that are not frames instead of skipping them.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._at_start = True
        self._first: FrameHeader | None = None
        self.frames = 0  # whole frames returned so far

    @property
    def pending(self) -> int:
        """Bytes held back: always less than one whole frame."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray) -> bytes:
        self._buf += data
        if self._at_start and self._buf:
            skip = id3v2_size(self._buf)
            if skip is None or skip > len(self._buf):
                return b""
            del self._buf[:skip]
            self._at_start = False
        end = 0
        for pos, header in _walk(self._buf, 0, self._first, partial_ok=True):
            self._first = self._first or header
            end = pos + header.length
            self.frames += 1
        out = bytes(self._buf[:end])
        del self._buf[:end]
        return out

    def flush(self) -> bytes:
        """What is left: empty for a well-formed stream, else a partial frame (logged)."""
        rest = bytes(self._buf)
        self._buf.clear()
        if rest:
            log.warning("MP3 stream ended mid-frame: %d bytes left over", len(rest))
        return rest


def mp3_bitrates(sample_rate: int) -> tuple[int, ...]:
    """Layer III bitrates (kbps) valid at ``sample_rate``, as LAME accepts them."""
    for version, rates in _SAMPLE_RATES.items():
        if sample_rate in rates:
            table = (_V1_BITRATES if version == "1" else _V2_BITRATES)[3]
            # LAME caps MPEG-2.5 (8-12 kHz) at 64 kbps and would silently lower a higher one
            return tuple(b for b in table if version != "2.5" or b <= 64)
    raise ValueError(
        f"MP3 cannot carry {sample_rate} Hz; use one of {sorted(r for rates in _SAMPLE_RATES.values() for r in rates)}"
    )
