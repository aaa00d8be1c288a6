"""Kokoro-82M's vocoder run in chunks, so a segment's first audio comes long before its last.

See docs/STREAMING_VOCODER.md for the measurements behind the design. Heavy imports (onnx,
onnxruntime) happen only when a vocoder is built.
"""

from __future__ import annotations

from .calibrate import default_cache_dir
from .chunked import Encoded, Policy
from .modes import MODES
from .streaming import BuildReport, StreamingVocoder

__all__ = ["MODES", "BuildReport", "Encoded", "Policy", "StreamingVocoder", "default_cache_dir"]
