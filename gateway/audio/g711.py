"""G.711 μ-law and A-law (telephony: Twilio Media Streams speak 8 kHz μ-law).

The tables are those of ``audioop`` (Sun's ``g711.c``: μ-law from the 14 high bits of a
sample, A-law from the 13 high bits), built once with numpy for every 16-bit sample, so an
encode is one table lookup a sample. ``audioop`` itself is deprecated since Python 3.11 and gone
in 3.13; the tests hold these tables to it (where it exists) and to known G.711 values.
"""

from __future__ import annotations

import numpy as np

LAWS = ("ulaw", "alaw")
_SEG_UEND = np.array([0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF])
_SEG_AEND = np.array([0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF])


def _ulaw_table() -> np.ndarray:
    val = np.arange(-32768, 32768, dtype=np.int32) >> 2  # 14-bit
    mask = np.where(val < 0, 0x7F, 0xFF)
    mag = np.minimum(np.abs(val), 8159) + (0x84 >> 2)
    seg = np.searchsorted(_SEG_UEND, mag)  # the first segment whose end is >= mag
    code = (np.minimum(seg, 7) << 4) | ((mag >> (np.minimum(seg, 7) + 1)) & 0xF)
    code = np.where(seg >= 8, 0x7F, code)
    return ((code ^ mask) & 0xFF).astype(np.uint8)


def _alaw_table() -> np.ndarray:
    val = np.arange(-32768, 32768, dtype=np.int32) >> 3  # 13-bit
    mask = np.where(val >= 0, 0xD5, 0x55)
    mag = np.where(val >= 0, val, -val - 1)
    seg = np.searchsorted(_SEG_AEND, mag)
    shift = np.where(seg < 2, 1, np.minimum(seg, 7))
    code = (np.minimum(seg, 7) << 4) | ((mag >> shift) & 0xF)
    code = np.where(seg >= 8, 0x7F, code)
    return ((code ^ mask) & 0xFF).astype(np.uint8)


def _ulaw_decode_table() -> np.ndarray:
    u = ~np.arange(256, dtype=np.int32) & 0xFF
    t = (((u & 0x0F) << 3) + 0x84) << ((u & 0x70) >> 4)
    return np.where(u & 0x80, 0x84 - t, t - 0x84).astype(np.int16)


def _alaw_decode_table() -> np.ndarray:
    a = np.arange(256, dtype=np.int32) ^ 0x55
    t = (a & 0x0F) << 4
    seg = (a & 0x70) >> 4
    t = np.where(seg == 0, t + 8, np.where(seg == 1, t + 0x108, (t + 0x108) << np.maximum(seg - 1, 0)))
    return np.where(a & 0x80, t, -t).astype(np.int16)


# indexed by the sample's 16 bits read as unsigned (so -32768 is index 0x8000)
_ENCODE: dict[str, np.ndarray] = {"ulaw": np.roll(_ulaw_table(), -32768), "alaw": np.roll(_alaw_table(), -32768)}
_DECODE = {"ulaw": _ulaw_decode_table(), "alaw": _alaw_decode_table()}


def encode(law: str, pcm: bytes) -> bytes:
    """s16le samples -> one G.711 byte each."""
    samples = np.frombuffer(pcm, dtype="<i2").view("<u2")
    encoded: np.ndarray = _ENCODE[law][samples]
    return encoded.tobytes()


def decode(law: str, data: bytes) -> bytes:
    """G.711 bytes -> s16le samples."""
    return _DECODE[law][np.frombuffer(data, dtype=np.uint8)].astype("<i2").tobytes()


class G711Encoder:
    """Raw G.711 (no header): one byte a sample, cut anywhere."""

    delay_samples = 0

    def __init__(self, law: str, *, sample_rate: int = 8000) -> None:
        if law not in LAWS:
            raise ValueError(f"unknown G.711 law {law!r}; one of {', '.join(LAWS)}")
        self.format, self.sample_rate, self.bitrate = law, sample_rate, sample_rate * 8 // 1000
        self.content_type = "audio/PCMU" if law == "ulaw" else "audio/PCMA"  # RFC 4856
        self._odd = b""
        self._flushed = False

    def encode(self, pcm: bytes) -> bytes:
        if self._flushed:
            raise RuntimeError("encoder already flushed: use one encoder per utterance")
        data = self._odd + bytes(pcm)
        cut = len(data) & ~1
        data, self._odd = data[:cut], data[cut:]
        return encode(self.format, data)

    def flush(self) -> bytes:
        self._flushed = True
        return b""
