"""One segment's display text and spoken form, and how their words line up.

The segmenter hands over a piece of filtered text (``markdown.py``: markup gone, control
markers in place). ``Reader.read`` resolves its markers and reads it: the display text is the
client's words without markup (emoji kept: they are the client's text, but never spoken unless
named); the spoken form is what the engine is given, after the lexicon, emoji and, for English,
normalization (``english.py``). ``Segment.spans`` pairs each display word (or group of words:
"5-10", "(555) 123-4567") with what is said for it, so the engine's word times map back to the
client's words (``align.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import emoji

from . import markers as mk
from .english import Spoken, normalize
from .lexicon import Lexicon
from .markup import MarkupError
from .sayas import say_as

__all__ = ["Reader", "Segment"]

EMOJI_MODES = ("drop", "name", "keep")
_TERMINAL = frozenset(".!?…。！？:;")
_JAPANESE = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")
_MARKS = frozenset(",.;:!?")
_SPACES = re.compile(r"\s+")
_SPACE_BEFORE_MARK = re.compile(r"\s+([,.;:!?])")
_WORD = re.compile(r"[\w'’]+(?:[-.,:/@+][\w'’]+)*\+*")  # a word as the engines time it ("six" of "six.")


@dataclass(frozen=True, slots=True)
class Segment:
    """A piece of the reply: what to show, what to say, and how their words pair up."""

    display: str
    spoken: str
    spans: tuple[tuple[int, int, int, int], ...] = ()  # (display start, end, spoken start, end)
    pause_s: float = 0.0  # exact silence before it
    rate: float = 1.0  # times the request's speed (SSML prosody)

    def fields(self) -> dict[str, str | int]:
        """Its part of a ``sentence`` event: ``text`` to show, ``spoken``, ``pause_ms`` before it."""
        out: dict[str, str | int] = {"text": self.display, "spoken": self.spoken}
        if self.pause_s:
            out["pause_ms"] = round(self.pause_s * 1000)
        return out

    @classmethod
    def plain(cls, text: str) -> Segment:
        """Text spoken as written (the front-end switched off)."""
        return cls(text, text, tuple((m.start(), m.end(), m.start(), m.end()) for m in _WORD.finditer(text)))


@dataclass(slots=True)
class _Build:
    display: list[str] = field(default_factory=list)
    spoken: list[str] = field(default_factory=list)
    spans: list[tuple[int, int, int, int]] = field(default_factory=list)
    d: int = 0
    s: int = 0

    def add(self, shown: str, said: str, *, span: bool = True) -> None:
        if said[:1] in _MARKS:
            self.trim()  # "Done, Your ...", "recipe:": no space before a comma or a stop
        if said[:1].isspace() and (not self.s or "".join(self.spoken[-2:])[-1:].isspace()):
            said = said.lstrip()  # one space between words, whatever was dropped between them
        if span and shown.strip() and said.strip():
            self.spans.append((self.d, self.d + len(shown), self.s, self.s + len(said)))
        self.display.append(shown)
        self.spoken.append(said)
        self.d += len(shown)
        self.s += len(said)

    def trim(self) -> None:
        """No space before what comes next (a full stop): trailing spaces off, entry by entry."""
        for k in range(len(self.spoken) - 1, -1, -1):
            kept = self.spoken[k].rstrip()
            self.s -= len(self.spoken[k]) - len(kept)
            self.spoken[k] = kept
            if kept:
                break


def _spaced(gap: str) -> str:
    """Text between words as said: one space for a run of them, none before a comma or stop."""
    return _SPACE_BEFORE_MARK.sub(r"\1", _SPACES.sub(" ", gap)) if gap.strip() else " "


def _emoji_gap(text: str, a: int, b: int) -> str:
    """What a dropped emoji leaves: nothing, or a comma where it stood between a word and the
    capitalized start of another ("Done ✅ Your visit ...": the emoji ended a sentence)."""
    before, after = text[:a].rstrip(), text[b:].lstrip()
    if before[-1:].isalnum() and after[:1].isupper() and after[1:2].islower() and text[b : b + 1].isspace():
        return ", "
    return " " if (before and after) else ""


class Reader:
    """Reads segments in order (spans may stay open from one segment into the next)."""

    def __init__(
        self,
        table: mk.Markers,
        *,
        lang: str = "a",
        normalize: bool = True,
        emoji_mode: str = "drop",
        lexicon: Lexicon | None = None,
    ) -> None:
        self.table, self.lang, self.normalize, self.emoji = table, lang, normalize, emoji_mode
        self.lexicon = lexicon or Lexicon()
        self.open: list[mk.Marker] = []  # spans still open, outermost first
        self.pause_s = 0.0  # pauses waiting for the next text
        self._protect_start = 0  # where the open protected span's text begins in the segment

    def english(self, text: str) -> bool:
        return self.lang in ("a", "b") or (self.lang == "j" and not _JAPANESE.search(text))

    def read(self, piece: str) -> Segment:
        out, run = _Build(), []
        self._protect_start = 0  # a span open from the last segment holds this one's text from its start
        rate = self._rate()
        for ch in piece:
            marker = self.table.get(ch) if mk.MARKER.match(ch) else None
            if marker is None:
                run.append(ch)
                continue
            self._text(out, "".join(run))
            run = []
            self._marker(out, marker)
            if not "".join(out.display).strip():
                rate = self._rate()  # the rate in effect where the segment's text begins
        self._text(out, "".join(run))
        return self._finish(out, rate)

    def _rate(self) -> float:
        rates = [float(m.value) for m in self.open if m.span == "prosody"]
        return rates[-1] if rates else 1.0

    def _marker(self, out: _Build, marker: mk.Marker) -> None:
        if marker.kind == mk.PAUSE:
            if out.d or out.s:
                out.add("", " ", span=False)  # inside a segment: a short break is all there is
            self.pause_s += float(marker.value)
        elif marker.kind == mk.END:
            said = "".join(out.spoken).rstrip()
            if said and said[-1] not in _TERMINAL:
                out.trim()
                out.add("", ".", span=False)
        elif marker.kind == mk.NOTICE:
            out.add("", f" {marker.value} ", span=False)
        elif marker.kind == mk.OPEN:
            self.open.append(marker)
            if marker.span in ("phoneme", "sub", "say-as"):
                self._protect_start = len(out.display)
        elif marker.kind == mk.CLOSE:
            if not self.open or self.open[-1].span != marker.span:
                raise MarkupError(f"</{marker.span}> closes nothing that is open", marker.at)
            opened = self.open.pop()
            if opened.span != "prosody":
                self._close(out, opened)

    def _close(self, out: _Build, opened: mk.Marker) -> None:
        """A protected span ends: its text, held in ``out`` since the open, is said its way."""
        start = self._protect_start
        held = "".join(out.display[start:])
        del out.display[start:], out.spoken[start:]
        out.d -= len(held)
        out.s = sum(len(s) for s in out.spoken)
        out.spans = [sp for sp in out.spans if sp[0] < out.d]
        if opened.span == "sub":
            said = str(opened.value)
        elif opened.span == "phoneme":
            said = f"[{held.strip()}](/{opened.value}/)" if self.english(held) and held.strip() else held
        else:
            said = say_as(held, str(opened.value), opened.detail, british=self.lang == "b")
        out.add(held, said if said.strip() else "")

    def _text(self, out: _Build, text: str) -> None:
        if not text:
            return
        if any(m.span in ("phoneme", "sub", "say-as") for m in self.open):
            out.add(text, text, span=False)  # held for the span's close
            return
        last = 0
        for match in self.lexicon.find(text) if self.lexicon else ():
            self._plain(out, text[last : match.start])
            word = text[match.start : match.end]
            if match.phonemes and self.english(text):
                out.add(word, f"[{word}](/{match.phonemes}/)")
            else:
                out.add(word, match.said or word)
            last = match.end
        self._plain(out, text[last:])

    def _plain(self, out: _Build, text: str) -> None:
        """Emoji, then (English) normalization; words between replacements pair one to one."""
        if not text:
            return
        said: list[Spoken] = []
        masked = text
        if self.emoji != "keep":
            for e in emoji.emoji_list(text):
                a, b = e["match_start"], e["match_end"]
                name = emoji.demojize(e["emoji"], delimiters=("", "")).replace("_", " ") if self.emoji == "name" else ""
                said.append(Spoken(a, b, f" {name} " if name else _emoji_gap(text, a, b)))
                masked = masked[:a] + " " * (b - a) + masked[b:]
        if self.normalize and self.english(text):
            said += normalize(masked, british=self.lang == "b")
        said.sort(key=lambda x: x.start)
        at = 0
        for sp in said:
            if sp.start < at:
                continue
            self._verbatim(out, text[at : sp.start])
            out.add(text[sp.start : sp.end], sp.text)
            at = sp.end
        self._verbatim(out, text[at:])

    @staticmethod
    def _verbatim(out: _Build, text: str) -> None:
        at = 0
        for m in _WORD.finditer(text):
            if m.start() > at:
                gap = text[at : m.start()]
                out.add(gap, _spaced(gap), span=False)
            out.add(m.group(), m.group())
            at = m.end()
        if at < len(text):
            gap = text[at:]
            out.add(gap, _spaced(gap), span=False)

    def _finish(self, out: _Build, rate: float) -> Segment:
        display, spoken = "".join(out.display), "".join(out.spoken)
        lead = len(display) - len(display.lstrip())
        said = len(spoken) - len(spoken.lstrip())
        spans = tuple((a - lead, b - lead, c - said, d - said) for a, b, c, d in out.spans)
        pause, self.pause_s = self.pause_s, 0.0
        return Segment(display.strip(), spoken.strip(), spans, pause, rate)

    def end(self) -> None:
        """The input ended: a span still open is an error."""
        if self.open:
            opened = self.open[0]
            raise MarkupError(f"<{opened.span}> is never closed", opened.at)
