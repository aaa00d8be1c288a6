"""One queue for the engine across sessions: engine calls go in deadline order.

Every engine call a flight makes (``synthesis.py``) first takes one of the engine's ``slots``
(its ``max_concurrency``: the inferences it runs at once). While all are taken, callers wait,
and a freed slot goes to the waiter whose deadline is earliest: the moment its listener's
buffer runs dry (``Listener.deadline``), earliest-deadline-first, the classic rule for
real-time work. An engine with thousands of slots (the fake engine, remote endpoints) never
makes anyone wait, so for them this is a pass-through.

Earliest deadline first is optimal while every deadline can be met, and spreads the gaps over
everyone once they cannot (an engine that slows after admission): then a listener whose player
plays goes before one that has not started (which only starts later) or that was admitted after
it, where serving that one first would make it run dry (``_before``). Admitted listeners do not
stall because someone came after them.

What is running and what waits (each with its forecast work) is what ``budget.py`` reads to
forecast the engine's load and a new session's start.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

HOLD_S = 0.05  # the longest a freed slot waits for its last holder's next call
# when the owner was admitted, while its player plays (None: it waits for its first start, or
# nobody plays it): who goes first when not every deadline can be met
Standing = Callable[[], float | None]


def nobody() -> float | None:
    return None


Key = tuple[float, float, Standing, float]  # a call's deadline, work, standing and early_s


@dataclass(slots=True, eq=False)
class Call:
    """One engine call holding or awaiting a slot."""

    deadline: float  # the owner's clock (perf_counter): when its listener runs dry
    work_s: float  # forecast compute
    owner: object | None = None  # the Listener it is for (None: nobody in particular)
    standing: Standing = nobody
    early_s: float = 0.0  # how long before its end its audio may be due (streamed: ``edf.Job``)
    started: float | None = None  # when it got its slot
    granted: asyncio.Future[None] | None = field(default=None, repr=False)
    # set by the caller as the call ends: the deadline of the owner's next call (None: it has none)
    then: float | None = None


@dataclass(slots=True, eq=False)
class _Hold:
    """A freed slot kept for its last holder, whose next call has the earliest deadline."""

    owner: object
    key: Key  # its next call's: the deadline it reported, work and early_s forecast as its last one's
    timer: asyncio.TimerHandle


def _before(first: Key, then: Key, now: float, stretch: float = 1.0) -> bool:
    """Does the call ``first`` go before ``then``, whose deadline is earlier? Only when
    ``first``'s listener plays, ``then``'s does not or was admitted later, and ``then`` first
    would make ``first``'s listener run dry (their work ``stretch``ed as calls run over now)."""
    since = first[2]()
    if since is None or now + stretch * (then[1] + first[1]) - first[3] <= first[0]:
        return False
    other = then[2]()
    return other is None or since < other


def _first(a: Key, b: Key, now: float, stretch: float) -> bool:
    """Does call ``a`` go before ``b``: the earlier deadline, unless ``_before`` says otherwise."""
    if _before(a, b, now, stretch):
        return True
    return not _before(b, a, now, stretch) and a[0] < b[0]


class EngineScheduler:
    def __init__(
        self, slots: int, clock: Callable[[], float] = time.perf_counter, stretch: Callable[[], float] = lambda: 1.0
    ) -> None:
        self.slots = max(1, slots)
        self.clock = clock
        self.stretch = stretch  # how far calls run over their forecast work now (1: on time)
        self.running: list[Call] = []
        self._waiting: list[tuple[float, int, Call]] = []  # by deadline, then arrival, when sorted
        self._held: dict[int, _Hold] = {}  # by id(owner)
        self._seq = itertools.count()
        self.served: list[object | None] = []  # owners in the order they got a slot (last 64)

    @property
    def waiting(self) -> list[Call]:
        return [c for _, _, c in sorted(self._waiting)]

    def remaining_s(self) -> list[float]:
        """Forecast compute left in each running call (0 where it ran over its forecast)."""
        now = self.clock()
        return [max(0.0, c.work_s - (now - (c.started or now))) for c in self.running]

    @contextlib.asynccontextmanager
    async def slot(
        self,
        deadline: float,
        work_s: float,
        owner: object | None = None,
        standing: Standing = nobody,
        early_s: float = 0.0,
    ) -> AsyncIterator[Call]:
        """Hold a slot for the body: at once when one is free (or kept for ``owner``) and
        nobody waits, else when this call's deadline is the earliest among those waiting and a
        slot frees. A caller that sets ``call.then`` keeps its slot while its next call is due
        first: a reply's segments run one after another, so without that the slot would go
        to whoever waits at the instant it frees (round robin), never earliest deadline first.
        ``standing`` (the owner's, read when a slot is given) and ``early_s`` (``edf.Job``'s)
        say who goes first when not every deadline can be met (``_before``)."""
        call = Call(deadline, work_s, owner, standing, early_s)
        hold = self._held.pop(id(owner), None) if owner is not None else None
        if hold is not None:
            hold.timer.cancel()  # kept for a call forecast as its last one: this one may go after
            if (head := self._next()) is not None and _first(_key(head), _key(call), self.clock(), self.stretch()):
                hold = None
        if hold is not None or (len(self.running) + len(self._held) < self.slots and not self._waiting):
            self._start(call)
        else:
            call.granted = asyncio.get_running_loop().create_future()
            self._waiting.append((deadline, next(self._seq), call))
            self._grant()  # a kept slot yields to an earlier deadline
            try:
                await call.granted
            except asyncio.CancelledError:
                if call in self.running:  # granted in the same tick as the cancel: pass it on
                    self._release(call)
                else:
                    self._waiting = [w for w in self._waiting if w[2] is not call]
                raise
        try:
            yield call
        finally:
            self._release(call)

    def _start(self, call: Call) -> None:
        call.started = self.clock()
        self.running.append(call)
        self.served = [*self.served[-63:], call.owner]

    def _release(self, call: Call) -> None:
        if call in self.running:
            self.running.remove(call)
            owner, then = call.owner, call.then
            if owner is not None and then is not None:
                head = self._next()
                mine = (then, call.work_s, call.standing, call.early_s)
                if head is None or _first(mine, _key(head), self.clock(), self.stretch()):
                    timer = asyncio.get_running_loop().call_later(HOLD_S, self._expire, owner)
                    self._held[id(owner)] = _Hold(owner, mine, timer)
        self._grant()

    def _expire(self, owner: object) -> None:
        """The holder did not come back in time (its next segment came from the cache, or it ended)."""
        self._held.pop(id(owner), None)
        self._grant()

    def served_elsewhere(self, owner: object) -> None:
        """``owner``'s next segment needs no call of its own (it joined another's, or came from
        the cache): a slot kept for it goes on now, not when the hold runs out ("Play both":
        the two replies take turns making a segment, and each waited 50 ms for the other)."""
        if (hold := self._held.pop(id(owner), None)) is not None:
            hold.timer.cancel()
            self._grant()

    def _next(self) -> Call | None:
        """The waiter a freed slot goes to: the earliest deadline, unless one it would make run
        dry goes first (``_before``; each step to one that plays, or was admitted sooner)."""
        if not self._waiting:
            return None
        now, k, order = self.clock(), self.stretch(), [c for _, _, c in sorted(self._waiting)]
        pick = order[0]
        for _ in order:
            first = next((c for c in order if c is not pick and _before(_key(c), _key(pick), now, k)), None)
            if first is None:
                break
            pick = first
        return pick

    def _grant(self) -> None:
        while (nxt := self._next()) is not None:
            if len(self.running) + len(self._held) >= self.slots:
                now, k = self.clock(), self.stretch()
                latest = max(self._held.values(), key=lambda h: h.key[0], default=None)
                if latest is None or not _first(_key(nxt), latest.key, now, k):
                    return
                latest.timer.cancel()  # a call that goes first came: the kept slot is its
                del self._held[id(latest.owner)]
            self._waiting = [w for w in self._waiting if w[2] is not nxt]
            if nxt.granted is not None and not nxt.granted.done():
                self._start(nxt)
                nxt.granted.set_result(None)


def _key(call: Call) -> Key:
    return call.deadline, call.work_s, call.standing, call.early_s
