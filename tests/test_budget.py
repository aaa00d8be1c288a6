"""The engine across sessions: deadline order, the real-time budget, the oracle start.

Deterministic: listeners and the budget run on a clock the test sets; the scheduler's order
is the order slots were granted; admission is the budget's verdict on known work.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from bench.player import Arrival, simulate
from gateway.config import Settings
from gateway.core.budget import Budget, ShareKey, edf, late, newcomer, share_key
from gateway.core.engine_rate import EngineRate
from gateway.core.listener import Listener
from gateway.core.options import StreamOptions
from gateway.core.schedule import oracle_start
from gateway.core.scheduler import EngineScheduler
from gateway.errors import Overloaded
from gateway.web.state import GATEWAY
from tests.conftest import Server
from tests.support.members import Fixed, Seat

RATE = 24000


class Clock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def steady_rate(rtf: float) -> EngineRate:
    """An engine measured at ``rtf`` on ten 2 s segments of 20 characters (0.1 s a character)."""
    rate = EngineRate()
    for _ in range(10):
        rate.observe(None, 2.0, 2.0 * rtf, 2.0 * rtf, chars=20)
    return rate


def listener(
    rate: EngineRate, clock: Clock, budget: Budget | None = None, settings: Settings | None = None
) -> Listener:
    return Listener(
        rate,
        settings or Settings(),
        StreamOptions(voice="tone_a"),
        requested=None,
        sample_rate=RATE,
        budget=budget,
        clock=clock,
    )


async def test_the_engine_serves_the_earliest_deadline_first() -> None:
    clock, rate = Clock(), steady_rate(0.5)
    a, b, c = (listener(rate, clock) for _ in range(3))
    for x in (a, b):
        x.preroll_told_s = 0.0
    a.first_audio(), b.first_audio()
    a.made(2 * RATE)  # playing since t=100 with 2 s made: dry at 102
    b.made(5 * RATE)  # ... with 5 s made: dry at 105
    c.preroll_told_s, c.promised_start = 2.0, clock.t + 3.0  # no audio yet, promised to start at 103
    assert (a.deadline(), b.deadline(), c.deadline()) == (102.0, 105.0, 103.0)

    engine = EngineScheduler(slots=1)
    busy = engine.slot(0.0, 1.0)
    await busy.__aenter__()  # the engine is busy: the three wait
    order: list[str] = []

    async def call(name: str, who: Listener) -> None:
        async with engine.slot(who.deadline(), 1.0, who):
            order.append(name)

    tasks = [asyncio.create_task(call(n, x)) for n, x in (("b", b), ("c", c), ("a", a))]
    await asyncio.sleep(0)
    assert [w.owner for w in engine.waiting] == [a, c, b]
    await busy.__aexit__(None, None, None)
    await asyncio.gather(*tasks)
    assert order == ["a", "c", "b"]


async def test_a_waiter_cancelled_as_its_slot_frees_passes_the_slot_on() -> None:
    engine = EngineScheduler(slots=1)
    busy = engine.slot(0.0, 1.0)
    await busy.__aenter__()
    got: list[str] = []

    async def call(name: str, deadline: float) -> None:
        async with engine.slot(deadline, 1.0):
            got.append(name)

    first, second = asyncio.create_task(call("first", 1.0)), asyncio.create_task(call("second", 2.0))
    await asyncio.sleep(0)
    await busy.__aexit__(None, None, None)  # grants `first` ...
    first.cancel()  # ... which is cancelled in the same tick
    await asyncio.gather(first, second, return_exceptions=True)
    assert got == ["second"] and not engine.running


def test_preroll_counts_the_work_queued_ahead() -> None:
    clock, rate = Clock(), steady_rate(0.5)
    budget = Budget(rate, EngineScheduler(slots=1), Settings(), clock=clock)
    texts = ["x" * 20] * 3  # three segments of 2 s, 1 s of compute each (plus the margin)
    alone = listener(rate, clock, budget)
    assert alone.shared_preroll_s(texts) is None  # nobody else: the listener's own forecast
    assert alone.preroll_ms(texts, None) == 0  # the engine keeps ahead at RTF 0.5
    # another listener whose buffer runs dry at 1, 3 and 5 s needs 1.5 s of the engine before each
    budget.add(Fixed([(1.5, 1.0), (1.5, 3.0), (1.5, 5.0)]))
    shared = listener(rate, clock, budget)
    need = shared.preroll_ms(texts, None)
    assert need > 0
    # where the scheduler puts this reply's segments, a player holding that much never runs dry
    mine = shared.stream(shared.audio_of(texts), clock.t, None, current=False)
    others, free = budget.streams(exclude=shared)
    finish = edf([*others, mine], free)[-1]
    arrivals = [Arrival(0.0, preroll_s=need / 1000)] + [
        Arrival(t, audio_s=j.audio_s) for t, j in zip(finish, mine.jobs)
    ]
    played = simulate(sorted(arrivals, key=lambda x: x.t_s) + [Arrival(finish[-1], done=True)])
    assert played.stalls == 0
    assert played.start_s >= oracle_start([(t, j.audio_s) for t, j in zip(finish, mine.jobs)]) - 1e-9


def test_admission_refuses_who_would_make_a_listener_stall_and_admits_once_the_load_falls() -> None:
    clock, rate = Clock(), steady_rate(0.5)
    settings = Settings(max_start_s=3.0, queue_timeout_s=2.0)
    budget = Budget(rate, EngineScheduler(slots=1), settings, clock=clock)
    playing = Fixed([(0.9, k + 1.0) for k in range(10)])  # 0.9 s of the engine for every second played
    budget.add(playing)
    reply = [2.0] * 5  # 10 s of audio, 1 s of compute per segment
    # admitted now, it would make the playing listener run dry
    work, _ = budget.plan(reply, None)
    others, free = budget.streams()
    together = edf([*others, newcomer(work, reply, 0.0)], free)
    assert late(others[0], together[0]) > 0 and late(others[0], edf(others, free)[0]) <= 0
    with pytest.raises(Overloaded) as refused:
        budget.admit(reply, None)
    assert refused.value.retry_after > settings.queue_timeout_s  # the wait, as forecast
    assert budget.verdict(reply, None).start_s > settings.max_start_s
    budget.remove(playing)  # that listener's reply ended: the load falls
    assert budget.load() == 0.0
    v = budget.admit(reply, None)
    assert v.wait_s == 0.0 and v.start_s <= settings.max_start_s


def test_a_longer_queue_timeout_queues_instead_and_says_for_how_long() -> None:
    clock, rate = Clock(), steady_rate(0.5)
    budget = Budget(rate, EngineScheduler(slots=1), Settings(max_start_s=3.0, queue_timeout_s=60.0), clock=clock)
    budget.add(Fixed([(0.9, k + 1.0) for k in range(10)]))
    v = budget.admit([2.0] * 5, None)
    assert v.wait_s > 0 and v.to_fields()["queued_ms"] == round(v.wait_s * 1000)
    assert v.start_s == pytest.approx(v.wait_s + 3.0)


def test_a_session_alone_is_admitted_at_once_even_on_a_slow_engine() -> None:
    clock, rate = Clock(), steady_rate(2.0)  # twice slower than real time
    budget = Budget(rate, EngineScheduler(slots=1), Settings(max_start_s=3.0), clock=clock)
    v = budget.admit([3.0] * 5, None)
    assert v.wait_s == 0.0 and v.start_s > 3.0 and v.start_s == v.alone_s


class Sharing(Fixed):
    """A ``Fixed`` member whose synthesis identical replies share (``cache`` on), promised a start."""

    def __init__(self, jobs: list[tuple[float, float]], texts: list[str], clock: Clock, start_s: float) -> None:
        super().__init__(jobs)
        self.key = share_key("tone_a", 1.0, None, texts, True)
        self.listener = Seat(clock() + start_s)

    def share_key(self) -> ShareKey | None:
        return self.key


def test_a_reply_that_shares_its_synthesis_is_admitted_with_its_twin_and_counted_once() -> None:
    """ "Play both": the same text on two channels is one reply's engine work, not two."""
    clock, rate = Clock(), steady_rate(0.5)
    settings = Settings(max_start_s=1.0, queue_timeout_s=60.0)
    budget = Budget(rate, EngineScheduler(slots=1), settings, clock=clock)
    texts = [f"Sentence number {k} of the reply." for k in range(5)]
    first = Sharing([(0.9, k + 1.0) for k in range(5)], texts, clock, start_s=0.4)
    budget.add(first)
    load, backlog = budget.load(), budget.backlog_s()
    audio = [2.0] * 5
    # the same text with sharing off: more work for a booked engine, so it waits
    assert budget.admit(audio, None).wait_s > 0
    # with sharing on, and with a little less left (its twin is a segment ahead): its twin's start, no wait
    for mine in (texts, texts[1:]):
        v = budget.admit(audio, None, share_key("tone_a", 1.0, None, mine, True))
        assert v.wait_s == 0.0 and v.start_s == pytest.approx(0.4)
    # another voice, speed or text shares nothing
    for other in (
        share_key("tone_b", 1.0, None, texts, True),
        share_key("tone_a", 1.2, None, texts, True),
        share_key("tone_a", 1.0, None, texts[:2] + ["Something else."], True),
    ):
        assert budget.admit(audio, None, other).wait_s > 0
    budget.add(Sharing([(0.9, k + 1.0) for k in range(5)], texts, clock, start_s=0.4))
    assert (budget.load(), budget.backlog_s()) == (load, backlog)  # its twin's work, counted once
    assert budget.streams(exclude=first)[0] == []  # nor counted as others' work ahead of it
    # the preroll of the second: its twin's work is its own, not work queued ahead of it
    second = listener(rate, clock, budget)
    assert second.shared_preroll_s(texts) is None  # nobody else's work on the engine
    assert second.shared_preroll_s([f"Another sentence {k}." for k in range(5)]) > 0


@pytest.mark.parametrize(
    ("arrivals", "start"),
    [
        ([], 0.0),
        ([(0.2, 1.0), (0.9, 1.0), (1.5, 1.0)], 0.2),  # ahead of playback from the first payload
        ([(0.5, 1.0), (1.0, 1.0), (3.0, 1.0)], 1.0),  # the third comes 1 s after its place
        ([(2.0, 0.5), (2.1, 0.5), (2.2, 3.0), (6.0, 1.0)], 2.0),  # 6.0 - 4.0 audio before it
    ],
)
def test_the_oracle_start(arrivals: list[tuple[float, float]], start: float) -> None:
    assert oracle_start(arrivals) == pytest.approx(start)
    # a player that starts there plays through; a little earlier, it runs dry
    if arrivals:
        played = [Arrival(t, audio_s=a) for t, a in arrivals]
        held = sum(a for t, a in arrivals if t <= start + 1e-9)
        assert simulate([Arrival(0.0, preroll_s=held), *played]).stalls == 0
        early = sum(a for t, a in arrivals if t <= start - 0.3)
        if start > arrivals[0][0] + 0.3:
            assert simulate([Arrival(0.0, preroll_s=early), *played]).stalls > 0


WORDS = (
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
    "quebec",
    "romeo",
    "sierra",
    "tango",
)


def reply(k: int, sentences: int = 5, words: int = 6) -> str:
    """A reply of its own (no segment shared with another listener's)."""
    return " ".join(
        " ".join(f"{WORDS[(k * 7 + s * 3 + w) % len(WORDS)]}{k}" for w in range(words)).capitalize() + "."
        for s in range(sentences)
    )


async def paced_gateway(
    start_server: Callable[..., Awaitable[Server]], http: aiohttp.ClientSession, warm_up: str, **settings: Any
) -> tuple[Server, str]:
    """A gateway on one fake engine computing one segment at a time (``fake_rtf`` and the
    budget's limits in ``settings``), its engine rate measured on ``warm_up``: (server, SSE URL)."""
    from bench.client import sse_stream

    from .conftest import fake_settings

    server = await start_server(fake_settings(fake_workers=1, fake_chunk_ms=100, **settings))
    url = server.url + "/v1/stream/sse"
    await sse_stream(http, url, text=warm_up, format="pcm")  # the engine's rate, measured
    return server, url


async def until_members(server: Server, n: int) -> None:
    """Until ``n`` listeners are members of the engine's budget (admitted and playing)."""
    while len(server.app[GATEWAY].hub.budget.members) < n:
        await asyncio.sleep(0.01)


async def test_a_fourth_listener_on_an_engine_for_three_is_queued_while_the_three_play_through(
    start_server, http
) -> None:
    from bench.client import sse_stream
    from bench.player import session_run

    # one engine computing one segment at a time at RTF 0.25: three listeners take 0.75 of it
    server, url = await paced_gateway(
        start_server,
        http,
        reply(9, sentences=8, words=3),
        fake_rtf=0.25,
        max_start_s=3.0,
        queue_timeout_s=30.0,
        cache_mb=0,
    )
    first = [asyncio.create_task(sse_stream(http, url, text=reply(k), format="pcm")) for k in range(3)]
    await until_members(server, 3)
    fourth = await sse_stream(http, url, text=reply(3), format="pcm")
    three = await asyncio.gather(*first)
    for r in three:
        assert r.of("ready")[0]["queued_ms"] == 0 and r.done is not None
        assert session_run(r)["stalls"] == 0
    assert fourth.of("ready")[0]["queued_ms"] > 0
    assert fourth.done is not None


async def test_a_listener_the_engine_cannot_fit_is_refused_with_retry_after_and_the_load_is_published(
    start_server, http
) -> None:
    from bench.client import sse_stream, ws_stream

    server, url = await paced_gateway(
        start_server,
        http,
        reply(8, sentences=6, words=3),
        fake_rtf=0.6,
        max_start_s=1.0,
        queue_timeout_s=1.0,
        cache_mb=0,
    )
    playing = asyncio.create_task(sse_stream(http, url, text=reply(0, sentences=8, words=3), format="pcm"))
    await until_members(server, 1)
    async with http.get(server.url + "/readyz") as r:
        budget = (await r.json())["budget"]
    assert budget["listeners"] == 1 and 0.5 < budget["load"] < 1.0 and budget["backlog_s"] > 0
    async with http.get(server.url + "/metrics") as r:
        assert "tts_engine_load " in await r.text()
    async with http.post(url, json={"text": reply(1, sentences=8, words=3), "format": "pcm"}) as r:
        assert r.status == 503 and int(r.headers["Retry-After"]) >= 1
        assert (await r.json())["error"]["code"] == "overloaded"
    refused = await ws_stream(http, server.ws_url, text=reply(2, sentences=8, words=3), options={"format": "pcm"})
    assert refused.error["code"] == "overloaded" and refused.error["retry_after"] >= 1
    assert refused.close_code == 1013 and not refused.payloads
    assert (await playing).done is not None


async def test_play_both_is_one_reply_of_work_not_two(start_server, http) -> None:
    """The demo's "Play both": the same text on SSE and the WebSocket at once shares its
    synthesis (the hub), so the budget books it once: the second channel is admitted at once on
    an engine too busy for a second reply of its own (which is refused, as control)."""
    from bench.client import sse_stream, ws_stream

    server, url = await paced_gateway(
        start_server, http, reply(8, sentences=6, words=3), fake_rtf=0.6, max_start_s=1.0, queue_timeout_s=1.0
    )
    text = reply(0, sentences=8, words=3)
    playing = asyncio.create_task(sse_stream(http, url, text=text, format="pcm"))
    await until_members(server, 1)
    other = await ws_stream(http, server.ws_url, text=reply(2, sentences=8, words=3), options={"format": "pcm"})
    assert other.error["code"] == "overloaded"  # a reply of its own does not fit
    # the demo page's WebSocket sends its text in ``start``: known when the session is admitted
    both = await ws_stream(http, server.ws_url, text="", options={"format": "mp3", "text": text})
    assert both.error is None and both.done is not None and both.payloads
    assert both.of("ready")[0]["queued_ms"] == 0
    assert (await playing).done is not None
    async with http.get(server.url + "/metrics") as r:
        metrics = await r.text()
    joined = [
        line
        for line in metrics.splitlines()
        if line.startswith("tts_synthesis_cache_total")
        and 'outcome="join"' in line
        or line.startswith("tts_synthesis_cache_total")
        and 'outcome="hit"' in line
    ]
    assert sum(float(line.rsplit(" ", 1)[1]) for line in joined) > 0  # the work was shared, not redone


def test_margins_learn_what_the_arrivals_needed() -> None:
    from gateway.core.margins import Margins, needed_stretch
    from gateway.core.schedule import Forecast
    from gateway.core.schedule import preroll_s as preroll

    # forecast: four whole segments of 2 s, 1 s of compute each: no preroll needed
    segments = [Forecast(2.0, 1.0)] * 4
    at = lambda s: preroll(segments, 0.0, s)  # noqa: E731
    assert at(1.0) == 0.0
    # the engine ran as forecast: the forecast itself was enough
    assert needed_stretch(at, [(1.0, 2.0), (2.0, 2.0), (3.0, 2.0), (4.0, 2.0)]) == 1.0
    # each call took 2.4 s: the arrivals needed a start at 3.6 s, a hold of two segments,
    # which the forecast gives once stretched past 2
    slow = [(2.4, 2.0), (4.8, 2.0), (7.2, 2.0), (9.6, 2.0)]
    assert oracle_start(slow) == pytest.approx(3.6)
    needed = needed_stretch(at, slow)
    assert 2.0 < needed <= 2.02 and at(needed) >= 4.0 and at(2.0) == 0.0
    rate = steady_rate(0.9)
    assert rate.safety(1.15, "default") == 1.15  # nothing learned yet: the floor
    for needed in (1.0, 1.05, 1.0):
        rate.margins.observe("default", needed, rate.overrun())  # as a reply reports it
    learned = rate.safety(1.15, "default")
    assert 1.0 <= learned < 1.15 and learned == Margins.factor(rate.margins, "default")
    assert rate.safety(1.15, "exact") == 1.15  # another mode learns on its own


def test_a_whole_segment_a_little_longer_than_forecast_needs_no_stretch() -> None:
    """The forecast held its first segment (1.33 s, estimated from its text) and started
    before the second; the engine made 1.44 s, and the oracle start fell just past that
    arrival. A player told any hold above 1.44 s starts at the second segment, where the
    forecast's own preroll already put it: stretch 1. (Counting the second segment in what
    was needed asked for a stretch that takes in a third: 1.8 on an engine exactly on time.)"""
    from gateway.core.margins import needed_hold, needed_stretch
    from gateway.core.schedule import Forecast
    from gateway.core.schedule import preroll_s as preroll

    segments = [Forecast(1.33, 1.06), Forecast(1.97, 1.58), Forecast(1.82, 1.46), Forecast(2.17, 1.73)]
    at = lambda s: preroll(segments, 0.0, s)  # noqa: E731
    came = [(1.152, 1.44), (2.688, 1.92), (4.416, 2.16), (6.144, 2.16)]
    assert oracle_start(came) == pytest.approx(1.248)
    assert needed_hold(came) == pytest.approx(1.441)
    assert at(1.0) == pytest.approx(3.30) and needed_stretch(at, came) == 1.0
