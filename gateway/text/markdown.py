"""A streaming filter: markdown and control markup out of an LLM's token stream.

``MarkupFilter.feed(chunk)`` returns the text that is now certain, with markdown removed
(emphasis, headings, list markers and numbering, links to their text, images to their alt text,
inline code to its content, fenced code blocks to a short notice or their lines, tables to
their cells, block quotes, rules, HTML tags, entities, backslash escapes) and control markup
(``[pause:0.5s]``, SSML tags, misaki's ``[word](/phonemes/)``) turned into marker characters
(``markers.py``) at the place where they act. It holds back only what it cannot decide yet: a
line's first few characters (is it ``## ``, ``- ``, ``1. ``, a fence, a rule, a table row?),
a run of ``*``/``_`` until the character after it, a ``[``, ``<``, ``&`` or backtick until
its construct closes or cannot (each bounded: 300 characters for link text and tags, 1,000 for
a URL), so a token stream gives exactly what the whole text gives and first audio waits on no
more than the construct it is in the middle of.

Why hand-written: the markdown libraries (markdown-it-py, mistune, commonmark) parse whole
documents and give no partial result for an unfinished one; LiveKit's filter is regex passes
over a buffer with its own hold-back rules; neither keeps control markup. The rules here are
CommonMark's where it matters for speech (flanking ``*``/``_`` runs, intraword ``_`` kept,
fences of three or more backticks or tildes), and lenient elsewhere (any indentation before a
list marker, table rows by their pipes).
"""

from __future__ import annotations

import html
from collections.abc import Callable

import regex

from . import markers as mk
from .markup import control_tag, pause_marker

__all__ = ["CODE_MODES", "MarkupFilter"]

CODE_MODES = ("notice", "read", "skip")
_NOTICE = "Code omitted."
_LINK = regex.compile(r"(!?)\[([^\[\]\n]{0,300})\]\(\s*([^()\s]{0,1000}|[^)\n]{0,1000})\s*\)")
_PAUSE = regex.compile(r"\[\s*pause\s*:[^\]\n]{0,40}\]", regex.IGNORECASE)
_TAG = regex.compile(r"<(/?)([A-Za-z][\w:-]{0,40})((?:\s+[^<>\n]{0,300}?)?)\s*(/?)>")
_AUTOLINK = regex.compile(r"<((?:https?|mailto|ftp):[^<>\s]{1,1000})>", regex.IGNORECASE)
_ENTITY = regex.compile(r"&(?:#\d{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
_HEADING = regex.compile(r"[ \t]*#{1,6}(?:[ \t]+|(?=\n))")
_QUOTE = regex.compile(r"[ \t]*(?:>[ \t]*)*>(?:[ \t]+|(?=[^ \t>]))")
# a bullet, and a task list's box after it; the lookaheads let a partial match wait for "[x] "
_BULLET = regex.compile(r"[ \t]*[-*+•][ \t]+(?:\[[ xX]\][ \t]+|(?=[^\[])|(?=\[[^ xX\]])|(?=\[[ xX][^\]]))")
_NUMBERED = regex.compile(r"[ \t]*\d{1,3}[.)][ \t]+")
_FENCE = regex.compile(r"[ \t]*(`{3,}|~{3,})[^\n]*\n")
_RULE = regex.compile(r"[ \t]*(?:(?:\*[ \t]*){3,}|(?:-[ \t]*){3,}|(?:_[ \t]*){3,}|(?:=[ \t]*){3,})\n")
_TABLE_SEP = regex.compile(r"[ \t]*\|?(?:[ \t]*:?-{1,}:?[ \t]*\|)+(?:[ \t]*:?-{1,}:?[ \t]*)?\n")
_LINE_PATTERNS = (_FENCE, _RULE, _TABLE_SEP, _HEADING, _QUOTE, _BULLET, _NUMBERED)
_BLOCK_TAGS = frozenset("p div br li ul ol tr table h1 h2 h3 h4 h5 h6 blockquote pre hr s".split())
_ESCAPABLE = frozenset("\\`*_{}[]()#+-.!|<>~&")


class MarkupFilter:
    """Markdown and control markup out of a token stream (``feed``/``flush``)."""

    def __init__(self, table: mk.Markers, *, markdown: bool = True, markup: bool = True, code: str = "notice") -> None:
        if code not in CODE_MODES:
            raise ValueError(f"code must be one of {CODE_MODES}")
        self.table, self.markdown, self.markup, self.code = table, markdown, markup, code
        self._buf = ""
        self._seen = 0  # characters of input before ``_buf`` (positions in error messages)
        self._line_start = True
        self._block = False  # the current line is a heading, list item or table row
        self._content = False  # the current line has text
        self._fence = ""  # inside a fenced code block: its opening run
        self._table = False  # the current line is a table row
        self._last = "\n"  # the character before ``_buf``

    @property
    def held(self) -> str:
        """Input held back: the construct it is in the middle of, not yet decided."""
        return self._buf

    def feed(self, text: str) -> str:
        self._buf += text
        return self._run(final=False)

    def flush(self) -> str:
        """The rest: the input ends here (as if with a newline, which is not returned)."""
        self._buf += "\n"
        out = self._run(final=True)
        return out[:-1] if out.endswith("\n") else out

    # -- the loop ------------------------------------------------------------------------
    def _run(self, *, final: bool) -> str:
        out: list[str] = []
        buf, i = self._buf, 0
        handlers: dict[str, Callable[[str, int, bool, list[str]], int | None]] = {
            "*": self._emphasis,
            "_": self._emphasis,
            "~": self._strike,
            "`": self._code_span,
            "[": self._bracket,
            "!": self._image,
            "<": self._angle,
            "&": self._entity,
            "\\": self._escape,
            "|": self._pipe,
        }
        while i < len(buf):
            if self._line_start:
                j = self._line(buf, i, final, out)
                if j is None:
                    break
                i = j
                continue
            ch = buf[i]
            if ch == "\n":
                self._newline(out)
                i += 1
                continue
            if self._fence:
                j = buf.find("\n", i)
                end = len(buf) if j < 0 else j
                if self.code == "read":
                    out.append(buf[i:end])
                i = end
                continue
            handler = handlers.get(ch) if (self.markdown or ch in "[<") else None
            j = handler(buf, i, final, out) if handler is not None else i
            if j is None:
                break
            if j == i:
                out.append(ch)
                self._content = self._content or not ch.isspace()
                j = i + 1
            i = j
        self._buf = buf[i:]
        self._seen += i
        if i:
            self._last = buf[i - 1]
        return "".join(out)

    def _newline(self, out: list[str]) -> None:
        if self._block and self._content and not self._fence:
            out.append(self.table.add(mk.Marker(mk.END)))
        out.append("\n")
        self._line_start, self._block, self._content, self._table = True, False, False, False

    def _line(self, buf: str, i: int, final: bool, out: list[str]) -> int | None:
        """At a line's start: its block markup, once its first characters decide it."""
        if not self.markdown:
            self._line_start = False
            return i
        for pattern in _LINE_PATTERNS if not self._fence else (_FENCE,):
            m = pattern.match(buf, i, partial=not final)
            if m is None:
                continue
            if m.partial:
                return None  # wait: the next characters decide
            return self._line_kind(pattern, m, out)
        self._line_start = False
        if self._fence:
            return i
        if buf.startswith("|", i) or (buf[i] in " \t" and buf[i:].lstrip(" \t").startswith("|")):
            self._table = self._block = True
        return i

    def _line_kind(self, pattern: regex.Pattern[str], m: regex.Match[str], out: list[str]) -> int:
        if pattern is _FENCE:
            run = m.group(1)
            if not self._fence:
                self._fence = run
                if self.code == "notice":
                    out.append(self.table.add(mk.Marker(mk.NOTICE, value=_NOTICE, at=self._seen + m.start())))
                    out.append("\n")
            elif run[0] == self._fence[0] and len(run) >= len(self._fence):
                self._fence = ""
            return m.end()  # the fence line and its newline: the line start comes again
        if pattern in (_RULE, _TABLE_SEP):
            return m.end()  # the whole line and its newline
        self._line_start = False
        if pattern is not _QUOTE:
            self._block = True
        return m.end()

    # -- inline constructs: each returns the next index, i (not its construct), or None (wait)
    def _emphasis(self, buf: str, i: int, final: bool, out: list[str]) -> int | None:
        ch, j = buf[i], i
        while j < len(buf) and buf[j] == ch:
            j += 1
        if j == len(buf) and not final:
            return None
        before = buf[i - 1] if i > 0 else self._last
        after = buf[j] if j < len(buf) else " "
        if (before.isspace() and after.isspace()) or (before.isdigit() and after.isdigit()):
            return i  # "3 * 4", "2*3", a lone "_": a symbol, not emphasis
        if ch == "_" and before.isalnum() and after.isalnum():
            out.append(buf[i:j])  # snake_case
            return j
        return j

    def _strike(self, buf: str, i: int, final: bool, out: list[str]) -> int | None:
        if i + 1 >= len(buf):
            return None if not final else i
        return i + 2 if buf[i + 1] == "~" else i

    def _code_span(self, buf: str, i: int, final: bool, out: list[str]) -> int | None:
        j = i
        while j < len(buf) and buf[j] == "`":
            j += 1
        run = buf[i:j]
        close = buf.find(run, j)
        line_end = buf.find("\n", j)
        if close < 0 or (0 <= line_end < close):
            if line_end < 0 and not final and len(buf) - j <= 1000:
                return None  # the span may still close
            return j  # no closing run on this line: the backticks are dropped, the text stays
        out.append(buf[j:close].strip())
        self._content = True
        return close + len(run)

    def _bracket(self, buf: str, i: int, final: bool, out: list[str]) -> int | None:
        if self.markup:
            m = _PAUSE.match(buf, i, partial=not final)
            if m is not None:
                if m.partial:
                    return None
                out.append("\n" + pause_marker(self.table, m.group(), self._seen + i))
                return m.end()  # a pause ends the segment before it: the silence goes between two
        if not self.markdown and not self.markup:
            return i
        m = _LINK.match(buf, i, partial=not final)
        if m is None:
            return i
        if m.partial:
            return None
        return self._link(m, out)

    def _link(self, m: regex.Match[str], out: list[str]) -> int:
        image, text, url = m.group(1), m.group(2), m.group(3).strip()
        phonemes = len(url) > 2 and url[0] == "/" and url[-1] == "/" and not url.startswith("//")
        if phonemes and self.markup and not image:
            at = self._seen + m.start()
            out.append(self.table.add(mk.Marker(mk.OPEN, "phoneme", url[1:-1], at=at)))
            out.append(text)
            out.append(self.table.add(mk.Marker(mk.CLOSE, "phoneme", at=at)))
        elif not self.markdown:
            out.append(m.group())
        elif image:
            out.append(text)  # alt text, or nothing
        else:
            out.append(text if text.strip() else url)
        self._content = True
        return m.end()

    def _image(self, buf: str, i: int, final: bool, out: list[str]) -> int | None:
        if i + 1 >= len(buf):
            return None if not final else i
        if buf[i + 1] != "[":
            return i
        m = _LINK.match(buf, i, partial=not final)
        if m is None:
            return i
        return None if m.partial else self._link(m, out)

    def _angle(self, buf: str, i: int, final: bool, out: list[str]) -> int | None:
        if self.markdown:
            m = _AUTOLINK.match(buf, i, partial=not final)
            if m is not None:
                if m.partial:
                    return None
                out.append(m.group(1))
                return m.end()
        m = _TAG.match(buf, i, partial=not final)
        if m is None:
            return i
        if m.partial:
            return None
        closing, name, attrs, empty = m.group(1) == "/", m.group(2).lower(), m.group(3), m.group(4) == "/"
        at = self._seen + i
        if self.markup and name in ("p", "s"):  # SSML's paragraph and sentence (HTML's too)
            if closing or self._content:
                self._block = True
                self._newline(out)
            return m.end()
        if self.markup:
            control = control_tag(self.table, name, attrs, closing=closing, empty=empty, at=at)
            if control is not None:
                pause = control and (marker := self.table.get(control)) is not None and marker.kind == mk.PAUSE
                out.append("\n" + control if pause else control)
                return m.end()
        if not self.markdown:
            return i
        if name in _BLOCK_TAGS:
            self._newline(out)
        return m.end()

    def _entity(self, buf: str, i: int, final: bool, out: list[str]) -> int | None:
        if not self.markdown and not self.markup:
            return i
        m = _ENTITY.match(buf, i, partial=not final)
        if m is None:
            return i
        if m.partial:
            return None
        text = html.unescape(m.group())
        if text == m.group():
            return i
        out.append(text.replace("\xa0", " "))
        return m.end()

    def _escape(self, buf: str, i: int, final: bool, out: list[str]) -> int | None:
        if i + 1 >= len(buf):
            return None if not final else i
        if buf[i + 1] in _ESCAPABLE:
            out.append(buf[i + 1])
            return i + 2
        return i

    def _pipe(self, buf: str, i: int, final: bool, out: list[str]) -> int | None:
        if not self._table:
            return i
        rest = buf[i + 1 :]
        end = rest.find("\n")
        if end < 0 and not final:
            if not rest.strip(" \t"):
                return None  # the row's last pipe, or a cell to come
        elif not rest[: end if end >= 0 else len(rest)].strip(" \t"):
            return i + 1  # the row's closing pipe
        if self._content:
            out.append(", ")
        return i + 1
