"""What each Kokoro v1.0 voice is: language, G2P, gender, grade; blends; OpenAI's voice names.

A Kokoro voice id is a language letter, a gender letter and a name (``af_heart``: American
English, female, Heart). The language letter picks the G2P as in hexgrad's ``KPipeline``.
Grades are hexgrad's overall grades as ``kokoro-js`` 1.2.1 (``dist/kokoro.js``) tabulates
them; that table covers the English voices only, so the others have none.

A blend ``af_bella+af_sky`` (equal weights) or ``af_bella(2)+af_sky(1)`` speaks with the
weighted mean of the packs' styles, and with the first voice's language.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import BadRequest, quoted


@dataclass(frozen=True, slots=True)
class Voice:
    id: str
    language: str  # BCP-47-ish: "ja", "en-US"
    gender: str  # "female" / "male" / "neutral"
    description: str = ""
    default: bool = False
    name: str = ""  # "Heart" for af_heart
    grade: str = ""  # hexgrad's overall grade, where graded

    def to_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "name": self.name or self.id,
            "language": self.language,
            "gender": self.gender,
            "grade": self.grade or None,
            "description": self.description,
            "default": self.default,
        }


# language letter -> (BCP-47 tag, name, G2P: misaki English / espeak-ng voice / ja / zh)
LANGUAGES: dict[str, tuple[str, str, str]] = {
    "a": ("en-US", "American English", "misaki-us"),
    "b": ("en-GB", "British English", "misaki-gb"),
    "e": ("es", "Spanish", "es"),
    "f": ("fr-FR", "French", "fr-fr"),
    "h": ("hi", "Hindi", "hi"),
    "i": ("it", "Italian", "it"),
    "j": ("ja", "Japanese", "ja"),
    "p": ("pt-BR", "Brazilian Portuguese", "pt-br"),
    "z": ("zh", "Mandarin Chinese", "zh"),
}
GENDERS = {"f": "female", "m": "male"}

# hexgrad's overall grades, from kokoro-js 1.2.1's voice table (English voices only)
GRADES = {
    "af_heart": "A",
    "af_alloy": "C",
    "af_aoede": "C+",
    "af_bella": "A-",
    "af_jessica": "D",
    "af_kore": "C+",
    "af_nicole": "B-",
    "af_nova": "C",
    "af_river": "D",
    "af_sarah": "C+",
    "af_sky": "C-",
    "am_adam": "F+",
    "am_echo": "D",
    "am_eric": "D",
    "am_fenrir": "C+",
    "am_liam": "D",
    "am_michael": "C+",
    "am_onyx": "D",
    "am_puck": "C+",
    "am_santa": "D-",
    "bf_emma": "B-",
    "bf_isabella": "C",
    "bm_george": "C",
    "bm_lewis": "D+",
    "bf_alice": "D",
    "bf_lily": "D",
    "bm_daniel": "D",
    "bm_fable": "C",
}

# The Japanese packs' own notes (they speak English from English phonemes, with an accent)
NOTES = {
    "jm_kumo": "low (about 95 Hz); the most intelligible English of the Japanese five",
    "jf_gongitsune": "mid pitch (about 230 Hz), calm and a little slower",
    "jf_nezumi": "mid pitch (about 240 Hz)",
    "jf_tebukuro": "high, childlike (about 325 Hz)",
    "jf_alpha": "about 270 Hz and the fastest; the strongest accent in English",
}

# OpenAI's voice names. Five have Kokoro namesakes; the others are picks by hexgrad's grade
# and by what OpenAI says of its voice (gender, British, calm).
OPENAI_VOICES = {
    "alloy": "af_alloy",
    "echo": "am_echo",
    "fable": "bm_fable",
    "nova": "af_nova",
    "onyx": "am_onyx",
    "coral": "af_heart",  # warm female: Kokoro's best-graded voice (A)
    "shimmer": "af_bella",  # bright female (A-)
    "sage": "af_nicole",  # calm, soft female (B-)
    "ash": "am_michael",  # clear male (C+)
    "verse": "am_fenrir",  # expressive male (C+)
    "ballad": "bm_george",  # British male (C)
    "marin": "af_kore",  # female (C+)
    "cedar": "am_puck",  # male (C+)
}

MAX_BLEND_PARTS = 8
# a weight as ``Blend.id`` writes it (``:g``: 5e-05 for tiny ones) or a person does (0.5, .5, 2),
# matched against the stripped part. No two pieces of the pattern can take the same characters,
# so a match is linear in the part's length: ``^\s*(name)\s*(?:...)?\s*$`` with the number as
# ``[0-9]*\.?[0-9]+`` backtracked over runs of spaces or digits, and one 1 MiB body with such a
# voice held the event loop for hours.
_PART = re.compile(r"([^()\s]+)(?:\s*\(\s*((?:[0-9]+(?:\.[0-9]+)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)\s*\))?")


def text_language(voice_id: str, voices: tuple[Voice, ...] = ()) -> str:
    """The language letter the text front-end reads a voice's text in: Kokoro's own letter for
    a Kokoro voice id, else the one of the language the engine declares for it ("en-US": "a"),
    else "" (no language rules: filters only)."""
    letter = language_of(voice_id)
    if letter in LANGUAGES and voice_id[1:2] in GENDERS and voice_id[2:3] == "_":
        return letter
    first = voice_id.split("+")[0].split("(")[0].strip()
    tag = next((v.language for v in voices if v.id == first), "").lower()
    for code, (bcp, _, _) in LANGUAGES.items():
        if tag == bcp.lower() or (tag and tag.split("-")[0] == bcp.lower()):
            return code
    return ""


def language_of(voice_id: str) -> str:
    """The language letter of a voice or blend (a blend speaks its first voice's language)."""
    return voice_id.lstrip()[:1]


def describe(voice_id: str, *, default: bool = False) -> Voice:
    tag, language, _ = LANGUAGES.get(voice_id[:1], ("und", "unknown language", ""))
    gender = GENDERS.get(voice_id[1:2], "neutral")
    name = voice_id.partition("_")[2].capitalize()
    grade = GRADES.get(voice_id, "")
    note = NOTES.get(voice_id)
    if note:
        text = f"Japanese {gender} voice, {note}; speaks English with a Japanese accent"
    else:
        text = f"{language} {gender} voice" + (f", grade {grade}" if grade else "")
    return Voice(voice_id, tag, gender, text, default=default, name=name, grade=grade)


@dataclass(frozen=True, slots=True)
class Blend:
    """Voices and their weights as given (each above 0), in the order given."""

    parts: tuple[tuple[str, float], ...]

    @property
    def id(self) -> str:
        """The canonical spelling: equal weights as ``a+b``, else ``a(2)+b(1)``. Weights are
        written to 6 significant digits, so the spelling read back gives the same spelling."""
        written = [f"{w:g}" for _, w in self.parts]
        if len(set(written)) == 1:
            return "+".join(v for v, _ in self.parts)
        return "+".join(f"{v}({w})" for (v, _), w in zip(self.parts, written))

    @property
    def weights(self) -> tuple[tuple[str, float], ...]:
        """The parts with weights that sum to 1."""
        total = sum(w for _, w in self.parts)
        return tuple((v, w / total) for v, w in self.parts)


def parse_blend(spec: str, known: frozenset[str] | set[str]) -> Blend | None:
    """A ``+``-joined blend of ``known`` voices; None when ``spec`` is a single voice id.

    Raises ``BadRequest`` (``unknown_voice``) naming the valid ids when a part is unknown,
    and ``invalid_option`` when a weight or the spelling is wrong.
    """
    if "+" not in spec:
        return None
    raw = spec.split("+")
    if len(raw) > MAX_BLEND_PARTS:
        raise BadRequest(f"a blend takes at most {MAX_BLEND_PARTS} voices, got {len(raw)}", code="invalid_option")
    weights: dict[str, float] = {}
    for part in raw:
        match = _PART.fullmatch(part.strip())
        if match is None:
            raise BadRequest(
                f"blend part {quoted(part.strip())} is not `voice` or `voice(weight)`, as in af_bella(2)+af_sky(1)",
                code="invalid_option",
            )
        voice, weight = match[1], float(match[2] or 1)
        if voice not in known:
            raise BadRequest(
                f"unknown voice {quoted(voice)} in blend {quoted(spec)}; choose from {', '.join(sorted(known))}",
                code="unknown_voice",
            )
        weights[voice] = weights.get(voice, 0.0) + weight
        if not 0 < weight <= weights[voice] <= 1000:  # the sum is what the id holds
            raise BadRequest(
                f"blend weight of {quoted(voice)} must be above 0 and at most 1000 (parts of one voice add up)",
                code="invalid_option",
            )
    return Blend(tuple(weights.items()))


def resolve(spec: str, known: frozenset[str] | set[str]) -> str:
    """``spec`` as a voice id or canonical blend id; ``BadRequest`` listing valid ids if not."""
    spec = spec.strip()
    blend = parse_blend(spec, known)
    if blend is not None:
        return blend.id
    if spec not in known:
        raise BadRequest(
            f"unknown voice {quoted(spec)}; choose one of {', '.join(sorted(known))}, "
            "or a blend such as af_bella(2)+af_sky(1)",
            code="unknown_voice",
        )
    return spec
