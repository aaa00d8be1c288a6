"""Control markers: how the streaming filter hands control markup to the per-segment reader.

The filter (``markdown.py``) turns markup into display text and, for what is not text (a pause,
a phoneme span, the end of a list item), one private-use character per control: a ``Marker``
kept in the reply's ``Markers`` table, at the place in the text where it acts. The segmenter
passes these characters through like any other character that is not a letter (they never cut
and never make a piece speakable, except ``NOTICE``: a spoken notice is something to say), and
the reader (``reader.py``) resolves them per segment. The client's own text can never hold
them: the front-end removes private-use characters of these planes from input first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["MARKER", "SPEAKING", "Marker", "Markers", "strip_markers"]

BASE = 0xF0000  # Supplementary Private Use Area-A: 65,534 markers a reply
NOTICE_BASE = 0x100000  # Area-B: spoken notices
MARKER = re.compile("[\U000f0000-\U000ffffd\U00100000-\U0010fffd]")
# something to say: a letter or a digit in any script (``core.speakable``), or a spoken notice
SPEAKING = re.compile("[^\\W_]|[\U00100000-\U0010fffd]")

# kinds
PAUSE = "pause"  # value: seconds of silence, before the text that follows
END = "end"  # the end of a block (heading, list item, table row): a full stop if none is written
NOTICE = "notice"  # value: words spoken with no display text (a skipped code block)
OPEN = "open"  # span kinds: phoneme (value: phonemes), sub (alias), say-as (interpret-as), prosody (rate)
CLOSE = "close"


@dataclass(frozen=True, slots=True)
class Marker:
    kind: str
    span: str = ""  # for OPEN and CLOSE: phoneme | sub | say-as | prosody
    value: str | float = ""
    detail: str = ""  # say-as: its format attribute
    at: int = -1  # where the markup began in the client's text (for error messages)


class Markers:
    """One reply's table of markers; each is one character of the filtered text. Notices take
    their characters from plane 16 (``SPEAKING``: the segmenter counts them as something to say),
    every other marker from plane 15."""

    def __init__(self) -> None:
        self._items: dict[str, Marker] = {}
        self._next = {False: BASE, True: NOTICE_BASE}

    def add(self, marker: Marker) -> str:
        notice = marker.kind == NOTICE
        code = self._next[notice]
        if code > (0x10FFFD if notice else 0xFFFFD):
            from ..errors import BadRequest

            raise BadRequest("too much control markup in one reply", code="invalid_markup")
        self._next[notice] = code + 1
        ch = chr(code)
        self._items[ch] = marker
        return ch

    def get(self, ch: str) -> Marker | None:
        return self._items.get(ch)


def strip_markers(text: str) -> str:
    return MARKER.sub("", text)
