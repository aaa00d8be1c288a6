"""English normalization before G2P: what a person says for what an LLM writes.

``normalize(text, british=...)`` returns ``Spoken`` replacements: each a span of ``text`` and
the words said for it. One scanner regex holds every category as a named alternative, in order
of priority (the earliest match in the text wins; at one place, the first alternative): URLs,
emails, phone numbers, dates, times, money, ranges, fractions, ordinals, numbers with units and
symbols, version strings, abbreviations (with context: "St." before a name is Saint, after one
Street), numbers. What no rule matches is left as written, for misaki (which reads words,
acronyms such as "U.S." and "NASA", and hyphenated words itself).

Context rules read only the segment (a sentence or less): that is what the streaming segmenter
hands over, and what keeps the cost per segment small and bounded.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from . import numbers as nb
from .abbreviations import abbreviation, month_number
from .dates import MONTH_NAMES, clock_words, date_words
from .tables import SYMBOLS as _SYMBOLS
from .tables import UNITS as _UNITS
from .tables import VULGAR as _VULGAR
from .web import email, phone, url

__all__ = ["Spoken", "normalize"]


@dataclass(frozen=True, slots=True)
class Spoken:
    start: int
    end: int
    text: str  # what is said for text[start:end] ("" to say nothing)


_ENDS = re.compile(r"[\s\"'”’)\]]*")
_NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
_MONTHS = (
    r"Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?"
    r"|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?"
)
_UNIT_RE = "|".join(re.escape(u) for u in sorted(_UNITS, key=len, reverse=True))
_SCALE_RE = r"(?:thousand|million|billion|trillion|bn|mn|[kKMBT])"
_CUR_SYM = r"US\$|[$£€¥₹₩₽₿]"
_CUR_CODE = r"USD|EUR|GBP|JPY|INR|CAD|AUD|CHF|CNY"

_RULES: list[tuple[str, str]] = [
    (
        "url",
        r"\b(?:https?://|www\.)[^\s<>\"'`]+[^\s<>\"'`.,;:!?)\]]"
        r"|\b[A-Za-z0-9][A-Za-z0-9-]*(?:\.[A-Za-z0-9-]+)*\.(?:com|org|net|io|ai|dev|app|co|edu|gov|uk|de|fr|us|me"
        r"|info|ly|gg|tv|xyz|tech|cloud|sh|so|ca|au|in|jp|eu)\b(?:/[^\s<>\"'`]*[^\s<>\"'`.,;:!?)\]])?",
    ),
    ("email", r"\b[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+\b"),
    (
        "phone",
        r"(?<![\w.])(?:\+\d{1,3}[\s.-]?|1[\s.-])?(?:\(\d{3}\)\s?|\d{3}[\s.-])\d{3}[\s.-]\d{4}(?![\w])"
        r"|(?<![\w.])\+\d{1,3}(?:[\s.-]\d{1,4}){2,4}(?![\w])|(?<![\w.,-])\d{3}-\d{4}(?![\w-])",
    ),
    ("iso_date", r"\b(\d{4})-(\d{2})-(\d{2})\b"),
    ("num_date", r"(?<![\w/.])(\d{1,2})/(\d{1,2})/(\d{4}|\d{2})(?![\w/])"),
    ("month_day", rf"\b({_MONTHS})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?\b(?!:)(?:,?\s+(\d{{4}})\b)?"),
    ("day_month", rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTHS})\b\.?(?:,?\s+(\d{{4}})\b)?"),
    (
        "time_range",
        r"\b(\d{1,2}(?::\d{2})?)\s?(?:([AaPp])\.?[Mm]\.?)?\s?[-–—]\s?(\d{1,2}(?::\d{2})?)\s?([AaPp])\.?[Mm]\b\.?"
        r"|\b(\d{1,2}:\d{2})\s?[-–—]\s?(\d{1,2}:\d{2})\b",
    ),
    ("time", r"\b(\d{1,2}):(\d{2})(?::(\d{2}))?(?:\s?([AaPp])\.?[Mm]\b\.?)?|\b(\d{1,2})\s?([AaPp])\.?[Mm]\b\.?"),
    (
        "money",
        rf"(-)?({_CUR_SYM})\s?({_NUM})(?:\s?({_SCALE_RE})\b)?(?:\s?[-–]\s?(?:{_CUR_SYM})?({_NUM}))?"
        rf"|\b({_NUM})\s?({_SCALE_RE}\s)?({_CUR_CODE})\b|(\d+)¢",
    ),
    ("range", rf"(?<![\w.,/-])({_NUM})\s?[-–—]\s?({_NUM})(?![\w/-]|[.,]\d)(?:\s?({_UNIT_RE})(?![A-Za-z]))?"),
    ("mixed_fraction", r"(?<![\w./])(\d+)\s(\d{1,2})/(\d{1,3})(?![\w/])"),
    ("fraction", rf"(?:(?<![\w./])(\d+)/(\d+)(?![\w/])|([½⅓⅔¼¾⅕⅛⅜]))(?:\s?({_UNIT_RE})(?![A-Za-z0-9]))?"),
    ("ordinal", r"\b(\d+)(st|nd|rd|th)\b"),
    ("hashnum", r"(?<![\w&])#(\d+)\b"),
    ("duration", r"\b(\d+)\s?h(?:rs?)?\s?(\d{1,2})\s?m(?:in)?\b"),
    ("citation", r"\s?\[\d{1,3}\](?:\[\d{1,3}\])*"),
    ("dimensions", r"(?<![\w.])(\d+(?:\.\d+)?)\s?[x×]\s?(\d+(?:\.\d+)?)(?:\s?[x×]\s?(\d+(?:\.\d+)?))?(?![\w.])"),
    (
        "per",
        r"(?<=\S)/(mo|month|yr|year|day|night|week|wk|hr|hour|min|minute|sec|second|person|user|seat|unit"
        r"|kg|lb|gallon|mile|km|page|item|GB|MB|TB)\b",
    ),
    ("version", r"\b[vV](\d+(?:\.\d+)*)\b|\b(\d+\.\d+\.\d+(?:\.\d+)*)\b"),
    ("unit", rf"(?<![\w.])(-)?({_NUM})\s?(?:({_SCALE_RE})\s)?({_UNIT_RE})(?![A-Za-z0-9])"),
    ("code", r"\b(?=[A-Z0-9]*\d)(?=[A-Z0-9]*[A-Z])[A-Z0-9]{7,}\b"),
    ("weekday", r"\b(Mon|Tue|Tues|Wed|Thu|Thur|Thurs|Fri|Sat|Sun)(?=,)"),
    ("scaled", rf"(?<![\w.])({_NUM})\s?({_SCALE_RE})(?![A-Za-z0-9])"),
    ("decade", r"(?<![\w'’])['’]?(\d{2}|\d{4})s\b"),
    ("abbr", r"(?<![\w.])(?:[A-Za-z]{1,6}\.(?:[A-Za-z]\.)?|approx|vs|etc|w/o|w/)(?![\w])"),
    ("number", rf"(?<![\w.])(-)?({_NUM})(?![\w])"),
    ("slash", r"\b([A-Za-z]{1,12})/(?!(?:km|mi|h|hr|mo|yr|wk)\b)([A-Za-z]{1,12})\b"),
    ("symbol", r"(?<=\s)(?:->|>=|<=|[&+=±×÷→←≈*>/])(?=\s)|&|[~≈](?=\d)|[±×÷→←≥≤]|(?<![\w.])@(?=\w)"),
    ("drop", r"[_#^|\\•*]+"),
]
_SCANNER = re.compile("|".join(f"(?P<{name}>{pattern})" for name, pattern in _RULES))
_GROUPS = {name: (_SCANNER.groupindex[name], re.compile(pattern).groups) for name, pattern in _RULES}


def normalize(text: str, *, british: bool = False) -> list[Spoken]:
    """Replacements for the written forms in ``text``, in order, not overlapping."""
    out: list[Spoken] = []
    for m in _SCANNER.finditer(text):
        kind = m.lastgroup or ""
        said = _HANDLERS[kind](m, text, british)
        if said is None:
            continue
        if m.group().endswith(".") and not said.endswith(".") and _ENDS.fullmatch(text, m.end()):
            said += "."  # "at 3 p.m." ends the sentence too
        out.append(Spoken(m.start(), m.end(), said))
    return out


def _g(m: re.Match[str], name: str) -> list[str | None]:
    """The groups inside the named alternative ``name``."""
    start, count = _GROUPS[name]
    return [m.group(start + 1 + k) for k in range(count)]


def _iso_date(m: re.Match[str], text: str, british: bool) -> str | None:
    y, mo, d = _g(m, "iso_date")
    return date_words(int(mo or 0), int(d or 0), y, british)


def _num_date(m: re.Match[str], text: str, british: bool) -> str | None:
    a, b, y = _g(m, "num_date")
    first, second = int(a or 0), int(b or 0)
    month, day = (second, first) if british or first > 12 else (first, second)
    return date_words(month, day, y, british)


def _month_day(m: re.Match[str], text: str, british: bool) -> str | None:
    mon, d, y = _g(m, "month_day")
    return date_words(month_number(mon or ""), int(d or 0), y, british)


def _day_month(m: re.Match[str], text: str, british: bool) -> str | None:
    d, mon, y = _g(m, "day_month")
    month, day = month_number(mon or ""), int(d or 0)
    if not (1 <= day <= 31):
        return None
    said = f"the {nb.ordinal(day, british)} of {MONTH_NAMES[month - 1]}"
    return said + (f", {nb.year(y)}" if y else "")


def _time(m: re.Match[str], text: str, british: bool) -> str | None:
    h, mi, _sec, ap, h2, ap2 = _g(m, "time")
    if h2 is not None:
        return clock_words(h2, None, ap2, british)
    return clock_words(h or "0", mi, ap, british)


def _time_range(m: re.Match[str], text: str, british: bool) -> str | None:
    a, ap1, b, ap2, a2, b2 = _g(m, "time_range")
    if a2 is not None:  # "10:30-11:30"
        a, b = a2, b2
    elif ap1 is None:  # "9-11am": "nine to eleven A M"
        h, _, mi = (a or "0").partition(":")
        said = nb.cardinal(h, british) + (f" {nb.cardinal(mi)}" if mi and int(mi) else "")
        end = clock_words(*(b or "0").partition(":")[::2], ap2, british)
        return f"{said} to {end}" if end and int(h) <= 12 else None
    first = clock_words(*(a or "0").partition(":")[::2], ap1, british)
    second = clock_words(*(b or "0").partition(":")[::2], ap2, british)
    return f"{first} to {second}" if first and second else None


def _money(m: re.Match[str], text: str, british: bool) -> str | None:
    neg, sym, amount, scale, upper, amount2, scale2, code, cents = _g(m, "money")
    if cents:
        return nb.money(cents, "¢", british=british)
    if code:
        return nb.money(amount2 or "0", code, (scale2 or "").strip(), british)
    said = nb.money(amount or "0", sym or "$", scale or "", british)
    if upper:
        high = nb.money(upper, sym or "$", scale or "", british)
        said = f"{nb.number(amount or '0', british)} to {high}"
    return f"minus {said}" if neg else said


def _range(m: re.Match[str], text: str, british: bool) -> str | None:
    a, b, unit = _g(m, "range")
    years = all(x and len(x) == 4 and x.isdigit() and 1000 <= int(x) <= 2100 for x in (a, b))
    read = nb.year if years else (lambda x: nb.number(x, british))
    said = f"{read(a or '0')} to {read(b or '0')}"
    return f"{said} {_UNITS[unit][1]}" if unit else said


def _mixed_fraction(m: re.Match[str], text: str, british: bool) -> str | None:
    w, a, b = _g(m, "mixed_fraction")
    num, den = int(a or 0), int(b or 1)
    if not 0 < num < den:
        return None
    part = "a half" if (num, den) == (1, 2) else nb.fraction(num, den, british)
    return f"{nb.cardinal(w or '0', british)} and {part}"


_DATE_BEFORE = re.compile(r"\b(?:on|by|until|till|before|after|from|due|since|of)\s+$", re.IGNORECASE)


def _fraction(m: re.Match[str], text: str, british: bool) -> str | None:
    a, b, vulgar, unit = _g(m, "fraction")
    if a and b and not unit and (a[0] == "0" or b[0] == "0" or _DATE_BEFORE.search(text[: m.start()])):
        first, second = int(a), int(b)  # "03/15", "on 3/15": a date without its year
        month, day = (second, first) if british or first > 12 else (first, second)
        if 1 <= month <= 12 and 1 <= day <= 31:
            return date_words(month, day, None, british)
    num, den = _VULGAR[vulgar] if vulgar else (int(a or 0), int(b or 0))
    if den == 0 or num == den or (num, den) == (24, 7):
        said = f"{nb.cardinal(num, british)} {nb.cardinal(den, british)}"  # "50/50", "24/7"
    else:
        said = nb.fraction(num, den, british)
    if unit:  # "1/2 tsp": "one half teaspoon"; "3/2 cups": "three halves cups"
        said += " " + _UNITS[unit][0 if num < den else 1]
    return said


def _ordinal(m: re.Match[str], text: str, british: bool) -> str | None:
    return nb.ordinal(_g(m, "ordinal")[0] or "0", british)


_PER = {"mo": "month", "yr": "year", "wk": "week", "hr": "hour", "min": "minute", "sec": "second"}


def _per(m: re.Match[str], text: str, british: bool) -> str | None:
    (unit,) = _g(m, "per")
    unit = unit or ""
    return f" per {_PER.get(unit) or _UNITS.get(unit, (unit,))[0]}"


def _dimensions(m: re.Match[str], text: str, british: bool) -> str | None:
    return " by ".join(nb.number(x, british) for x in _g(m, "dimensions") if x)


def _duration(m: re.Match[str], text: str, british: bool) -> str | None:
    h, mi = (int(x or 0) for x in _g(m, "duration"))  # "4h 05m": four hours five minutes
    return f"{nb.cardinal(h)} {'hour' if h == 1 else 'hours'} {nb.cardinal(mi)} {'minute' if mi == 1 else 'minutes'}"


def _hashnum(m: re.Match[str], text: str, british: bool) -> str | None:
    digits = _g(m, "hashnum")[0] or "0"  # "#1": number one; "order #12345": number one two three four five
    return f"number {nb.cardinal(digits, british) if len(digits) < 4 else nb.digits(digits)}"


def _version(m: re.Match[str], text: str, british: bool) -> str | None:
    v, dotted = _g(m, "version")
    parts = (v or dotted or "").split(".")
    said = " point ".join(nb.number(p, british) for p in parts)
    named = text[: m.start()].rstrip().lower().endswith("version")  # "Version v2" says it once
    return f"version {said}" if v and not named else said


def _unit(m: re.Match[str], text: str, british: bool) -> str | None:
    neg, amount, scale, unit = _g(m, "unit")
    one, many = _UNITS[unit or "%"]
    value = nb.number(amount or "0", british)
    if scale:
        value += f" {nb.SCALES[scale]}"
    word = one if (amount == "1" and not scale) else many
    return f"{'minus ' if neg else ''}{value} {word}"


_PLACE = re.compile(r"(?:room|apt|apartment|suite|unit|gate|seat|flight|platform|building|floor|terminal|row|bay)\s*$")
_DAYS = {"Mon": "Monday", "Tue": "Tuesday", "Wed": "Wednesday", "Thu": "Thursday", "Fri": "Friday", "Sat": "Saturday"}
_DAYS |= {"Sun": "Sunday", "Tues": "Tuesday", "Thur": "Thursday", "Thurs": "Thursday"}


def _scaled(m: re.Match[str], text: str, british: bool) -> str | None:
    amount, scale = _g(m, "scaled")
    if len(scale or "") == 1 and _PLACE.search(text[: m.start()].lower()):
        return f"{nb.number(amount or '0', british)} {scale}"  # "Room 4B", "Gate 12A"
    return f"{nb.number(amount or '0', british)} {nb.SCALES[scale or 'k']}"


def _code(m: re.Match[str], text: str, british: bool) -> str | None:
    """A tracking number or booking code ("1Z999AA10123456784"): read out character by character."""
    return " ".join(nb.digits(c) if c.isdigit() else c for c in m.group())


def _decade(m: re.Match[str], text: str, british: bool) -> str | None:
    (d,) = _g(m, "decade")
    d = d or "00"
    if len(d) == 4:
        said = nb.year(d)
    else:
        said = "hundred" if d == "00" else nb.cardinal(d)
    if said.endswith("y"):
        return said[:-1] + "ies"
    return said + ("es" if said.endswith("x") else "s")


def _abbr(m: re.Match[str], text: str, british: bool) -> str | None:
    return abbreviation(m.group(), text, m.start(), m.end())


def _number(m: re.Match[str], text: str, british: bool) -> str | None:
    neg, amount = _g(m, "number")
    amount = amount or "0"
    bare = amount.replace(",", "")
    if neg and m.start() > 0 and not text[m.start() - 1].isspace():
        return None
    if not neg and len(bare) == 4 and bare.isdigit() and 1100 <= int(bare) <= 2099 and "," not in amount:
        return nb.year(bare)
    said = nb.number(amount, british)
    return f"minus {said}" if neg else said


def _slash(m: re.Match[str], text: str, british: bool) -> str | None:
    a, b = _g(m, "slash")
    if (a, b) == ("and", "or"):
        return "and or"
    if a and b and len(a) > 1 and b.islower():
        return f"{a} or {b}"
    return f"{a} {b}"


def _symbol(m: re.Match[str], text: str, british: bool) -> str | None:
    if m.group() == ">":  # "x > 5"; "Settings > Bluetooth": a menu path
        return " greater than " if text[m.end() :].lstrip()[:1].isdigit() else ", then "
    return f" {_SYMBOLS.get(m.group(), '')} "


_HANDLERS: dict[str, Callable[[re.Match[str], str, bool], str | None]] = {
    "url": lambda m, t, b: url(m.group()),
    "email": lambda m, t, b: email(m.group()),
    "phone": lambda m, t, b: phone(m.group()),
    "iso_date": _iso_date,
    "num_date": _num_date,
    "month_day": _month_day,
    "day_month": _day_month,
    "time_range": _time_range,
    "time": _time,
    "money": _money,
    "range": _range,
    "mixed_fraction": _mixed_fraction,
    "fraction": _fraction,
    "ordinal": _ordinal,
    "hashnum": _hashnum,
    "duration": _duration,
    "citation": lambda m, t, b: "",
    "dimensions": _dimensions,
    "per": _per,
    "version": _version,
    "unit": _unit,
    "scaled": _scaled,
    "code": _code,
    "weekday": lambda m, t, b: _DAYS[m.group()],
    "decade": _decade,
    "abbr": _abbr,
    "number": _number,
    "slash": _slash,
    "symbol": _symbol,
    "drop": lambda m, t, b: " ",
}
