"""Tensor and input names of the Kokoro export and of the models ``split`` derives from it.

Kept apart from ``split`` so that using a built vocoder never imports the ``onnx`` package.
"""

from __future__ import annotations

from dataclasses import dataclass

FEATURES = "/encoder/MatMul_1_output_0"  # aligned text features [1, 512, T]
F0 = "/encoder/Reshape_output_0"  # pitch, Hz [1, 2T]
ENERGY = "/encoder/Reshape_1_output_0"  # [1, 2T]
# the duration predictor's output, rounded and at least 1: frames per input token, pads
# included [1, N + 2]; the frames sum to T (600 samples each): word timings (``timestamps``)
DURATIONS = "/encoder/Clip_output_0"
CUMSUM = "/decoder/decoder/generator/m_source/l_sin_gen/CumSum_output_0"  # [1, 2T, 9]
GENERATOR = "/decoder/decoder/generator/"
DECODER = "/decoder/"
HARMONICS = 9
PHASE_OFFSET = "phase_offset"
CROP = "crop"  # int64 [2]: the generator's window, in F0 frames of the vocoder's input


@dataclass(frozen=True, slots=True)
class Statistic:
    """One quantity computed over the whole window, and the frozen model's input for it."""

    name: str
    kind: str  # "mean" | "var" (instance norm, [1, C, 1]) | "scale" | "zero_point" (int8)
    node: str  # the node that computes it in the exact vocoder
