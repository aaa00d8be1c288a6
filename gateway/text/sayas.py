"""SSML ``<say-as>``: how the text it holds is read, whatever the voice's language rules say."""

from __future__ import annotations

import re

from . import numbers as nb
from .dates import MONTH_NAMES
from .english import normalize
from .web import phone

__all__ = ["say_as"]

_SYMBOL_NAMES = {"-": "dash", ".": "dot", "@": "at", "_": "underscore", "/": "slash", "#": "hash", "+": "plus"}


def _spell(text: str) -> str:
    out = []
    for ch in text:
        if ch.isdigit():
            out.append(nb.digits(ch))
        elif ch.isalpha():
            out.append(ch.upper())
        elif ch in _SYMBOL_NAMES:
            out.append(_SYMBOL_NAMES[ch])
    return " ".join(out)


def _date(text: str, fmt: str, british: bool) -> str | None:
    parts = [p for p in re.split(r"[-/.\s]+", text.strip()) if p]
    if not parts or not all(p.isdigit() for p in parts):
        return None
    order = fmt or ("ymd" if len(parts[0]) == 4 else ("dmy" if british else "mdy"))
    values = dict(zip(order, parts))
    said = []
    if "m" in values and 1 <= int(values["m"]) <= 12:
        month = MONTH_NAMES[int(values["m"]) - 1]
        if "d" in values:
            day = nb.ordinal(values["d"], british)
            said.append(f"the {day} of {month}" if british else f"{month} {day}")
        else:
            said.append(month)
    elif "d" in values:
        said.append(f"the {nb.ordinal(values['d'], british)}")
    if "y" in values:
        y = values["y"]
        said.append(nb.year(y if len(y) == 4 else "20" + y))
    return ", ".join(said) if said else None


def _english(text: str, british: bool) -> str:
    out, last = [], 0
    for sp in normalize(text, british=british):
        out += [text[last : sp.start], sp.text]
        last = sp.end
    return "".join(out) + text[last:]


def say_as(text: str, interpret: str, fmt: str = "", *, british: bool = False) -> str:
    bare = text.strip()
    if interpret in ("characters", "spell-out", "letters", "verbatim"):
        return _spell(bare)
    if interpret == "digits":
        return nb.digits(bare)
    if interpret == "telephone":
        return phone(bare)
    if interpret == "date":
        return _date(bare, fmt, british) or _english(bare, british)
    if interpret in ("cardinal", "number") and re.fullmatch(r"-?[\d,]+(?:\.\d+)?", bare):
        return nb.number(bare, british)
    if interpret == "ordinal" and re.fullmatch(r"\d+(?:st|nd|rd|th)?", bare):
        return nb.ordinal(re.sub(r"\D", "", bare), british)
    return _english(bare, british)
