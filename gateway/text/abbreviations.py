"""Abbreviations, read with their context.

Each written form has one reading, or a rule that picks one from the words around it: "Dr." is
Doctor before a name and Drive after one ("12 Oak Dr."); "St." is Saint before a name and
Street after a name or a number; "No." and "p." are "number" and "page" only before a number;
"min." and "sec." are minutes and seconds after one. A reading that ends a segment keeps a full
stop ("fans, etc." -> "fans, et cetera."), so the sentence still ends as one.
"""

from __future__ import annotations

import re

from .dates import MONTH_NAMES

__all__ = ["abbreviation", "month_number"]

# always this reading (lowercased key, period included where it is written with one)
_FIXED = {
    "mr.": "Mister",
    "mrs.": "Missus",
    "ms.": "Miz",
    "mx.": "Mix",
    "prof.": "Professor",
    "jr.": "Junior",
    "sr.": "Senior",
    "rev.": "Reverend",
    "gen.": "General",
    "capt.": "Captain",
    "lt.": "Lieutenant",
    "sgt.": "Sergeant",
    "hon.": "Honorable",
    "gov.": "Governor",
    "sen.": "Senator",
    "pres.": "President",
    "mt.": "Mount",
    "ave.": "Avenue",
    "blvd.": "Boulevard",
    "rd.": "Road",
    "ln.": "Lane",
    "hwy.": "Highway",
    "pkwy.": "Parkway",
    "apt.": "apartment",
    "ste.": "suite",
    "dept.": "department",
    "univ.": "University",
    "approx.": "approximately",
    "approx": "approximately",
    "appt.": "appointment",
    "appts.": "appointments",
    "e.g.": "for example",
    "i.e.": "that is",
    "etc.": "et cetera",
    "etc": "et cetera",
    "vs.": "versus",
    "vs": "versus",
    "cf.": "compare",
    "viz.": "namely",
    "ca.": "circa",
    "fig.": "figure",
    "figs.": "figures",
    "vol.": "volume",
    "ch.": "chapter",
    "pp.": "pages",
    "nos.": "numbers",
    "ltd.": "Limited",
    "corp.": "Corporation",
    "bros.": "Brothers",
    "inc.": "Incorporated",
    "dept": "department",
    "w/": "with",
    "w/o": "without",
    "yr.": "year",
    "yrs.": "years",
    "mo.": "month",
    "mos.": "months",
    "wk.": "week",
    "wks.": "weeks",
    "hr.": "hour",
    "hrs.": "hours",
    "mins.": "minutes",
    "tel.": "telephone",
    "ext.": "extension",
    "avg.": "average",
    "misc.": "miscellaneous",
    "temp.": "temperature",
    "qty.": "quantity",
}
_MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
_MONTH_ABBREVIATIONS = frozenset("jan feb mar apr jun jul aug sep sept oct nov dec".split())
_DAYS = {
    "mon.": "Monday",
    "tue.": "Tuesday",
    "tues.": "Tuesday",
    "wed.": "Wednesday",
    "thu.": "Thursday",
    "thur.": "Thursday",
    "thurs.": "Thursday",
    "fri.": "Friday",
    "sat.": "Saturday",
    "sun.": "Sunday",
}
_NAME_AFTER = re.compile(r"\s+[A-Z][a-z]")
_NUMBER_AFTER = re.compile(r"\s*\d")
_NAME_BEFORE = re.compile(r"(?:\b[A-Z][A-Za-z'’-]*|\d+(?:st|nd|rd|th)?)\s+$")
_NUMBER_BEFORE = re.compile(r"\d\s*$")
_PLACES = frozenset(("Street", "Drive", "Avenue", "Road", "Boulevard", "Lane"))
_SENTENCE_AFTER = re.compile(r"\s+[A-Z][a-z]")
_END = re.compile(r"[\s\"'”’)\]*_]*$")


def month_number(written: str) -> int:
    return _MONTHS.index(written[:3].lower()) + 1


def _contextual(low: str, text: str, start: int, end: int) -> str | None:
    before, after = text[:start], text[end:]
    if low in ("dr.", "st."):
        name_before = _NAME_BEFORE.search(before) is not None
        name_after = _NAME_AFTER.match(after) is not None
        street = name_before and not (name_after and before.rstrip().endswith(("at", "on", "near")))
        if low == "dr.":
            return "Drive" if name_before and not name_after else "Doctor"
        return "Street" if street or (name_before and not name_after) else "Saint"
    if low == "est.":  # "Est. 1990": established; "est. delivery", "$1.10 est.": estimated
        return "established" if re.match(r"\s*(?:in\s+)?\d{4}\b", after) else "estimated"
    if low in ("no.", "p.", "pg."):
        if _NUMBER_AFTER.match(after):
            return "number" if low == "no." else "page"
        return None
    if low in ("sec.", "min.", "mins.", "secs."):
        if _NUMBER_BEFORE.search(before):
            return "seconds" if low.startswith("sec") else "minutes"
        return {"sec.": "section"}.get(low)
    if low.rstrip(".") in _MONTH_ABBREVIATIONS and low.endswith("."):
        if low in ("mar.", "may.") and not _NUMBER_AFTER.match(after):
            return None  # "may." is a word
        return MONTH_NAMES[_MONTHS.index(low[:3])]
    return _DAYS.get(low)


def abbreviation(written: str, text: str, start: int, end: int) -> str | None:
    """The reading of ``written`` (``text[start:end]``), or None to leave it to the G2P."""
    low = written.lower()
    said = _contextual(low, text, start, end)
    if said is None:
        said = _FIXED.get(low)
    if said is None:
        return None
    if written[:1].isupper() and said[:1].islower() and (start == 0 or text[:start].rstrip()[-1:] in ".!?"):
        said = said[:1].upper() + said[1:]
    if written.endswith(".") and _END.fullmatch(text, end):
        said += "."  # the abbreviation's period also ended the sentence
    elif said in _PLACES and _SENTENCE_AFTER.match(text, end):
        said += "."  # "on Main St. Please arrive": a street name ends, a sentence starts
    return said
