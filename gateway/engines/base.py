"""The Engine protocol every synthesis backend implements.

An engine turns one text segment into 16-bit little-endian mono PCM at ``sample_rate``,
yielded in chunks as soon as each exists. Closing the iterator early (``aclose``) must stop
the engine's remaining work for that segment: that is how a client's ``cancel`` or disconnect
reaches the model.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import AsyncIterator, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class Voice:
    id: str
    language: str  # BCP-47-ish: "ja", "en-US"
    gender: str  # "female" / "male" / "neutral"
    description: str = ""
    default: bool = False
    name: str = ""  # "Heart" for af_heart
    grade: str = ""  # hexgrad's overall grade, where graded
    wer: float | None = None  # measured English word error rate (bench quality), where measured

    def to_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "name": self.name or self.id,
            "language": self.language,
            "gender": self.gender,
            "grade": self.grade or None,
            "wer": self.wer,
            "description": self.description,
            "default": self.default,
        }


@runtime_checkable
class Engine(Protocol):
    name: str
    sample_rate: int
    #: the most input tokens (roughly characters of phonemes) one call accepts; the stream
    #: core keeps segments under ``max_segment_chars`` and the engine splits what is left.
    max_concurrency: int
    #: the ``vocoder`` values ``synthesize`` accepts (empty: it cannot stream inside a segment)
    vocoder_modes: tuple[str, ...]

    @property
    def voices(self) -> tuple[Voice, ...]: ...

    @property
    def default_voice(self) -> str: ...

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...

    def synthesize(self, text: str, *, voice: str, speed: float, vocoder: str | None = None,
                   buffered_s: float = 0.0) -> AsyncIterator[bytes]:
        """Yield s16le mono PCM chunks for ``text``. Raise ``EngineError`` on failure.

        Hints for engines that stream inside a segment (``vocoder_modes`` not empty; the
        others ignore them): ``vocoder`` picks the mode (None: the engine's setting), and
        ``buffered_s`` is the audio the listener holds and has not heard yet, so the engine
        can tell whether anyone is waiting for this segment's first sound.
        """
        ...
