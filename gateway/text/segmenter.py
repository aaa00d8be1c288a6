"""Incremental sentence segmentation of a token stream.

``Segmenter.feed`` takes text as it arrives (whole, or token by token from an LLM) and returns
the pieces that are now *certainly* complete, so synthesis of a sentence starts the moment it
ends. ``flush`` returns the rest. ``split_text`` is ``feed`` + ``flush`` on one string.

Chunking invariance: a small state machine examines every character once, left to right, and
reads only characters at or before it; a decision that needs one not yet received waits for it.
So any chunking of the same text gives the same pieces, and feed() costs O(new text).

How much lookahead a cut waits for (the time-to-first-audio trade-off):

* ``. ! ? …`` are terminators; runs (``?!``, ``...``) count as one, and closing quotes and
  brackets right after a run (``."``, ``.)``, ``.**``) stay with the sentence. A cut needs the
  first character after the run and its closers: it must be whitespace (``3.14``,
  ``example.com``, ``a.b@c.uk``, ``?c=d`` never cut). For ``!``/``?`` runs and for a ``.`` after
  an ordinary word the cut happens at that first whitespace, with no further wait; a quoted
  ``!``/``?`` (``"Stop!" he said``) waits for the next word like an ellipsis (below).
* ``.`` after a word that never ends a sentence (Mr., Dr., St., vs., e.g., i.e., ...), after a
  single capital (initials: "J. K. Rowling") or a dotted acronym (U.S., U.K., D.C.) never cuts:
  "U.S. Army" stays whole, at the price that "the U.S. It was" is one piece (a missed cut only
  costs latency; a wrong cut costs prosody). ``1.`` at the start of a line is a list marker.
* ``.`` after a word that may or may not end a sentence (etc., Inc., Ltd., Jr., a.m., p.m.,
  No., Jan.) and ellipses (``...``, ``…``) wait for the next non-space character: they cut
  unless it is lowercase (or, for abbreviations, a digit: "No. 5", "Jan. 3").
* CJK marks ``。！？．`` need no whitespace: the cut happens when the next character arrives and
  is not a closing bracket or another mark (so ``」`` and ``！？`` stay attached); ``．`` between
  digits is a decimal point. ``!``/``?`` directly followed by a CJK character cut too.
* Newlines (single or blank lines) always end a piece, so list items ("- a", "2. b") are pieces.
* Fast path: with ``first_clause_words = N > 0`` the first piece of the reply (only that one)
  also ends at ``, ; :`` or a dash (`` - ``, `` – ``, ``—``) followed by whitespace (``—`` also
  between words) once it holds N words; "1,000" and "3:30" never cut.
* A piece that would exceed ``max_chars`` is split when its ``max_chars + 1``-th character
  arrives: at the last clause mark (``, ; : — –`` or CJK ``、，；：``) in the second half of
  the window, else at the last space, else at a clause mark, else mid-word (only for a word
  longer than ``max_chars``).

Pieces are stripped; text with no letter or digit (``...``, ``---``, ``**``, emoji) is never a
piece of its own: it is merged into the following piece, and dropped only when nothing follows
it (at ``flush``) or when more than ``max_chars`` of it stand alone. Markup is kept: it only cuts.
"""

from __future__ import annotations

import re

from .speakable import SPEAKABLE

__all__ = ["Segmenter", "split_text"]

_NEWLINES = frozenset("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")
_CJK_TERMINATORS = frozenset("。！？．｡")
_TERMINATORS = frozenset(".!?…") | _CJK_TERMINATORS
_CLOSERS = frozenset("\"')]}”’»」』）】》〉〕］｝*_`")
_MARKERS = "\U000f0000"  # the text front-end's control markers and above (``text.markers``)


def _closes(ch: str) -> bool:
    """A closing quote or bracket, or a control marker (a closing tag: "Hi.</prosody> Next")."""
    return ch in _CLOSERS or ch >= _MARKERS


_OPENERS = "\"'([{“‘«「『（【《〈〔［｛*_`"
_CJK_CHAR = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f]")
_INITIALS = re.compile(r"(?:[A-Z]\.)*[A-Z]")  # "J", "U.S", "U.S.A"
# A split point for over-long pieces: just after a clause mark.
_CLAUSE_BREAK = re.compile(r"(?:[,;:–]|(?<=\s)-)(?=\s)|[、，；：—]")
_SPACE = re.compile(r"\s")

# Words that end in "." but (almost) never end a sentence: titles before names, "e.g." ...
_NEVER_FINAL = frozenset(
    "mr mrs ms mx dr prof st mt rev fr gen col maj capt cmdr lt sgt hon gov sen rep pres"
    " vs v e.g i.e cf viz approx ca fig figs eq eqs vol ch sec pp dept est univ"
    " op al p pg apt ste ext tel appt".split()
)
# Words that may end a sentence: cut unless the next word starts lowercase or with a digit.
_MAYBE_FINAL = frozenset(
    "etc inc ltd co corp llc plc bros jr sr a.m p.m ph.d m.d b.a m.a b.sc m.sc no nos"
    " jan feb mar apr jun jul aug sep sept oct nov dec mon tue tues wed thu thur thurs fri sat sun"
    " min max hr hrs ft sq ave blvd rd ln hwy pkwy ct dept".split()
)

_NORMAL, _TERM, _CLOSE, _WAIT = range(4)
_KEEP, _CUT, _LOOK = range(3)


class Segmenter:
    """Cuts streamed text into speakable pieces as soon as each is certainly complete."""

    def __init__(
        self, *, first_clause_words: int = 0, max_chars: int = 300, speakable: re.Pattern[str] = SPEAKABLE
    ) -> None:
        """``speakable``: what makes a piece worth saying (the text front-end adds its spoken
        notices to letters and digits)."""
        if first_clause_words < 0 or max_chars < 1:
            raise ValueError("first_clause_words must be >= 0 (0: no fast path), max_chars >= 1")
        self._speakable = speakable
        self._first_words = first_clause_words
        self._max = max_chars
        self._emitted = False  # a piece of this reply went out: the fast path is over
        self._reset()

    def _reset(self) -> None:
        self._buf = ""
        self._pos = 0  # next character to examine
        self._start = 0  # where the unfinished piece begins (may be whitespace)
        self._content = -1  # its first non-space character, -1 while there is none
        self._line_start = True  # the piece begins at the start of a line
        self._phase = _NORMAL
        self._term = 0  # start of the terminator run (phases _TERM, _CLOSE)
        self._close = 0  # end of that run, where closers begin
        self._cut_at = 0  # the cut a _WAIT decision is about
        self._wait_digit_keeps = False  # in _WAIT, a digit next means "no cut"

    @property
    def pending(self) -> str:
        """Text received but not yet returned as a piece (leading whitespace removed)."""
        return self._buf[self._start :].lstrip()

    def feed(self, text: str) -> list[str]:
        """Append ``text``; return the pieces that are now certainly complete."""
        if not text:
            return []
        out: list[str] = []
        buf = self._buf = self._buf + text
        for k in range(self._pos, len(buf)):
            self._step(k, buf[k], out)
        self._pos = len(buf)
        self._compact()
        return out

    def flush(self) -> list[str]:
        """End of input (or a client's flush): return what is buffered. The segmenter stays
        usable; the fast path does not apply again (it is for the reply's first piece)."""
        out: list[str] = []
        self._emit(self._buf[self._start :], out)
        self._reset()
        return out

    # -- the state machine ------------------------------------------------------------------

    def _step(self, k: int, ch: str, out: list[str]) -> None:
        if self._phase == _TERM and ch not in _TERMINATORS:
            self._close = k
            self._phase = _CLOSE
        if self._phase == _CLOSE and not _closes(ch):
            self._resolve_close(k, ch, out)
        if self._phase == _WAIT:
            if ch in _NEWLINES:
                self._phase = _NORMAL  # the newline cuts at the same place
            elif not ch.isspace():
                self._resolve_wait(ch, out)
        space = ch.isspace()
        if not space:
            if self._content < 0:
                self._content = k
            while k - self._content >= self._max:
                self._split(k, out)
        if self._phase != _NORMAL:
            return  # ch extends a terminator run, its closers, or the space after them
        if ch in _NEWLINES:
            self._cut(k, out)
        elif ch in _TERMINATORS:
            self._phase = _TERM
            self._term = k
        elif self._first_words and not self._emitted and self._clause_ends(k, ch, space):
            if self._words(k) >= self._first_words:
                self._cut(k, out)

    def _resolve_close(self, k: int, ch: str, out: list[str]) -> None:
        """Decide the cut after a terminator run and its closers; ``ch`` follows them."""
        self._phase = _NORMAL
        run = self._buf[self._term : self._close]
        bang = "!" in run or "?" in run
        if any(c in _CJK_TERMINATORS for c in run):
            if run == "．" and ch.isdigit() and self._at(self._term - 1).isdigit():
                return  # a full-width decimal point
            self._cut(k, out)
        elif not ch.isspace():
            if bang and _CJK_CHAR.match(ch):
                self._cut(k, out)
        elif ch in _NEWLINES:
            return  # the newline itself cuts
        elif bang and self._close < k:
            self._wait(k, digit_keeps=False)  # '"Stop!" he said' goes on
        elif bang:
            self._cut(k, out)
        elif len(run) > 1 or run == "…":
            self._wait(k, digit_keeps=False)
        else:
            verdict = self._classify(self._term)
            if verdict == _CUT:
                self._cut(k, out)
            elif verdict == _LOOK:
                self._wait(k, digit_keeps=True)

    def _wait(self, k: int, *, digit_keeps: bool) -> None:
        self._phase = _WAIT
        self._cut_at = k
        self._wait_digit_keeps = digit_keeps

    def _resolve_wait(self, ch: str, out: list[str]) -> None:
        """The first non-space character after an ellipsis or an ambiguous abbreviation."""
        self._phase = _NORMAL
        if ch.islower() or ch in ",;:" or (self._wait_digit_keeps and ch.isdigit()):
            return
        self._cut(self._cut_at, out)

    def _classify(self, term: int) -> int:
        """Whether a single "." at ``term``, followed by a space, ends a sentence."""
        buf, j = self._buf, term
        while j > self._start and not buf[j - 1].isspace():
            j -= 1
        token = buf[j:term].lstrip(_OPENERS)
        if token.isdigit() and len(token) <= 3 and self._is_line_start(j):
            return _KEEP  # "1. First" list marker
        low = token.lower()
        if low in _NEVER_FINAL or _INITIALS.fullmatch(token):
            return _KEEP
        return _LOOK if low in _MAYBE_FINAL else _CUT

    def _clause_ends(self, k: int, ch: str, space: bool) -> bool:
        """Whether a clause mark ends right before ``k`` (first-piece fast path)."""
        if not space:  # "word—word"
            return self._at(k - 1) == "—" and ch.isalpha() and self._at(k - 2).isalpha()
        j = k - 1
        while j >= self._start and _closes(self._buf[j]):
            j -= 1
        mark = self._at(j)
        if mark == "," and self._at(j - 1).isdigit():
            return False  # "January 5, 2027", "3, 4 and 5": the number may go on
        if mark in ",;:—":
            return True
        return mark in "-–" and self._at(j - 1).isspace()

    def _words(self, k: int) -> int:
        return sum(1 for w in self._buf[self._start : k].split() if self._speakable.search(w))

    def _at(self, j: int) -> str:
        """The character at ``j``; the start of the piece reads as a space."""
        return self._buf[j] if j >= self._start else " "

    def _is_line_start(self, j: int) -> bool:
        buf = self._buf
        while j > self._start and buf[j - 1].isspace() and buf[j - 1] not in _NEWLINES:
            j -= 1
        return self._line_start if j <= self._start else buf[j - 1] in _NEWLINES

    # -- cutting ----------------------------------------------------------------------------

    def _emit(self, text: str, out: list[str]) -> bool:
        piece = text.strip()
        if not self._speakable.search(piece):
            return False
        out.append(piece)
        self._emitted = True
        return True

    def _cut(self, c: int, out: list[str]) -> None:
        """End the piece before ``c``, unless it has nothing to say (then it carries on)."""
        text = self._buf[self._start : c]
        if not self._emit(text, out) and not text.isspace() and text:
            return  # punctuation only: merged into the next piece
        self._start = c
        self._content = -1 if self._buf[c].isspace() else c  # "Well—|here" cuts before a letter
        self._line_start = self._buf[c] in _NEWLINES

    def _split(self, k: int, out: list[str]) -> None:
        """The piece is longer than max_chars: cut its head off at the best place."""
        buf, lo = self._buf, self._content
        q = self._start = _split_point(buf, lo, lo + self._max, self._speakable)
        self._emit(buf[lo:q], out)  # a head of symbols only is dropped
        self._line_start = False
        while buf[q].isspace():
            q += 1  # stops at k at the latest: buf[k] is not a space
        self._content = q
        self._term = max(self._term, self._start)
        self._close = max(self._close, self._start)

    def _compact(self) -> None:
        """Drop emitted text (and leading whitespace) from the buffer."""
        cut = self._start
        if self._content < 0 and self._phase == _NORMAL:
            cut = self._pos
        if cut == 0:
            return
        self._buf = self._buf[cut:]
        self._pos -= cut
        self._start = max(self._start - cut, 0)
        if self._content >= 0:
            self._content -= cut
        self._term = max(self._term - cut, 0)
        self._close = max(self._close - cut, 0)
        self._cut_at = max(self._cut_at - cut, 0)


def _split_point(buf: str, lo: int, hi: int, speakable: re.Pattern[str] = SPEAKABLE) -> int:
    """Where to end a piece ``buf[lo:q]`` (``lo < q <= hi``) that must not reach past ``hi``."""
    first = speakable.search(buf, lo, hi)
    if first is None:
        return hi
    floor = first.start() + 1  # the head must hold something speakable
    breaks = (m.end() for m in _CLAUSE_BREAK.finditer(buf, floor, hi + 1))
    clause = max((q for q in breaks if q <= hi), default=-1)
    if clause - lo >= (hi - lo) // 2:
        return clause
    space = max((m.start() for m in _SPACE.finditer(buf, floor, hi + 1)), default=-1)
    if space >= floor:
        return space
    return clause if clause >= floor else hi


def split_text(text: str, *, first_clause_words: int = 0, max_chars: int = 300) -> list[str]:
    """All pieces of ``text``: ``feed(text) + flush()`` of a fresh ``Segmenter``."""
    seg = Segmenter(first_clause_words=first_clause_words, max_chars=max_chars)
    return seg.feed(text) + seg.flush()
