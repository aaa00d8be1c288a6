"""URLs, email addresses and phone numbers, as a person reads them aloud.

A URL loses its scheme, ``www.``, query and fragment (nobody reads ``?utm_source=...``); its host
is read with "dot", its path with "slash"; two-letter top-level domains are spelled ("I O",
"U K"). An email is its name, "at", and its domain. A phone number is read digit by digit with a
comma between its groups, which Kokoro speaks as a short pause: "(555) 123-4567" -> "five five
five, one two three, four five six seven".
"""

from __future__ import annotations

import re

from . import numbers as nb

__all__ = ["email", "phone", "url"]

_SPELLED_TLD_WORDS = frozenset(("me", "co", "so", "go", "to"))
_PART = re.compile(r"[A-Za-z]+|\d+|[.\-_/+~%=&]")
_SAY = {
    ".": "dot",
    "-": "dash",
    "_": "underscore",
    "/": "slash",
    "+": "plus",
    "~": "tilde",
    "%": "percent",
    "=": "equals",
    "&": "and",
}


def _word(part: str) -> str:
    if part.isdigit():
        return nb.cardinal(part) if len(part) <= 4 and not part.startswith("0") else nb.digits(part)
    if part.isalpha():
        return part.lower() if len(part) > 1 else part.upper()
    return _SAY.get(part, "")


def _read(text: str) -> str:
    return " ".join(w for w in (_word(p) for p in _PART.findall(text)) if w)


def _host(host: str) -> str:
    labels = host.lower().split(".")
    words = [_read(label) for label in labels[:-1]]
    tld = labels[-1]
    words.append(" ".join(tld.upper()) if len(tld) == 2 and tld not in _SPELLED_TLD_WORDS else tld)
    return " dot ".join(w for w in words if w)


def url(text: str) -> str:
    rest = re.sub(r"^[A-Za-z]+://", "", text)
    rest = re.sub(r"^www\.", "", rest, flags=re.IGNORECASE)
    rest = re.split(r"[?#]", rest, maxsplit=1)[0].rstrip("/")
    host, _, path = rest.partition("/")
    host = host.split("@")[-1].split(":")[0]
    said = _host(host)
    if path:
        said += " slash " + _read(path)
    return said


def email(text: str) -> str:
    name, _, domain = text.partition("@")
    return f"{_read(name)} at {_host(domain)}"


def phone(text: str) -> str:
    groups = re.findall(r"\+|\d+", text)
    out: list[str] = []
    for g in groups:
        if g == "+":
            out.append("plus")
        else:
            out.append(nb.digits(g) + ",")
    said = " ".join(out).rstrip(",")
    return said.replace("plus ", "plus ", 1)
