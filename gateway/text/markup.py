"""Control markup: pauses, the SSML subset, and their errors.

What a client may write, anywhere in its text (the whole of it wrapped in ``<speak>`` or not):

* ``[pause:0.5s]``, ``[pause:500ms]``, ``[pause:1]`` (seconds): that much exact silence;
  ``<break time="500ms"/>`` or ``<break strength="strong"/>`` likewise (SSML's strengths:
  none 0, x-weak 0.1 s, weak 0.25, medium 0.5, strong 0.75, x-strong 1.2). At most
  ``MAX_PAUSE_S`` each.
* ``<say-as interpret-as="characters|spell-out|digits|telephone|date|time|cardinal|ordinal"
  [format="mdy|dmy|ymd"]>...</say-as>``: how to read what it holds.
* ``<sub alias="World Wide Web">WWW</sub>``: say the alias; the caption keeps ``WWW``.
* ``<phoneme alphabet="ipa" ph="kˈOkəɹO">Kokoro</phoneme>`` (phonemes in Kokoro's symbol set,
  misaki's), as misaki's inline ``[Kokoro](/kˈOkəɹO/)``.
* ``<prosody rate="slow|x-slow|medium|fast|x-fast|80%|1.2">``: the segments it covers are spoken
  at that rate times the request's ``speed`` (within 0.5-2.0).
* ``<speak>``, ``<emphasis>``, ``<lang>``, ``<voice>``, ``<mark/>``, ``<audio>``: accepted, no
  effect beyond their text; ``<p>`` and ``<s>`` end a block (their own segment).

A malformed or unknown value, a closing tag with no opening, or a span still open at the end of
the input is ``invalid_markup`` with the position (characters into the input) where it began.
"""

from __future__ import annotations

import re

from ..errors import BadRequest
from . import markers as mk

__all__ = ["MAX_PAUSE_S", "MarkupError", "control_tag", "pause_marker"]

MAX_PAUSE_S = 10.0
STRENGTHS = {"none": 0.0, "x-weak": 0.1, "weak": 0.25, "medium": 0.5, "strong": 0.75, "x-strong": 1.2}
RATES = {"x-slow": 0.6, "slow": 0.8, "medium": 1.0, "default": 1.0, "fast": 1.2, "x-fast": 1.4}
SAY_AS = frozenset("characters spell-out letters digits telephone date time cardinal number ordinal verbatim".split())
_SPANS = frozenset(("say-as", "sub", "phoneme", "prosody"))
_PASSIVE = frozenset(("speak", "emphasis", "lang", "voice", "mark", "audio", "prosody-contour"))
_ATTR = re.compile(r"""([A-Za-z][\w:-]*)\s*=\s*(?:"([^"]*)"|'([^']*)')""")
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?|\.\d+)\s*(ms|s)?\s*$", re.IGNORECASE)


class MarkupError(BadRequest):
    def __init__(self, message: str, at: int) -> None:
        super().__init__(f"{message} (at character {at})", code="invalid_markup")
        self.at = at


def duration_s(value: str, at: int, what: str) -> float:
    m = _DURATION.match(value)
    if m is None:
        raise MarkupError(f"{what}: {value.strip()!r} is not a duration such as 500ms or 1.5s", at)
    seconds = float(m.group(1)) / (1000 if (m.group(2) or "s").lower() == "ms" else 1)
    if seconds > MAX_PAUSE_S:
        raise MarkupError(f"{what}: {seconds:g} s is longer than the {MAX_PAUSE_S:g} s allowed", at)
    return seconds


def pause_marker(table: mk.Markers, text: str, at: int) -> str:
    """``[pause:...]`` as a pause marker."""
    value = text.strip()[1:-1].partition(":")[2]
    return table.add(mk.Marker(mk.PAUSE, value=duration_s(value, at, "pause"), at=at))


def attributes(raw: str, at: int) -> dict[str, str]:
    found = {m.group(1).lower(): m.group(2) if m.group(2) is not None else m.group(3) for m in _ATTR.finditer(raw)}
    rest = _ATTR.sub("", raw).strip()
    if rest:
        raise MarkupError(f"cannot read the attributes {raw.strip()!r}", at)
    return found


def control_tag(table: mk.Markers, name: str, raw: str, *, closing: bool, empty: bool, at: int) -> str | None:
    """The marker (or "" for a tag with no effect) for an SSML tag; None for any other tag."""
    if name == "break":
        attrs = attributes(raw, at)
        if "time" in attrs:
            seconds = duration_s(attrs["time"], at, "<break time>")
        elif "strength" in attrs:
            if attrs["strength"] not in STRENGTHS:
                raise MarkupError(f"<break strength> must be one of {', '.join(STRENGTHS)}", at)
            seconds = STRENGTHS[attrs["strength"]]
        else:
            seconds = STRENGTHS["medium"]
        return "" if closing else table.add(mk.Marker(mk.PAUSE, value=seconds, at=at))
    if name in _PASSIVE:
        return ""
    if name not in _SPANS:
        return None
    if closing:
        return table.add(mk.Marker(mk.CLOSE, name, at=at))
    if empty:
        raise MarkupError(f"<{name}/> must hold text: <{name} ...>text</{name}>", at)
    attrs = attributes(raw, at)
    return table.add(_span(name, attrs, at))


def _span(name: str, attrs: dict[str, str], at: int) -> mk.Marker:
    if name == "say-as":
        kind = attrs.get("interpret-as", "").lower()
        if kind not in SAY_AS:
            raise MarkupError(f"<say-as interpret-as> must be one of {', '.join(sorted(SAY_AS))}", at)
        return mk.Marker(mk.OPEN, name, kind, attrs.get("format", "").lower(), at=at)
    if name == "sub":
        if not attrs.get("alias", "").strip():
            raise MarkupError('<sub> needs an alias: <sub alias="World Wide Web">WWW</sub>', at)
        return mk.Marker(mk.OPEN, name, attrs["alias"], at=at)
    if name == "phoneme":
        alphabet = attrs.get("alphabet", "ipa").lower()
        if alphabet not in ("ipa", "x-misaki", "misaki"):
            raise MarkupError("<phoneme alphabet> must be ipa (in Kokoro's phoneme symbols)", at)
        ph = attrs.get("ph", "").strip().strip("/")
        if not ph or "/" in ph or "]" in ph:
            raise MarkupError('<phoneme> needs ph, the phonemes: <phoneme ph="kˈOkəɹO">Kokoro</phoneme>', at)
        return mk.Marker(mk.OPEN, name, ph, at=at)
    return mk.Marker(mk.OPEN, name, _rate(attrs.get("rate", "medium"), at), at=at)


def _rate(value: str, at: int) -> float:
    v = value.strip().lower()
    if v in RATES:
        return RATES[v]
    try:
        rate = float(v[:-1]) / 100 if v.endswith("%") else float(v)
    except ValueError:
        raise MarkupError(
            f"<prosody rate> must be x-slow..x-fast, a percentage or a number, not {value!r}", at
        ) from None
    if not 0.25 <= rate <= 4.0:
        raise MarkupError(f"<prosody rate> {value!r} is out of range (25% to 400%)", at)
    return rate
