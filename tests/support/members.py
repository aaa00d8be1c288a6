"""Members of the engine's real-time budget for tests (``budget.Member``): real objects with
known work, not mocks."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.core.budget import Job, ShareKey, Stream


@dataclass
class Seat:
    """A listener as the budget sees it (``budget.Seat``)."""

    promised_start: float | None = None


class Fixed:
    """A member of the budget whose remaining work is known: ``jobs`` (work, deadline from now);
    it shares nothing (``share_key`` None)."""

    def __init__(self, jobs: list[tuple[float, float]]) -> None:
        self.jobs = jobs
        self.listener = Seat()

    def share_key(self) -> ShareKey | None:
        return None

    def stream(self, now: float, running: float | None) -> Stream:
        return Stream(tuple(Job(w, d, 1.0) for w, d in self.jobs))
