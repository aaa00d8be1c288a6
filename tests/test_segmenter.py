"""Sentence segmentation: a table of rules, the fast path, max_chars, and chunking properties."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.text.segmenter import Segmenter, split_text

CASES: list[tuple[str, list[str]]] = [
    # plain sentences
    ("Hello there. How are you? I'm fine!", ["Hello there.", "How are you?", "I'm fine!"]),
    ("  Hello there.   Bye.  ", ["Hello there.", "Bye."]),
    ("No terminator at all", ["No terminator at all"]),
    ("What?! No way. Yes!!! ok", ["What?!", "No way.", "Yes!!!", "ok"]),
    ("It is 5 p.m. Yes.", ["It is 5 p.m.", "Yes."]),
    # abbreviations
    ("Mr. Smith met Mrs. Jones and Ms. Lee.", ["Mr. Smith met Mrs. Jones and Ms. Lee."]),
    ("Dr. Who and Prof. X visited St. Louis.", ["Dr. Who and Prof. X visited St. Louis."]),
    (
        "Martin Luther King Jr. was born in Jan. 1929. He spoke.",
        ["Martin Luther King Jr. was born in Jan. 1929.", "He spoke."],
    ),
    ("Cats vs. dogs, e.g. this one, i.e. that. Done.", ["Cats vs. dogs, e.g. this one, i.e. that.", "Done."]),
    ("Apples, pears, etc. Then more.", ["Apples, pears, etc.", "Then more."]),
    ("Apples, pears, etc. and more.", ["Apples, pears, etc. and more."]),
    ("The U.S. Army and the U.K. Navy met.", ["The U.S. Army and the U.K. Navy met."]),
    ("We meet at 9 a.m. tomorrow. Fine.", ["We meet at 9 a.m. tomorrow.", "Fine."]),
    ("Room No. 5 is free. No. I refuse.", ["Room No. 5 is free.", "No.", "I refuse."]),
    ("Acme Inc. is big. Acme Ltd. It is small.", ["Acme Inc. is big.", "Acme Ltd.", "It is small."]),
    ("J. K. Rowling wrote it. Good.", ["J. K. Rowling wrote it.", "Good."]),
    # numbers, money, times, URLs, e-mail
    ("Pi is 3.14 and it costs $29.99. Next.", ["Pi is 3.14 and it costs $29.99.", "Next."]),
    ("It costs $29.99. Cheap.", ["It costs $29.99.", "Cheap."]),
    ("Meet at 3:30 today. Ok.", ["Meet at 3:30 today.", "Ok."]),
    ("Go to https://example.com/a.b?c=d now. Ok.", ["Go to https://example.com/a.b?c=d now.", "Ok."]),
    ("Visit example.com. Then call.", ["Visit example.com.", "Then call."]),
    ("Mail a.b@example.co.uk today. Thanks.", ["Mail a.b@example.co.uk today.", "Thanks."]),
    ("We sold 1,000 units. Great.", ["We sold 1,000 units.", "Great."]),
    ("Version 2.0.1 is out. Update.", ["Version 2.0.1 is out.", "Update."]),
    # ellipses
    ("Well... maybe later.", ["Well... maybe later."]),
    ("Wait... What happened?", ["Wait...", "What happened?"]),
    ("Hmm… I see.", ["Hmm…", "I see."]),
    # closing quotes and brackets
    ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
    ("(See above.) Next one.", ["(See above.)", "Next one."]),
    ("She asked 'why?' and left.", ["She asked 'why?' and left."]),
    ("She said “Go!” Then ran.", ["She said “Go!”", "Then ran."]),
    ("**Note.** Read this.", ["**Note.**", "Read this."]),
    # newlines and lists
    ("Line one\nLine two", ["Line one", "Line two"]),
    ("Para one.\n\nPara two", ["Para one.", "Para two"]),
    ("1. First\n2. Second", ["1. First", "2. Second"]),
    ("Steps:\n1. Mix it. Bake it.\n2. Eat.", ["Steps:", "1. Mix it.", "Bake it.", "2. Eat."]),
    ("- a\n- b", ["- a", "- b"]),
    ("* a\r\n* b", ["* a", "* b"]),
    ("I have 3. You have 2.", ["I have 3.", "You have 2."]),
    # punctuation-only text is merged forward, or dropped at the very end
    ("Hello.\n---\nWorld.", ["Hello.", "---\nWorld."]),
    ("Hello. ...", ["Hello."]),
    ("...", []),
    ("   \n\n  ", []),
    # CJK
    ("今日は晴れです。明日は雨です。", ["今日は晴れです。", "明日は雨です。"]),
    ("本当？！すごい！", ["本当？！", "すごい！"]),
    ("「こんにちは。」と言った。", ["「こんにちは。」", "と言った。"]),
    ("你好，世界。再见", ["你好，世界。", "再见"]),
    ("りんご、みかん、ぶどう", ["りんご、みかん、ぶどう"]),
    ("値は３．１４です。", ["値は３．１４です。"]),
    ("你好!我是AI。", ["你好!", "我是AI。"]),
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_rules(text: str, expected: list[str]) -> None:
    assert split_text(text) == expected
    assert _char_by_char(text) == expected


def _char_by_char(text: str, **kw: int) -> list[str]:
    seg = Segmenter(**kw)
    out = [p for ch in text for p in seg.feed(ch)]
    return out + seg.flush()


# -- when pieces come out: as early as possible, never before they are certain ---------------


@pytest.mark.parametrize(
    ("text", "ready_at"),
    [
        ("Hello there. How", "Hello there. "),  # ordinary word: the first space decides
        ("Why? Because", "Why? "),
        ('He said "Stop." Then', 'He said "Stop." '),
        ("Line one\nmore", "Line one\n"),
        ("Apples, etc. Then", "Apples, etc. T"),  # may end a sentence: wait for the next word
        ("Wait... What", "Wait... W"),
        ("今日は晴れです。明日", "今日は晴れです。明"),  # one character, for closers like 」
    ],
)
def test_piece_is_emitted_at_the_earliest_certain_point(text: str, ready_at: str) -> None:
    seg = Segmenter()
    for i, ch in enumerate(text, 1):
        got = seg.feed(ch)
        if got:
            assert text[:i] == ready_at
            assert got == [split_text(text)[0]]
            return
    pytest.fail(f"nothing emitted before flush for {text!r}")


def test_no_cut_is_made_without_lookahead() -> None:
    seg = Segmenter()
    assert seg.feed("It costs $29.") == []  # could still become $29.99
    assert seg.feed("99") == []
    assert seg.pending == "It costs $29.99"
    assert seg.feed(". Next") == ["It costs $29.99."]
    assert seg.pending == "Next"
    assert seg.flush() == ["Next"]
    assert seg.pending == ""


def test_flush_mid_stream_then_reuse() -> None:
    seg = Segmenter(first_clause_words=1)
    assert seg.feed("Sure, I") == ["Sure,"]
    assert seg.flush() == ["I"]
    # the fast path was for the first piece of the reply only
    assert seg.feed("Well, then. ") == ["Well, then."]
    assert seg.flush() == []


# -- first-clause fast path -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "words", "expected"),
    [
        ("Sure, here is the plan.", 1, ["Sure,", "here is the plan."]),
        ("Sure, here is the plan.", 4, ["Sure, here is the plan."]),
        ("Sure, here is the plan.", 0, ["Sure, here is the plan."]),
        ("Sure, here is the plan, and more, ok.", 4, ["Sure, here is the plan,", "and more, ok."]),
        ("Note: this matters; a lot.", 1, ["Note:", "this matters; a lot."]),
        ("One two; three, four.", 2, ["One two;", "three, four."]),
        ("Well - here we go.", 1, ["Well -", "here we go."]),
        ("Well — here we go.", 1, ["Well —", "here we go."]),
        ("Well–here we go – now.", 1, ["Well–here we go –", "now."]),
        ("Well—here we go.", 1, ["Well—", "here we go."]),
        ("We sold 1,000 units, really.", 2, ["We sold 1,000 units,", "really."]),
        ("At 3:30 we left, ok.", 2, ["At 3:30 we left,", "ok."]),
        ('"Hi," she said, smiling.', 1, ['"Hi,"', "she said, smiling."]),
        ("Hi. Well, yes.", 1, ["Hi.", "Well, yes."]),
        ("- a, b", 1, ["- a,", "b"]),
    ],
)
def test_first_clause_fast_path(text: str, words: int, expected: list[str]) -> None:
    assert split_text(text, first_clause_words=words) == expected
    assert _char_by_char(text, first_clause_words=words) == expected


# -- max_chars ------------------------------------------------------------------------------


def test_long_piece_splits_at_clause_in_second_half() -> None:
    text = "alpha beta gamma, delta epsilon zeta eta theta iota, kappa lambda mu nu xi omicron."
    pieces = split_text(text, max_chars=60)
    assert pieces == ["alpha beta gamma, delta epsilon zeta eta theta iota,", "kappa lambda mu nu xi omicron."]


def test_long_piece_splits_at_space_when_no_late_clause() -> None:
    pieces = split_text("a, " + "word " * 30, max_chars=24)
    assert pieces[0] == "a, word word word word"
    assert all(len(p) <= 24 for p in pieces)
    assert all(set(p.replace(",", "").split()) <= {"a", "word"} for p in pieces)


def test_only_words_longer_than_max_chars_are_cut() -> None:
    assert split_text("x" * 25 + " yy", max_chars=10) == ["x" * 10, "x" * 10, "xxxxx yy"]
    assert split_text("abc defghij klm", max_chars=7) == ["abc", "defghij", "klm"]


def test_cjk_long_piece_splits_at_comma_marks() -> None:
    text = "一二三四五六七、八九十一二三四、五六七八九十。"
    assert split_text(text, max_chars=10) == ["一二三四五六七、", "八九十一二三四、", "五六七八九十。"]


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="max_chars"):
        Segmenter(max_chars=0)
    with pytest.raises(ValueError, match="first_clause_words"):
        Segmenter(first_clause_words=-1)


# -- properties -------------------------------------------------------------------------------

FRAGMENTS = [
    "Hello there.",
    "How are you?",
    "Great!",
    "Really?!",
    "Mr. Smith arrived.",
    "Dr. Lee",
    "e.g. this",
    "i.e.",
    "the U.S. Army",
    "etc.",
    "etc. and so on",
    "Acme Inc.",
    "at 3:30 p.m.",
    "No. 5",
    "It costs $29.99.",
    "Pi is 3.14",
    "1,000 units",
    "https://example.com/a.b?c=d",
    "a.b@example.co.uk",
    "Well...",
    "maybe",
    "Wait…",
    '"Stop."',
    "(See above.)",
    "Sure,",
    "here is the plan:",
    "one; two",
    " - ",
    " — ",
    "a—b",
    "1.",
    "2.",
    "- item",
    "* item",
    "今日は晴れです。",
    "本当？！",
    "「はい。」",
    "りんご、みかん",
    "３．１４",
    "---",
    "...",
    "**bold.**",
    "J. K.",
    "Jan. 3",
    "ok",
    "So",
    "and then",
    "x" * 45,
    "Well—here",
    "ok, so",
    '"Go!" he said',
    "你好!",
    "Apple Inc. is",
    "Hi,",
]
SEPARATORS = ["", " ", " ", " ", "  ", "\n", "\n\n", "\t"]

realistic_text = st.lists(st.tuples(st.sampled_from(FRAGMENTS), st.sampled_from(SEPARATORS)), max_size=30).map(
    lambda parts: "".join(f + s for f, s in parts)
)
random_text = st.text(
    alphabet=st.one_of(st.sampled_from(list("aA1 .!?…,;:-—–\n\"')(」。！？．、$@/*“”")), st.characters()),
    max_size=200,
)
options = st.fixed_dictionaries(
    {"max_chars": st.sampled_from([6, 20, 50, 300]), "first_clause_words": st.sampled_from([0, 1, 3])}
)
PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _feed_chunked(text: str, cuts: list[int], opts: dict[str, int]) -> list[str]:
    seg = Segmenter(**opts)
    out: list[str] = []
    bounds = [0, *sorted(set(cuts)), len(text)]
    for a, b in zip(bounds, bounds[1:]):
        out += seg.feed(text[a:b])
    return out + seg.flush()


def _nonspace(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _is_subsequence(small: str, big: str) -> bool:
    it = iter(big)
    return all(ch in it for ch in small)


def _check_pieces(text: str, pieces: list[str], max_chars: int) -> None:
    for p in pieces:
        assert p == p.strip() and p
        assert re.search(r"[^\W_]", p), p  # never punctuation-only
        assert len(p) <= max_chars
    joined, source = _nonspace("".join(pieces)), _nonspace(text)
    # nothing spoken is lost or duplicated; only unspeakable symbols may be dropped
    assert re.sub(r"[\W_]", "", joined) == re.sub(r"[\W_]", "", source)
    assert _is_subsequence(joined, source)


@PROPERTY
@given(text=st.one_of(realistic_text, random_text), opts=options, data=st.data())
def test_any_chunking_gives_the_same_pieces(text: str, opts: dict[str, int], data: st.DataObject) -> None:
    whole = split_text(text, **opts)
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=40))
    assert _feed_chunked(text, cuts, opts) == whole
    assert _feed_chunked(text, list(range(len(text))), opts) == whole  # char by char
    _check_pieces(text, whole, opts["max_chars"])


@PROPERTY
@given(text=realistic_text, words=st.sampled_from([0, 1, 3]))
def test_realistic_text_loses_nothing_but_a_trailing_symbol_tail(text: str, words: int) -> None:
    joined = _nonspace("".join(split_text(text, first_clause_words=words)))
    source = _nonspace(text)
    assert source.startswith(joined)
    assert not re.search(r"[^\W_]", source[len(joined) :])
