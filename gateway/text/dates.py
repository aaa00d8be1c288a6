"""Dates and clock times as said: the readings the English rules (``english.py``) and SSML's
``<say-as>`` share."""

from __future__ import annotations

from . import numbers as nb

__all__ = ["MONTH_NAMES", "clock_words", "date_words"]

MONTH_NAMES = "January February March April May June July August September October November December".split()


def date_words(month: int, day: int, yr: str | None, british: bool) -> str | None:
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return None
    name = MONTH_NAMES[month - 1]
    said = f"the {nb.ordinal(day, british)} of {name}" if british else f"{name} {nb.ordinal(day)}"
    if yr:
        said += f", {nb.year(yr if len(yr) == 4 else '20' + yr)}"
    return said


MONTH_NAMES = "January February March April May June July August September October November December".split()


def clock_words(hour: str, minute: str | None, ampm: str | None, british: bool) -> str | None:
    h, mi = int(hour), int(minute or 0)
    if h > 24 and not ampm and mi <= 59 and h < 100:  # a duration, minutes and seconds: "52:14"
        return f"{nb.cardinal(h)} {nb.cardinal(mi) if mi >= 10 else 'oh ' + nb.cardinal(mi)}"
    if h > 24 or mi > 59 or (ampm and not 1 <= h <= 12):
        return None
    said = nb.cardinal(h, british)
    if mi:
        said += f" oh {nb.cardinal(mi)}" if mi < 10 else f" {nb.cardinal(mi, british)}"
    elif not ampm:
        said += " hundred" if h > 12 or hour.startswith("0") else " o'clock"
    return said + (f" {ampm.upper()} M" if ampm else "")
