"""Audio encoding for the wire: frame-aligned MP3, PCM, streaming WAV and WebM/Opus.

``make_encoder(fmt)`` gives one streaming encoder per utterance; ``mp3`` holds the frame
parser and aligner that keep every MP3 payload whole frames. Decoding (PyAV) lives in
``gateway.audio.decode`` and is imported only by tests and benchmarks.
"""

from .encoders import CONTENT_TYPES, FORMATS, Encoder, encode_all, make_encoder
from .mp3 import (
    FrameAligner,
    FrameHeader,
    Mp3FormatError,
    count_frames,
    is_whole_frames,
    iter_frames,
    parse_header,
    split_frames,
)

__all__ = [
    "CONTENT_TYPES",
    "FORMATS",
    "Encoder",
    "FrameAligner",
    "FrameHeader",
    "Mp3FormatError",
    "count_frames",
    "encode_all",
    "is_whole_frames",
    "iter_frames",
    "make_encoder",
    "parse_header",
    "split_frames",
]
