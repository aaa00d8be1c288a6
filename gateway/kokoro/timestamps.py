"""Word timings from Kokoro's predicted durations.

Kokoro's duration predictor gives every input token (phoneme symbol, with a pad token at each
end) a whole number of frames of 600 samples (25 ms at 24 kHz) before the vocoder runs, and the
audio is exactly ``sum(durations) * 600`` samples long. A word's time is therefore exact: from
the first frame of its first phoneme to the last frame of its last one (the pause after a word,
a space or punctuation token, belongs to no word). hexgrad's ``KPipeline.join_timestamps`` does
the same from the same tensor, splitting spaces in half; here gaps stay gaps.

Words come from the G2P where it says which phonemes spell which word (misaki's tokens:
``Token(text, phonemes)``). Where it does not (espeak-ng, Mandarin, Japanese), ``guess_tokens``
pairs the text's words with the phoneme string's space-separated groups when they are as many,
and otherwise spreads the text's words over the phonemes in proportion to their length: an
approximation, marked as such in ``WordTimes.exact``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

log = logging.getLogger(__name__)
FRAME = 600  # samples per duration frame
Durations = Sequence[int] | np.ndarray  # frames per token, as the model predicted them
_WORD = re.compile(r"[\w'’]+(?:[-.,:/][\w'’]+)*", re.UNICODE)
_PUNCT_ONLY = re.compile(r"^[\W_]+$", re.UNICODE)


@dataclass(frozen=True, slots=True)
class Token:
    """A piece of text as written and the phonemes the G2P gave it (may be empty)."""

    text: str
    phonemes: str


@dataclass(frozen=True, slots=True)
class Word:
    """A word as written (no punctuation) and its span in samples of the segment's audio."""

    word: str
    start: int
    end: int

    def shifted(self, offset: int) -> Word:
        return Word(self.word, self.start + offset, self.end + offset)


@dataclass(frozen=True, slots=True)
class WordTimes:
    """One segment's words, in samples from the segment's first audio sample."""

    words: tuple[Word, ...]
    exact: bool = True  # False where the G2P gave no word boundaries (``guess_tokens``)

    def shifted(self, offset: int) -> WordTimes:
        return WordTimes(tuple(w.shifted(offset) for w in self.words), self.exact)

    @classmethod
    def from_ms(cls, words: Iterable[Mapping[str, Any]], rate: int, exact: bool = True) -> WordTimes:
        """The wire form back (``[{word, start_ms, end_ms}]``, ms from the segment's first sample)."""
        out = []
        for w in words:
            start = round(float(w["start_ms"]) * rate / 1000)
            out.append(Word(str(w["word"]), start, max(start, round(float(w["end_ms"]) * rate / 1000))))
        return cls(tuple(out), exact)

    def to_ms(self, offset_samples: float, rate: int, limit_samples: int | None = None) -> list[dict[str, object]]:
        """The wire form: ``[{word, start_ms, end_ms}]`` on a timeline ``offset_samples`` later
        (a fraction where a resampling encoder's lead-in is counted at the engine's rate)."""
        out = []
        for w in self.words:
            start, end = w.start + offset_samples, w.end + offset_samples
            if limit_samples is not None:
                start, end = min(start, limit_samples), min(end, limit_samples)
            out.append({"word": w.word, "start_ms": round(1000 * start / rate), "end_ms": round(1000 * end / rate)})
        return out


def words_event(event: Mapping[str, Any], rate: int, who: str = "the container") -> WordTimes | None:
    """The model container's ``words`` event (``{type, sentence, words: [{word, start_ms,
    end_ms}]}``) as ``WordTimes``; None for other events, and for a malformed one (logged)."""
    try:
        return WordTimes.from_ms(event["words"], rate) if event.get("type") == "words" else None
    except (KeyError, TypeError, ValueError, OverflowError) as exc:  # Overflow: a time of Infinity
        log.warning("%s sent a malformed words event (%s): %.200r", who, exc, event)
        return None


def words_of(text: str) -> list[str]:
    """The words of ``text`` as written, punctuation dropped ("It's 3:30." -> It's, 3:30)."""
    return _WORD.findall(text)


def guess_tokens(text: str, phonemes: str) -> list[Token]:
    """Tokens for a G2P that gives no word boundaries (see the module's docstring)."""
    words = words_of(text)
    groups = [g for g in phonemes.split() if not _PUNCT_ONLY.match(g)]
    if not words:
        return []
    if len(groups) == len(words):
        return [Token(w, g) for w, g in zip(words, groups)]
    if len(groups) > len(words):  # cut between groups, each word's share by its length
        total, used, at, out = sum(len(w) for w in words), 0, 0, []
        sizes = [len(g) for g in groups]
        whole = sum(sizes)
        for k, w in enumerate(words):
            used += len(w)
            rest = len(words) - k - 1  # groups left for the words after this one
            stop, acc = at + 1, sum(sizes[: at + 1])
            while stop < len(groups) - rest and abs(acc + sizes[stop] - whole * used / total) < abs(
                acc - whole * used / total
            ):
                acc += sizes[stop]
                stop += 1
            if k == len(words) - 1:
                stop = len(groups)
            out.append(Token(w, " ".join(groups[at:stop])))
            at = stop
        return out
    # fewer groups than words (no spaces: Mandarin, Japanese): cut the symbols by word length
    symbols = [c for c in phonemes if not c.isspace() and not _PUNCT_ONLY.match(c)]
    total = sum(len(w) for w in words)
    out, at, used = [], 0, 0
    for k, w in enumerate(words):
        used += len(w)
        stop = len(symbols) if k == len(words) - 1 else round(len(symbols) * used / total)
        out.append(Token(w, "".join(symbols[at:stop])))
        at = stop
    return out


def word_times(
    tokens: Iterable[Token],
    phonemes: str,
    durations: Durations,
    *,
    known: frozenset[str] | set[str] | None = None,
    trim_start: int = 0,
    length: int | None = None,
    exact: bool = True,
) -> WordTimes:
    """Each token's word span from the model's ``durations`` (frames, pad tokens included).

    ``phonemes`` is the string the model was given before unknown symbols were dropped;
    ``known`` the symbols it keeps (None: all), so that ``durations[1 + k]`` is the k-th kept
    symbol's. ``trim_start`` samples were cut from the front of the model's audio, and the
    segment is ``length`` samples long: times are clamped into it.
    """
    starts: list[int] = []  # per character of ``phonemes``: its first frame (kept ones)
    frame = int(durations[0]) if len(durations) else 0
    kept = 0
    for ch in phonemes:
        starts.append(frame)
        if known is None or ch in known:
            kept += 1
            if kept < len(durations) - 1:
                frame += int(durations[kept])
    starts.append(frame)
    out: list[Word] = []
    cursor = 0
    for tok in tokens:
        word = " ".join(words_of(tok.text))
        ph = tok.phonemes.strip()
        if not ph:
            continue
        at = phonemes.find(ph, cursor)
        if at < 0:
            continue  # the G2P rewrote it between tokens and string: no span to give
        cursor = at + len(ph)
        if not word:
            continue
        start = starts[at] * FRAME - trim_start
        end = starts[at + len(ph)] * FRAME - trim_start
        if length is not None:
            start, end = min(max(start, 0), length), min(max(end, 0), length)
        else:
            start, end = max(start, 0), max(end, 0)
        out.append(Word(word, start, max(start, end)))
    return WordTimes(tuple(out), exact)


def tokens_by_piece(tokens: Sequence[Token], phonemes: str, pieces: Sequence[str]) -> list[list[Token]]:
    """``tokens`` (of all of ``phonemes``) shared out to the pieces the model is called on
    (``kokoro_parts.split_phonemes``: substrings of ``phonemes`` in order, cut at spaces)."""
    ends, pos = [], 0
    for piece in pieces:
        at = phonemes.find(piece, pos)
        pos = (at if at >= 0 else pos) + len(piece)
        ends.append(pos)
    out: list[list[Token]] = [[] for _ in pieces]
    cursor, k = 0, 0
    for tok in tokens:
        ph = tok.phonemes.strip()
        at = phonemes.find(ph, cursor) if ph else -1
        if at < 0 or not out:
            continue
        cursor = at + len(ph)
        while k < len(ends) - 1 and at >= ends[k]:
            k += 1
        out[k].append(tok)
    return out


class SegmentWords:
    """One segment's words, handed out per model call (piece), each piece's on the segment's
    timeline: offset by the audio of the pieces before it."""

    def __init__(self, tokens: Sequence[Token], phonemes: str, pieces: Sequence[str], exact: bool = True) -> None:
        self.pieces, self.exact, self.offset = list(pieces), exact, 0
        self._tokens = tokens_by_piece(tokens, phonemes, self.pieces)

    def piece(self, index: int, durations: Durations, trim_start: int, length: int) -> WordTimes:
        """Piece ``index``'s words: the model's ``durations`` for it, ``trim_start`` samples cut
        from the front of its audio, ``length`` samples kept."""
        times = word_times(
            self._tokens[index], self.pieces[index], durations, trim_start=trim_start, length=length, exact=self.exact
        ).shifted(self.offset)
        self.offset += length
        return times
