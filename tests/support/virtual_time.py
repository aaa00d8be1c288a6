"""An event loop on virtual time: nothing ever waits, every timer fires in order at once.

When no callback is ready and no file descriptor has input, the loop jumps its clock straight
to the next timer instead of sleeping. Code that measures time with ``loop.time()`` (the fake
engine's pace, ``asyncio.sleep``, ``asyncio.timeout``, and the gateway's schedules once their
hub is given ``clock=loop.time``) sees exactly the times it would see on an idle machine of
infinite speed: a run is deterministic, a minute of audio plays out in milliseconds.

For in-process work only (no sockets: a peer on real time would see the clock race ahead).
``looptime`` does the same as a pytest plugin bound to pytest-asyncio's loop; a runner of our
own lets a plain test own its loop and its clock.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


class _Skipping(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    def __init__(self, loop: VirtualTimeLoop) -> None:
        super().__init__()
        self._virtual = loop

    def select(self, timeout: float | None = None) -> list[tuple[Any, int]]:
        events: list[tuple[Any, int]] = super().select(0)
        if events or timeout is None:  # no timer at all: only a thread could wake the loop
            return events if events or timeout is not None else super().select(None)
        self._virtual.now += max(0.0, timeout)  # nothing to do until the next timer: skip to it
        return events


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self.now = 0.0
        super().__init__(_Skipping(self))

    def time(self) -> float:
        return self.now


def run_virtual(main: Callable[[], Awaitable[T]]) -> T:
    """Run ``main()`` on a fresh ``VirtualTimeLoop`` and return its result."""
    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(main())  # type: ignore[arg-type]
