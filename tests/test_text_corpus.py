"""The text front-end's corpus: written text -> display text and spoken form, per category.

Each case is (written, spoken) or (written, spoken, display): the whole text through a fresh
``TextFrontEnd`` on an American English voice, segments joined by a space. ``spoken`` is what the
engine is given; ``display`` (default: ``written``) what the captions show. Cases are grouped by
the category they exercise; docs/TEXT.md states the rules they pin down.
"""

from __future__ import annotations

import pytest

from gateway.text.frontend import TextFrontEnd, TextOptions

from .text_cases import CASES, CASES_GB, Case


def read(text: str, lang: str = "a", **options: object) -> tuple[str, str]:
    fe = TextFrontEnd(TextOptions(**options), lang=lang, first_clause_words=0)  # type: ignore[arg-type]
    segs = fe.feed(text) + fe.end()
    return " ".join(s.display for s in segs if s.display), " ".join(s.spoken for s in segs if s.spoken)


def _ids(cases: list[Case]) -> list[str]:
    return [f"{c[0]}:{c[1][:40]}" for c in cases]


@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_american_english(case: Case) -> None:
    category, written, spoken, display = case
    got_display, got_spoken = read(written)
    assert got_spoken == spoken, category
    assert got_display == (written if display is None else display), category


@pytest.mark.parametrize("case", CASES_GB, ids=_ids(CASES_GB))
def test_british_english(case: Case) -> None:
    category, written, spoken, display = case
    got_display, got_spoken = read(written, "b")
    assert got_spoken == spoken, category
    assert got_display == (written if display is None else display), category


def test_the_corpus_covers_every_category() -> None:
    categories = {c[0] for c in CASES}
    assert categories >= {
        "markdown", "emoji", "url", "email", "phone", "time", "date", "ordinal", "fraction", "range",
        "unit", "symbol", "abbreviation", "number", "version", "money", "pause", "ssml", "phoneme", "plain",
    }  # fmt: skip
    assert len(CASES) >= 200
