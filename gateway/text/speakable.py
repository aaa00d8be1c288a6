"""Whether text has anything a voice can say: one rule for every route and the segmenter.

Kokoro reads letters and digits; punctuation, symbols, emoji and control characters alone make
no speech (an engine answers them with silence or nothing at all). Text without a letter or a
digit is therefore refused before synthesis (``nothing_to_speak``) rather than answered with
an empty reply, and the segmenter never makes a piece of it.
"""

from __future__ import annotations

import re

# a letter or a digit in any script: \w without the underscore
SPEAKABLE = re.compile(r"[^\W_]")


def speakable(text: str) -> bool:
    """True when ``text`` holds at least one letter or digit (in any script)."""
    return SPEAKABLE.search(text) is not None
