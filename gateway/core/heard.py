"""What a reply said, when, and how much of it a listener has heard (barge-in).

The pipeline records each segment's text, where its audio starts on the reply's timeline and
its words (``words`` events); the session records how far the audio it sent reaches. After
``cancel`` with ``played_ms`` (the client's playback position in the reply), ``heard`` gives the
reply's text up to and including the last word that started before it (with the punctuation
attached to that word), never past the audio sent; without ``played_ms``, what was sent.
Where the engine gives no word times, whole segments that started in time.

A segment's words may come in several pieces (one per model call): until its audio is complete,
its text counts only up to its last heard word, never past the words known so far. A segment
that made no audio (letters the voice cannot read) was never heard and is passed over.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class _Segment:
    text: str
    start_ms: float | None = None  # its first sample on the reply's timeline, once encoded
    words: list[tuple[float, int]] = field(default_factory=list)  # (start_ms, end of the word in text)
    cursor: int = 0  # where the next word is looked for in ``text``
    complete: bool = False  # all its audio (and so all its words) has been given to the encoder


class Transcript:
    def __init__(self) -> None:
        self.segments: dict[int, _Segment] = {}
        self.sent_ms = 0.0  # the end of the audio sent so far, on the reply's timeline

    def segment(self, index: int, text: str) -> None:
        self.segments[index] = _Segment(text)

    def started(self, index: int, start_ms: float) -> None:
        seg = self.segments.get(index)
        if seg is not None and seg.start_ms is None:
            seg.start_ms = start_ms

    def words(self, index: int, words: list[dict[str, object]]) -> None:
        """A ``words`` event's list: each word is found in the segment's text, in order."""
        seg = self.segments.get(index)
        if seg is None:
            return
        for w in words:
            word, start = str(w["word"]), float(w["start_ms"])  # type: ignore[arg-type]
            end = _word_end(seg.text, word, seg.cursor)
            if end < 0:
                continue
            seg.cursor = end
            seg.words.append((start, end))

    def complete(self, index: int) -> None:
        """The segment's audio is all encoded: every word it has was seen."""
        if (seg := self.segments.get(index)) is not None:
            seg.complete = True

    def sent(self, end_ms: float) -> None:
        self.sent_ms = max(self.sent_ms, end_ms)

    def heard(self, played_ms: float | None = None) -> str:
        # a client cannot have heard audio it never got, whatever position it claims (audio
        # encoded but still queued when it cancels is dropped unsent)
        limit = self.sent_ms if played_ms is None else min(played_ms, self.sent_ms)
        out: list[str] = []
        for index in sorted(self.segments):
            seg = self.segments[index]
            if seg.start_ms is None:  # no audio (yet, or ever): nothing of it was heard
                continue
            if seg.start_ms >= limit:
                break
            if not seg.words:  # no word times: the segment counts whole once it started
                out.append(seg.text)
                continue
            ends = [end for start, end in seg.words if start < limit]
            if not ends:
                break
            if len(ends) == len(seg.words) and seg.complete:
                out.append(seg.text)
                continue
            end = ends[-1]
            while end < len(seg.text) and not seg.text[end].isspace() and not seg.text[end].isalnum():
                end += 1  # the word's own punctuation ("three." "Four,") comes with it
            out.append(seg.text[:end])
            break
        return " ".join(out)


def _word_end(text: str, word: str, start: int) -> int:
    """Where ``word`` (as written; several words joined by spaces for one token, of which the
    first is enough) ends in ``text`` after ``start``; -1 if absent (or blank)."""
    if not word.strip():
        return -1
    for part in (word, word.split()[0]) if " " in word else (word,):
        if (at := text.find(part, start)) >= 0:
            return at + len(part)
    return -1
