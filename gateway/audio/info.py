"""The Xing/Info frame (with LAME's extension) at the head of a whole CBR MP3.

A streaming encoder (lameenc) cannot go back to write it, but a batch reply is whole before
it is sent, so one is put in front: frame count and byte count (players show the right
duration and seek), a table of contents, and LAME's encoder delay and padding, which gapless
decoders (ffmpeg, browsers, mutagen's length) use to drop the encoder's lead-in and tail.
The layout follows LAME's ``VbrTag.c``; both CRCs are LAME's CRC-16 (polynomial 0x8005,
reflected, as ffmpeg's ``AV_CRC_16_ANSI_LE``).
"""

from __future__ import annotations

import struct

from .mp3 import HEADER_SIZE, Mp3FormatError, iter_frames, parse_header

ENCODER_DELAY = 576  # LAME's own lead-in in samples; decoders add their 529 to it
LAME_VERSION = b"LAME3.100"  # what lameenc wraps
FLAGS = 0x0F  # frames, bytes, TOC and quality fields present


def _crc16_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC16 = _crc16_table()


def crc16(data: bytes | bytearray | memoryview, crc: int = 0) -> int:
    for byte in bytes(data):
        crc = (crc >> 8) ^ _CRC16[(crc ^ byte) & 0xFF]
    return crc


def add_info_frame(mp3: bytes, samples: int, *, quality: int = 5, delay: int = ENCODER_DELAY) -> bytes:
    """``mp3`` (whole CBR frames, no tag) with an Info frame in front for ``samples`` of PCM."""
    frames = list(iter_frames(mp3))
    if not frames or frames[0][0] != 0:
        raise Mp3FormatError("an Info frame goes in front of whole MPEG frames only")
    first = parse_header(mp3)
    if first is None or first.layer != 3:
        raise Mp3FormatError("an Info frame is written for MPEG Layer III only")
    # the first frame's header, unpadded and without CRC: the Info frame is one frame of silence
    word = int.from_bytes(mp3[:HEADER_SIZE], "big") & ~(1 << 9) | (1 << 16)
    header = parse_header(word.to_bytes(4, "big"))
    if header is None:
        raise Mp3FormatError("cannot build an Info frame header")
    side_info = (32 if header.channels == 2 else 17) if header.version == "1" else (17 if header.channels == 2 else 9)
    count = len(frames)
    padding = count * header.samples - delay - samples
    if not 0 <= padding < 4096 or not 0 <= delay < 4096:
        raise Mp3FormatError(f"{samples} samples do not fit {count} frames with delay {delay}")
    total = header.length + len(mp3)
    toc = bytes(min(255, i * 256 // 100) for i in range(100))
    # LAME's quality field: 100 - 10 * VBR quality (its default 4) - algorithm quality
    body = b"Info" + struct.pack(">III", FLAGS, count, total) + toc + struct.pack(">I", 100 - 40 - quality)
    lame = (
        LAME_VERSION
        + bytes([0x01, 0])  # tag revision 0, CBR; lowpass unknown
        + bytes(8)  # peak, radio and audiophile gain: not computed
        + bytes([0, min(255, header.bitrate_kbps)])  # flags and ATH; CBR bitrate
        + ((delay << 12) | padding).to_bytes(3, "big")
        + bytes(4)  # misc, MP3 gain, preset and surround
        + struct.pack(">IH", total, crc16(mp3))
    )  # music length, music CRC
    frame = bytearray(header.length)
    frame[:HEADER_SIZE] = word.to_bytes(4, "big")
    tag = body + lame
    at = HEADER_SIZE + side_info
    frame[at : at + len(tag)] = tag
    end = at + len(tag)
    frame[end : end + 2] = crc16(frame[:end]).to_bytes(2, "big")  # the tag's CRC: all before it
    return bytes(frame) + mp3
