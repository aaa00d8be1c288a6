"""Pronunciations: a deployment's lexicon file and a request's ``pronunciations`` map.

Each entry maps a word or phrase to how it is said: ``/phonemes/`` (Kokoro's phoneme symbols,
misaki's set, between slashes: ``"Kokoro": "/kˈOkəɹO/"``) or a respelling in plain letters
(``"nginx": "engine x"``). Case: a key written all in lowercase matches any case ("kokoro",
"Kokoro", "KOKORO"); a key with a capital letter matches that case only ("US" the country, not
"us"). Keys match whole words; the longest key wins where two overlap; a request's entries
override the file's for the same key. Phonemes need an English voice (misaki reads them);
elsewhere the written word is said.

The file is JSON (an object) or TOML (top-level keys), by its extension.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import BadRequest

__all__ = ["Lexicon", "Match", "load_lexicon"]

MAX_ENTRIES = 2000


@dataclass(frozen=True, slots=True)
class Match:
    start: int
    end: int
    said: str  # a respelling
    phonemes: str  # or phonemes (no slashes); exactly one of the two is set


def check_entries(raw: object, where: str) -> dict[str, str]:
    if not isinstance(raw, Mapping):
        raise BadRequest(f"{where} must be an object of word -> pronunciation", code="invalid_option")
    if len(raw) > MAX_ENTRIES:
        raise BadRequest(f"{where} has {len(raw)} entries; the limit is {MAX_ENTRIES}", code="invalid_option")
    out: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not isinstance(value, str) or not key.strip() or not value.strip():
            raise BadRequest(f"{where}: each entry maps a word to a non-empty string", code="invalid_option")
        if len(key) > 100 or len(value) > 200:
            raise BadRequest(
                f"{where}: {key[:40]!r} is too long (100 characters a key, 200 a value)", code="invalid_option"
            )
        out[key.strip()] = value.strip()
    return out


def load_lexicon(path: str) -> dict[str, str]:
    """The entries of a lexicon file (``pronunciations_file``); errors name the file."""
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    raw = json.loads(text) if p.suffix.lower() == ".json" else tomllib.loads(text)
    return check_entries(raw, f"pronunciations file {path}")


def _pattern(keys: list[str], flags: int) -> re.Pattern[str] | None:
    if not keys:
        return None
    body = "|".join(re.escape(k) for k in sorted(keys, key=len, reverse=True))
    return re.compile(rf"(?<!\w)(?:{body})(?!\w)", flags)


class Lexicon:
    def __init__(self, *layers: Mapping[str, str]) -> None:
        merged: dict[str, str] = {}
        for layer in layers:
            merged.update(layer)
        self.entries = merged
        self._folded = {k.lower(): v for k, v in merged.items() if k == k.lower()}
        self._exact = _pattern([k for k in merged if k != k.lower()], 0)
        self._any = _pattern(list(self._folded), re.IGNORECASE)

    def __bool__(self) -> bool:
        return bool(self.entries)

    def find(self, text: str) -> list[Match]:
        """Matches in ``text``, in order, not overlapping (exact-case keys first)."""
        found: list[Match] = []
        taken: list[tuple[int, int]] = []
        for pattern, table in ((self._exact, self.entries), (self._any, self._folded)):
            if pattern is None:
                continue
            for m in pattern.finditer(text):
                if any(m.start() < b and a < m.end() for a, b in taken):
                    continue
                value = table[m.group() if table is self.entries else m.group().lower()]
                phon = len(value) > 2 and value[0] == "/" and value[-1] == "/"
                found.append(Match(m.start(), m.end(), "" if phon else value, value[1:-1] if phon else ""))
                taken.append((m.start(), m.end()))
        return sorted(found, key=lambda x: x.start)
