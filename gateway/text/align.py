"""The engine's word times, said of the spoken form, moved onto the client's words.

The engine times the words it was given (``Segment.spoken``: "five to ten minutes"); a caption
shows the client's (``Segment.display``: "5-10 minutes"). Each spoken word is found in the
spoken form, in order; the span it falls in (``Segment.spans``) names the display words it says;
consecutive spoken words of one span become one caption word, from the first one's start to the
last one's end. Spoken words with no display text (a full stop added after a list item, a code
notice) and display text with no spoken words (a dropped emoji) have no caption word.
"""

from __future__ import annotations

from typing import Any

from .reader import Segment

__all__ = ["display_words"]


def display_words(words: list[dict[str, Any]], segment: Segment) -> list[dict[str, Any]]:
    spoken, spans = segment.spoken, segment.spans
    out: list[dict[str, Any]] = []
    last_span = -1
    cursor = 0
    for w in words:
        word = str(w["word"])
        at = spoken.find(word, cursor) if word.strip() else -1
        if at < 0:
            continue
        cursor = at + len(word)
        k = _span_at(spans, at)
        if k < 0:
            continue
        if k == last_span and out:
            out[-1]["end_ms"] = max(out[-1]["end_ms"], w["end_ms"])
            continue
        d0, d1 = spans[k][0], spans[k][1]
        out.append({**w, "word": segment.display[d0:d1]})
        last_span = k
    return out


def _span_at(spans: tuple[tuple[int, int, int, int], ...], at: int) -> int:
    for k, (_, _, s0, s1) in enumerate(spans):
        if s0 <= at < s1:
            return k
    return -1
