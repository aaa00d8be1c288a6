"""The engine contract: the ``Engine`` protocol, its one ``Capabilities`` declaration, and
``EngineBase``, the code every engine shares.

An engine turns one text segment into 16-bit little-endian mono PCM at ``sample_rate``,
yielded in chunks as soon as each exists. Closing the iterator early (``aclose``) must stop
the engine's remaining work for that segment: that is how a client's ``cancel`` or disconnect
reaches the model.

With ``timestamps=True`` (asked only of an engine that declares ``Capabilities.timestamps``)
the iterator also yields a ``gateway.kokoro.timestamps.WordTimes`` before the audio it describes: the
words of that audio, as written, in samples at ``sample_rate`` from the first sample of the
segment's audio as yielded (trimmed silence accounted for), clamped into it. A segment made
in several model calls (over 510 phonemes) yields one per call, each before that call's audio
and already offset by the audio yielded before it. Without ``timestamps`` only bytes come.

What an engine can do (voices, speeds, vocoder modes, ...) it declares once, in its
``capabilities``; request options are checked against that declaration in one place
(``gateway.core.options``), so ``synthesize`` takes its arguments as given.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, fields
from typing import Any, Protocol, TypeVar, runtime_checkable

from ..errors import BadRequest, EngineError, NotReady
from ..kokoro.timestamps import WordTimes
from ..kokoro.vocoder.modes import VocoderMode
from ..kokoro.voicecatalog import Voice as Voice  # re-exported: part of the engine contract

S = TypeVar("S")
T = TypeVar("T")
MIN_SPEED, MAX_SPEED = 0.5, 2.0  # Kokoro's speeds (the usual declaration)


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What an engine can do, declared once (some of it only known after ``start``)."""

    voices: tuple[Voice, ...] = ()
    default_voice: str = ""
    #: blends of its voices (``af_bella(2)+af_sky(1)``) are accepted as ``voice``
    blends: bool = False
    min_speed: float = MIN_SPEED
    max_speed: float = MAX_SPEED
    #: what ``synthesize`` yields (the core encodes it into the requested format)
    formats: tuple[str, ...] = ("pcm",)
    #: the ``vocoder`` values ``synthesize`` accepts; empty: it cannot stream inside a segment
    vocoder_modes: tuple[str, ...] = ()
    #: the mode used when a request names none (None when there are no modes)
    default_vocoder: str | None = None
    #: segments with less audio than this go to the exact model even when streaming
    exact_below_s: float = 0.0
    #: ``synthesize(..., timestamps=True)`` yields each piece's ``WordTimes`` before its audio
    timestamps: bool = False
    #: a listener holding audio (``buffered_s``, not ``waiting``) gets its chunks sized to that
    #: buffer, the first as late as it allows: such a call's first audio is not the soonest
    paces: bool = False

    @property
    def languages(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(v.language for v in self.voices))

    @property
    def streams_in_segment(self) -> bool:
        return bool(self.vocoder_modes)

    def vocoder_for(self, asked: str | None = None, *, live: bool = True) -> str | None:
        """The one place a vocoder mode is resolved: the mode asked for; else, for a live
        listener, the declared default; else, for a whole file (nobody waits on it), exact.
        None where the engine has no modes."""
        if asked or not self.vocoder_modes:
            return asked or None
        return self.default_vocoder if live else VocoderMode.EXACT


@runtime_checkable
class Engine(Protocol):
    name: str
    sample_rate: int
    #: inferences that may run at once (admission allows a few times more sessions)
    max_concurrency: int

    @property
    def capabilities(self) -> Capabilities: ...

    @property
    def voices(self) -> tuple[Voice, ...]: ...

    @property
    def default_voice(self) -> str: ...

    @property
    def vocoder_modes(self) -> tuple[str, ...]: ...

    @property
    def vocoder_status(self) -> dict[str, Any] | None:
        """For ``/readyz``: the state of streaming inside a segment (None: no vocoder to build)."""
        ...

    @property
    def batching(self) -> dict[str, Any] | None:
        """For ``/readyz``: how sessions' pieces share forward passes (None: no batching)."""
        ...

    @property
    def voice_store(self) -> dict[str, Any] | None:
        """For ``/v1/voices``: which voice packs are in use (None: the engine has no packs)."""
        ...

    @property
    def work(self) -> dict[str, int]:
        """For ``/metrics`` (``tts_engine_work{kind}``): counts of the engine's own work since it
        started, such as ``calls`` (model calls); empty where it counts none."""
        ...

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...

    async def close_idle(self) -> None:
        """Close the connections kept open for reuse (a shutdown's first step, so that the
        server at their other end need not wait for them); calls in flight go on."""
        ...

    async def wait_vocoder(self, voice: str = "") -> bool:
        """Wait for the background work its vocoder modes need (the embedded engine builds its
        streaming vocoder after start); True once streaming inside a segment is available."""
        ...

    def synthesize(
        self,
        text: str,
        *,
        voice: str,
        speed: float,
        vocoder: str | None = None,
        buffered_s: float = 0.0,
        waiting: bool = False,
        timestamps: bool = False,
    ) -> AsyncGenerator[bytes | WordTimes, None]:
        """Yield s16le mono PCM chunks for ``text``. Raise ``EngineError`` on failure.

        The arguments are taken as given: ``gateway.core.options`` checked them against
        ``capabilities``. Hints for engines that stream inside a segment (the others ignore
        them): ``vocoder`` picks the mode (None: the declared default), ``buffered_s`` is the audio
        the listener holds and has not heard yet, as the core estimates it, and ``waiting`` says
        their player has not started: it wants this segment's first audio soonest. With
        ``timestamps`` (engines that declare them), ``WordTimes`` come before the audio they
        describe (see the module's docstring); otherwise only bytes.
        """
        ...


class EngineBase:
    """What every engine shares: the declaration, its voices and the not-started guard."""

    name = "engine"
    sample_rate = 24000
    max_concurrency = 1

    def __init__(self) -> None:
        self._capabilities = Capabilities()

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    def declare(self, **changes: Any) -> None:
        """Replace parts of the declaration (an engine learns its voices at ``start``)."""
        fields_now = {f.name: getattr(self._capabilities, f.name) for f in fields(Capabilities)}
        self._capabilities = Capabilities(**{**fields_now, **changes})

    @property
    def voices(self) -> tuple[Voice, ...]:
        return self._capabilities.voices

    @property
    def default_voice(self) -> str:
        return self._capabilities.default_voice

    @property
    def vocoder_modes(self) -> tuple[str, ...]:
        return self._capabilities.vocoder_modes

    @property
    def vocoder_status(self) -> dict[str, Any] | None:
        return None

    @property
    def batching(self) -> dict[str, Any] | None:
        return None

    @property
    def voice_store(self) -> dict[str, Any] | None:
        return None

    @property
    def work(self) -> dict[str, int]:
        return {}

    async def wait_vocoder(self, voice: str = "") -> bool:
        return True  # nothing built in the background: the declared modes are ready

    async def close_idle(self) -> None:
        return None  # no connections kept for reuse

    def require(self, thing: S | None) -> S:
        """``thing`` (the loaded model, the client, the pool) or ``NotReady`` if not started."""
        if thing is None:
            raise NotReady(f"the {self.name} engine is not started")
        return thing

    def submit(self, executor: concurrent.futures.Executor, fn: Callable[[], T]) -> concurrent.futures.Future[T]:
        """``fn`` on the engine's ``executor``; ``NotReady`` if the pool was shut down under us."""
        try:
            return executor.submit(fn)
        except RuntimeError as exc:
            raise NotReady(f"the {self.name} engine is shutting down") from exc

    async def outcome(self, future: concurrent.futures.Future[T], what: str) -> T:
        """The result of a call ``submit`` started: the request's fault and the engine's own
        errors as raised, any other failure as an ``EngineError`` naming ``what`` failed."""
        try:
            return await asyncio.wrap_future(future)
        except (EngineError, BadRequest):
            raise
        except Exception as exc:
            raise EngineError(f"{self.name} {what} failed: {exc}") from exc
