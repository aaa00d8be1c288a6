"""A minimal live WebM writer for one Opus track.

ffmpeg's Matroska muxer (through PyAV) keeps the open cluster in memory until the next
packet arrives and cannot be told to flush it, so it always holds back the latest audio.
This writer emits each batch of packets as one complete cluster the moment it exists. The
segment has unknown size, as in any live WebM stream (MSE and ffmpeg accept it).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_EBML = 0x1A45DFA3
_SEGMENT = 0x18538067
_CLUSTER = 0x1F43B675
_UNKNOWN_SIZE = bytes.fromhex("01ffffffffffffff")
_MAX_BLOCK_OFFSET_MS = 32767  # a block's timestamp is a signed 16-bit offset from its cluster's


@dataclass(frozen=True, slots=True)
class Block:
    timestamp_ms: int  # presentation time from the start of the stream
    data: bytes  # one Opus packet
    discard_ns: int = 0  # trailing padding the decoder drops (only on the last packet)


def _vint(n: int) -> bytes:
    """EBML variable-size integer for an element size (all-ones is reserved: 'unknown')."""
    for length in range(1, 9):
        if n < (1 << (7 * length)) - 1:
            return ((1 << (7 * length)) | n).to_bytes(length, "big")
    raise ValueError(f"EBML element too large: {n} bytes")


def _el(element_id: int, payload: bytes) -> bytes:
    return element_id.to_bytes((element_id.bit_length() + 7) // 8, "big") + _vint(len(payload)) + payload


def _uint(element_id: int, value: int) -> bytes:
    return _el(element_id, value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big"))


def _sint(element_id: int, value: int) -> bytes:
    return _el(element_id, value.to_bytes(max(1, (value.bit_length() + 8) // 8), "big", signed=True))


def header(codec_private: bytes, *, channels: int, codec_delay_ns: int) -> bytes:
    """EBML header, the open-ended Segment, Info and the one Opus track."""
    ebml = _el(
        _EBML,
        b"".join(
            [
                _uint(0x4286, 1),
                _uint(0x42F7, 1),
                _uint(0x42F2, 4),
                _uint(0x42F3, 8),
                _el(0x4282, b"webm"),
                _uint(0x4287, 4),
                _uint(0x4285, 2),
            ]
        ),
    )
    info = _el(
        0x1549A966,
        b"".join(
            [
                _uint(0x2AD7B1, 1_000_000),  # TimestampScale: timestamps in milliseconds
                _el(0x4D80, b"kokoro-gateway"),
                _el(0x5741, b"kokoro-gateway"),
            ]
        ),
    )
    audio = _el(0xE1, _el(0xB5, struct.pack(">d", 48000.0)) + _uint(0x9F, channels))
    track = _el(
        0xAE,
        b"".join(
            [
                _uint(0xD7, 1),
                _uint(0x73C5, 1),
                _uint(0x83, 2),
                _el(0x86, b"A_OPUS"),
                _el(0x63A2, codec_private),
                _uint(0x56AA, codec_delay_ns),
                _uint(0x56BB, 80_000_000),  # SeekPreRoll: Opus needs 80 ms to converge after a seek
                audio,
            ]
        ),
    )
    return ebml + _SEGMENT.to_bytes(4, "big") + _UNKNOWN_SIZE + info + _el(0x1654AE6B, track)


def _block(block: Block, cluster_ms: int) -> bytes:
    head = b"\x81" + (block.timestamp_ms - cluster_ms).to_bytes(2, "big", signed=True)
    if not block.discard_ns:
        return _el(0xA3, head + b"\x80" + block.data)  # SimpleBlock, keyframe
    # DiscardPadding lives only in a BlockGroup: it trims the last packet to the input length
    return _el(0xA0, _el(0xA1, head + b"\x00" + block.data) + _sint(0x75A2, block.discard_ns))


def clusters(blocks: list[Block]) -> bytes:
    """The blocks as one cluster, or several if they span more than a block offset allows."""
    out = bytearray()
    start = 0
    while start < len(blocks):
        base = blocks[start].timestamp_ms
        end = start
        while end < len(blocks) and blocks[end].timestamp_ms - base <= _MAX_BLOCK_OFFSET_MS:
            end += 1
        body = _uint(0xE7, base) + b"".join(_block(b, base) for b in blocks[start:end])
        out += _el(_CLUSTER, body)
        start = end
    return bytes(out)
