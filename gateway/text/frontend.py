"""The text front-end: what an LLM writes in, segments to show and to say out.

::

    feed(chunk) -> MarkupFilter -> Segmenter -> Reader -> [Segment(display, spoken, spans, pause_s, rate)]
                   (markdown.py)   (core)       (reader.py)

One ``TextFrontEnd`` per reply, in the pipeline that every route drives (WebSocket, SSE,
OpenAI's speech route, Wyoming, the model container), so every engine gets clean text. The
filter holds back only an unfinished construct; the segmenter decides cuts on the filtered
text exactly as before; the reader works on one segment at a time. With ``TextOptions.enabled``
off, text goes to the segmenter as it came and each piece is spoken as written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from . import markers as mk
from .lexicon import Lexicon
from .markdown import MarkupFilter
from .reader import Reader, Segment
from .segmenter import Segmenter
from .speakable import SPEAKABLE

__all__ = ["Segment", "TextFrontEnd", "TextOptions"]


@dataclass(frozen=True, slots=True)
class TextOptions:
    """The request's switches (defaults from the settings ``text_*``; parsed with the other
    request options, ``core.options``)."""

    enabled: bool = True  # ``text_frontend``: off = speak the text as given (no part below runs)
    markdown: bool = True
    emoji: str = "drop"  # drop | name | keep
    normalize: bool = True
    markup: bool = True  # pauses, SSML, inline phonemes
    code: str = "notice"  # fenced code blocks: notice | read | skip
    pronunciations: Mapping[str, str] = field(default_factory=dict)


class TextFrontEnd:
    """One reply's text, chunk by chunk, into segments (``feed``/``flush``/``end``)."""

    def __init__(self, options: TextOptions, *, lang: str, first_clause_words: int = 0, max_chars: int = 300) -> None:
        self.options = options
        self.table = mk.Markers()
        self.filter = (
            MarkupFilter(self.table, markdown=options.markdown, markup=options.markup, code=options.code)
            if options.enabled
            else None
        )
        self.segmenter = Segmenter(
            first_clause_words=first_clause_words,
            max_chars=max_chars,
            speakable=mk.SPEAKING if options.enabled else SPEAKABLE,  # spoken notices count
        )
        lexicon = Lexicon(options.pronunciations) if options.pronunciations else None
        self.reader = Reader(
            self.table, lang=lang, normalize=options.normalize, emoji_mode=options.emoji, lexicon=lexicon
        )

    @property
    def pending(self) -> str:
        """Text received and not yet in a segment (for forecasts), markers removed."""
        held = self.filter.held if self.filter is not None else ""
        return mk.strip_markers(self.segmenter.pending + held)

    def feed(self, text: str) -> list[Segment]:
        if self.filter is None:
            return [Segment.plain(p) for p in self.segmenter.feed(text)]
        return self._read(self.segmenter.feed(self.filter.feed(mk.strip_markers(text))))

    def flush(self) -> list[Segment]:
        """Speak what is buffered now (a client's ``flush``, or the end of input)."""
        if self.filter is None:
            return [Segment.plain(p) for p in self.segmenter.flush()]
        out = self._read(self.segmenter.feed(self.filter.flush()))
        rest = self.segmenter.pending
        tail = self.segmenter.flush()
        out += self._read(tail) if tail else self._trailing(rest) if rest else []
        return out

    def end(self) -> list[Segment]:
        out = self.flush()
        if self.filter is not None:
            self.reader.end()
        return out

    def _read(self, pieces: list[str]) -> list[Segment]:
        return [self.reader.read(p) for p in pieces]

    def _trailing(self, rest: str) -> list[Segment]:
        """What the segmenter drops at a flush (nothing to say in it) may still hold markers:
        a closing tag, a pause at the very end (said as silence)."""
        seg = self.reader.read(rest)
        return [seg] if seg.pause_s > 0 else []
