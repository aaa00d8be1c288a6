"""Word spans from per-token durations (gateway/kokoro/timestamps.py), on hand-made durations."""

from __future__ import annotations

from gateway.kokoro.parts import split_phonemes
from gateway.kokoro.timestamps import (
    FRAME,
    SegmentWords,
    Token,
    WordTimes,
    guess_tokens,
    word_times,
    words_event,
    words_of,
)


def test_spans_follow_the_durations_of_each_words_phonemes() -> None:
    phonemes = "ab, cd."
    # pads first and last; one duration per symbol: a b , space c d .
    durations = [4, 1, 2, 3, 5, 6, 7, 8, 9]
    tokens = [Token("Ab", "ab"), Token(",", ","), Token("cd", "cd"), Token(".", ".")]
    got = word_times(tokens, phonemes, durations).words
    assert [w.word for w in got] == ["Ab", "cd"]
    assert (got[0].start, got[0].end) == (4 * FRAME, 7 * FRAME)  # after the pad; a + b
    assert (got[1].start, got[1].end) == (15 * FRAME, 28 * FRAME)  # after , and the space


def test_unknown_symbols_take_no_frames_and_trim_and_length_clamp() -> None:
    phonemes = "a?b c"  # '?' is not in the vocabulary: the model never saw it
    durations = [2, 3, 4, 1, 5, 2]  # pad, a, b, space, c, pad
    tokens = [Token("ab", "a?b"), Token("c", "c")]
    got = word_times(
        tokens, phonemes, durations, known={"a", "b", "c", " "}, trim_start=2 * FRAME, length=10 * FRAME
    ).words
    assert (got[0].start, got[0].end) == (0, 7 * FRAME)
    assert (got[1].start, got[1].end) == (8 * FRAME, 10 * FRAME)  # 13 frames, clamped to 10


def test_words_as_written_drop_punctuation_only() -> None:
    assert words_of("It's 3:30, ok? Well-known $42.50!") == ["It's", "3:30", "ok", "Well-known", "42.50"]


def test_guessed_tokens_pair_words_with_groups_when_as_many() -> None:
    toks = guess_tokens("Hola, buenos días.", "ˈola, bwˈenos ðˈias.")
    assert [(t.text, t.phonemes) for t in toks] == [("Hola", "ˈola,"), ("buenos", "bwˈenos"), ("días", "ðˈias.")]


def test_guessed_tokens_cover_the_phonemes_in_order_otherwise() -> None:
    text, phonemes = "你好世界", "ni xau ʂɻ tɕjɛ"
    toks = guess_tokens(text + " ok", phonemes + " ˈOkA")  # 2 words, 5 groups
    assert [t.text for t in toks] == ["你好世界", "ok"]
    assert " ".join(t.phonemes for t in toks) == phonemes + " ˈOkA"
    assert all(t.phonemes for t in toks)


def test_pieces_get_their_own_tokens_and_later_pieces_are_offset() -> None:
    # three "words" of 4 symbols; a limit of 10 cuts after the comma
    tokens = [Token("aa", "abab"), Token("bb", "abab"), Token(",", ","), Token("cc", "cdcd")]
    phonemes = "abab abab, cdcd"
    pieces = split_phonemes(phonemes, limit=10)
    assert pieces == ["abab abab,", "cdcd"]
    words = SegmentWords(tokens, phonemes, pieces)
    first = words.piece(0, [1] * 12, trim_start=FRAME, length=8 * FRAME)  # pad, 10 symbols, pad
    assert [(w.word, w.start, w.end) for w in first.words] == [("aa", 0, 4 * FRAME), ("bb", 5 * FRAME, 8 * FRAME)]
    second = words.piece(1, [2, 1, 1, 1, 1, 3], trim_start=0, length=9 * FRAME)
    assert [(w.word, w.start, w.end) for w in second.words] == [("cc", 10 * FRAME, 14 * FRAME)]


def test_the_containers_words_event_back_in_samples() -> None:
    wire = WordTimes(tuple(word_times([Token("Hi", "hI"), Token("you", "ju")], "hI ju", [2, 3, 4, 1, 5, 6, 1]).words))
    event = {"type": "words", "sentence": 0, "words": wire.to_ms(0, 24000)}
    back = words_event(event, 24000)
    assert back is not None and [(w.word, w.start, w.end) for w in back.words] == [
        (w.word, w.start, w.end) for w in wire.words
    ]
    assert words_event({"type": "done"}, 24000) is None
    assert words_event({"type": "words", "words": [{"word": "x"}]}, 24000) is None  # malformed: logged, skipped
