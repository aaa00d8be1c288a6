"""Cut an utterance's encoded bytes into the payloads a channel sends.

Frame mode never holds audio back: every push returns all whole MP3 frames that exist, split
into groups of at most ``frames_per_payload`` (grouping only bounds the message size; waiting
to fill a group would add latency). ``bytes:N`` mode cuts at arbitrary byte counts; it exists
only to demonstrate what misaligned payloads do to a player.
"""

from __future__ import annotations

from .mp3 import iter_frames, split_frames

MP3_FRAME_SAMPLES = 576  # MPEG-2 Layer III at 24 kHz: 24 ms


class Packetizer:
    def __init__(
        self, fmt: str, *, chunk_bytes: int = 0, frames_per_payload: int = 8, sample_rate: int = 24000
    ) -> None:
        self.fmt = fmt
        self.chunk_bytes = chunk_bytes
        self.frames_per_payload = max(1, frames_per_payload)
        # raw formats: as long a payload as the MP3 grouping (24 ms a frame) at any rate
        self.width = 1 if fmt in ("ulaw", "alaw") else 2  # bytes a sample
        self.raw_step = self.frames_per_payload * MP3_FRAME_SAMPLES * sample_rate // 24000 * self.width
        self._pending = bytearray()  # naive mode only

    def push(self, data: bytes) -> list[bytes]:
        if not data:
            return []
        if self.chunk_bytes:
            self._pending += data
            n = self.chunk_bytes
            cut = len(self._pending) - len(self._pending) % n
            out = [bytes(self._pending[i : i + n]) for i in range(0, cut, n)]
            del self._pending[:cut]
            return out
        if self.fmt == "mp3":
            return split_frames(data, self.frames_per_payload)
        if self.fmt in ("pcm", "wav", "ulaw", "alaw"):
            # same duration per payload as the MP3 grouping; cuts stay on whole samples
            # spread evenly, like MP3 frames: a 200 ms chunk is one payload, not 192 + 8 ms
            w = self.width
            parts = -(-len(data) // self.raw_step)
            size = -(-len(data) // parts // w) * w  # whole samples
            return [data[i : i + size] for i in range(0, len(data), size)]
        return [data]  # opus/WebM: the muxer's own clusters

    def flush(self) -> list[bytes]:
        rest, self._pending = bytes(self._pending), bytearray()
        return [rest] if rest else []


def stream_seconds(fmt: str, data: bytes, sample_rate: int) -> float | None:
    """Seconds a decoder gets from ``data`` (what an encoder returned: whole MP3 frames, or raw
    s16le PCM at ``sample_rate``); None for formats whose length is not counted here."""
    if fmt == "mp3":
        return sum(h.samples / h.sample_rate for _, h in iter_frames(data))
    if fmt == "pcm":
        return len(data) // 2 / sample_rate
    return None
