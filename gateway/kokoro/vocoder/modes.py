"""The vocoder's modes: how a segment's audio is made, whole or streamed inside the segment.

One name each, shared by the engines that declare them (``Capabilities.vocoder_modes``), the
core that picks one per segment (``core/listener.py``) and the wire (``vocoder`` option and
the ``ready`` event), where they travel as their string values.
"""

from __future__ import annotations

from enum import StrEnum


class VocoderMode(StrEnum):
    EXACT = "exact"  # the whole segment through the model's own vocoder
    FROZEN = "frozen"  # streamed in chunks, the vocoder's statistics frozen from the first ones
    FROZEN_FIRST = "frozen-first"  # streams only a segment that would keep the listener waiting


MODES: tuple[VocoderMode, ...] = tuple(VocoderMode)
#: the mode an engine that streams inside a segment uses when a reply names none, unless it is
#: configured otherwise (``embedded_vocoder``'s default in ``gateway/config.py`` is this value,
#: held equal by a test: config may not import this layer). A reply's mode is then resolved
#: once, from what the engine declares: ``engines/base.Capabilities.vocoder_for``.
DEFAULT: VocoderMode = VocoderMode.FROZEN_FIRST


def check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}")
