"""A player that starts on a clock (``start_in_ms``) as well as on its hold (``preroll_ms``).

A player told to hold ``preroll_ms`` starts only when a payload brings its hold. Where the
engine makes segments whole, the earliest start that plays through (the forecast's, and the
oracle's afterwards) often falls between two arrivals a segment's synthesis apart, so the hold
started it up to that much late (``bench listeners``: 1.09 s where 0.52 s played through). A
``sentence`` that follows audio now also carries ``start_in_ms``: holding some audio, the
player starts that long after it. The replays run on virtual time (the fake engine at a known
pace, ``tests/support/virtual_time.py``); the assertions are on simulated players.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from bench.listeners import paragraph
from bench.player import Arrival, simulate
from gateway.config import Settings
from gateway.core.engine_rate import EngineRate
from gateway.core.listener import GRACE_S
from gateway.core.margins import needed_start
from gateway.core.options import parse_options
from gateway.core.schedule import Forecast, arrivals, earliest_start
from gateway.core.stream import StreamSession
from gateway.core.synthesis import SynthesisHub
from gateway.engines.fake import fake_duration_s

from .support.engines import JitteryFake, ModalFake
from .support.listeners_sim import Engine, Heard, sim_settings
from .support.sessions import spoken
from .support.virtual_time import run_virtual
from .test_budget import RATE, Clock, listener, steady_rate
from .test_synthesis import frozen_first_listener

WHOLE = 100_000  # the fake engine's chunk: longer than any segment, so each arrives whole
FIRST = "Done."
REPLY = f"{FIRST} Your dentist visit is now on Monday at nine. The clinic will remind you the day before."


def test_the_simulated_player_starts_on_the_clock_and_a_later_sentence_replaces_it() -> None:
    """0.4 s held against a hold of 0.9: told to start 0.2 s after the `sentence`, it plays from
    0.7 s and the next payload (1.0 s) is in time; without the offer it waits for it; an offer
    too early shows as a stall; a `sentence` without one cancels the last."""
    head = [Arrival(0.0, preroll_s=0.9), Arrival(0.5, audio_s=0.4)]

    def play(start_in: float | None, next_at: float = 1.0, *more: Arrival) -> tuple[float | None, int]:
        tail = [*more, Arrival(next_at, audio_s=1.0), Arrival(next_at, done=True)]
        p = simulate([*head, Arrival(0.5, preroll_s=0.9, start_in_s=start_in), *tail])
        return p.start_s, p.stalls

    assert play(0.2) == (pytest.approx(0.7), 0)
    assert play(None) == (pytest.approx(1.0), 0)
    assert play(0.2, 1.3)[1] == 1  # 0.4 s from 0.7 runs dry at 1.1
    assert play(0.2, 1.3, Arrival(0.6, preroll_s=0.9)) == (pytest.approx(1.3), 0)


def test_the_earliest_start_and_the_stretch_a_clock_start_needed() -> None:
    """Two whole segments forecast 0.5 s and 1.0 s of compute for 0.5 s and 2.0 s of audio: the
    second is due at 1.5 s and plays from 0.5 s, so the earliest start is 1.0 s; arrivals that
    came 20% late needed a stretch of 1.2."""
    segments = [Forecast(0.5, 0.5), Forecast(2.0, 1.0)]
    assert earliest_start(arrivals(segments, 1.0)) == pytest.approx(1.0)
    assert earliest_start(arrivals(segments, 1.0), held_s=1.5) == 0.0
    late = [(0.6, 0.5), (1.8, 2.0)]
    assert needed_start(lambda k: earliest_start(arrivals(segments, k)), late) == pytest.approx(1.2, abs=0.01)
    # the first came 0.7 s late, the second in time after it: the oracle is the first arrival
    # (1.2 s, after the forecast's start), and no clock start comes before audio is held, so
    # nothing needed stretching (counting the forecast's start, 1.2 would have been taught)
    first_late = [(1.2, 0.5), (1.6, 2.0)]
    assert needed_start(lambda k: earliest_start(arrivals(segments, k)), first_late) == 1.0


def listen(rtf: float, texts: list[str]) -> list[Heard]:
    async def main() -> list[Heard]:
        engine = Engine(sim_settings(rtf, WHOLE))
        await engine.warm()
        return [await engine.listen(t) for t in texts]

    return run_virtual(main)


def test_a_player_holding_a_short_first_segment_starts_before_the_next_one_comes() -> None:
    """Whole segments at RTF 0.8: players are offered clock starts, one starts between its
    first and second segments' arrivals, every start is within 1.3 x its oracle + 300 ms, and
    none stalls (before, the first reply started on its second segment: 2.69 s against an
    oracle of 1.25 s)."""
    heard = listen(0.8, [paragraph(k) for k in range(4)])
    assert all(h.stalls == 0 for h in heard), heard
    assert all(h.within_bar for h in heard), heard
    offered = [h for h in heard if h.start_ins_ms]
    assert offered, heard
    between = [h for h in offered if h.start_s is not None and h.arrivals_s[0] < h.start_s < second(h) - 1e-6]
    assert between, offered


def second(h: Heard) -> float:
    """When the first payload of the reply's second segment came (a whole segment's payloads come at once)."""
    return min(t for t in h.arrivals_s if t > h.arrivals_s[0] + 1e-6)


def test_no_clock_start_while_calls_run_over_their_forecast() -> None:
    """The same reply twice on whole segments at RTF 0.8, the second time on an engine that
    turned twice as slow: no arrival confirms a clock start, so none is offered while the
    latest call ran over its forecast (``bench playback``'s busy core stalled 0.3-1.2 s on
    clock starts before)."""

    async def main() -> tuple[Heard, Heard]:
        engine = Engine(sim_settings(0.8, WHOLE))
        await engine.warm()
        steady = await engine.listen(paragraph(0))
        engine.engine.options = replace(engine.engine.options, rtf=1.6)
        return steady, await engine.listen(paragraph(0))

    steady, slowed = run_virtual(main)
    assert steady.start_ins_ms and not slowed.start_ins_ms, (steady, slowed)


def test_the_gateway_counts_a_player_waiting_out_its_grace_as_not_started() -> None:
    """A player whose hold the first segment met waits ``GRACE_S`` for the next sentence's
    ``preroll_ms``, sent right after that segment, and holds that one if it is more. The
    gateway's model of the player agrees: before, it took the player to be playing, sized
    every later figure for a playing player (0) and offered no clock start, while the player
    waited for the next whole segment (``bench listeners`` N=1: 2.2 s where 0.95 s played through)."""
    clock, rate = Clock(), steady_rate(0.5)
    waits, plays = listener(rate, clock), listener(rate, clock)
    for x in (waits, plays):
        x.tell(0.0)
        x.made(RATE)  # the first segment, 1 s: the hold (0) is met
        assert x.t_play == clock.t
    clock.t += GRACE_S / 2
    waits.tell(1.5)  # within the grace: the player holds 1.5 s now
    assert waits.t_play is None and waits.buffered_s() == 1.0
    clock.t += GRACE_S
    plays.tell(1.5)  # after it: a figure for a player that runs dry; this one plays
    assert plays.t_play == clock.t - 1.5 * GRACE_S
    waits.made(RATE // 2)
    assert waits.t_play == clock.t  # it holds 1.5 s now
    # the player itself, on the same arrivals
    sent = [Arrival(0.0, preroll_s=0.0), Arrival(1.0, audio_s=1.0)]
    assert simulate([*sent, Arrival(1.0 + GRACE_S / 2, preroll_s=1.5), Arrival(2.0, audio_s=0.5)]).start_s == 2.0
    assert simulate([*sent, Arrival(1.0 + 1.5 * GRACE_S, preroll_s=1.5), Arrival(2.0, audio_s=0.5)]).start_s == 1.0


def test_a_player_started_on_its_clock_is_counted_from_it_though_no_call_looked_then() -> None:
    """The model of the player looks at its clock start only when something asks (an arrival,
    a figure). A stream's next chunk came 0.5 s after the clock ran out and met the hold too: the
    model counted the start from that chunk, took 0.4 s played for audio held, made the next
    sentence whole where it had to stream, and Chromium heard a 330 ms gap. It starts at its
    clock, and a later ``sentence`` (with its own offer, or none) does not undo that."""
    clock, rate = Clock(), steady_rate(0.5)
    for later in (None, 200.0):
        x = listener(rate, clock)
        x.tell(1.5)
        x.made(RATE // 2)  # 0.5 s held: the player waits for 1.5 s
        start = clock.t + 0.3
        x.offer_start(start)  # the next sentence: start 0.3 s from now holding that
        clock.t += 0.8  # the stream's next chunk
        if later is not None:
            x.offer_start(later)  # the sentence after it, sent before anything looked
            assert x.t_play == start
        x.made(RATE)  # 1.5 s made: the hold is met too, half a second after the clock
        assert x.t_play == start and not x.met
        assert x.buffered_s() == pytest.approx(1.5 - (0.8 - 0.3))  # played since its clock


def test_a_short_call_running_over_by_its_fixed_cost_is_not_a_slowdown() -> None:
    """Clock starts wait while calls run over their forecast (``recent_overrun``). A call much
    shorter than the engine's typical one counts its overrun in seconds against the typical
    call's forecast: a first segment of one word 50% over (its fixed cost) held back every
    clock start of the reply after it, beside 1 s calls on time. A typical call 30% over still
    counts in full, and a short call on time after it does not clear it."""
    rate = steady_rate(0.5)  # 2 s segments in 1 s
    short = rate.predict(None, 0.4)
    rate.observe(None, 0.4, 1.5 * short, 1.5 * short, chars=4)
    assert rate.recent_overrun() < 0.15
    rate.observe(None, 2.0, 1.3 * rate.predict(None, 2.0), 1.3, chars=20)
    assert rate.recent_overrun() == pytest.approx(0.3, abs=0.01)
    rate.observe(None, 0.4, rate.predict(None, 0.4), 0.1, chars=4)
    assert rate.recent_overrun() == pytest.approx(0.3, abs=0.01)


def test_a_player_waiting_for_its_hold_gets_the_next_segments_first_chunk_soonest() -> None:
    """An engine that streams inside a segment opens with a larger chunk where the listener's
    buffer allows (``buffered_s``: the audio a playing player has ahead). A player that holds
    a short first segment but waits for its hold is not playing: told it held that audio, the
    engine opened the next segment with a chunk that came just before that audio would have
    run out, and the player waited for it (``bench listeners``: "Done." then a 2.5 s sentence
    started 1.06 s where 0.53 s played through). Slower than real time, the player waits
    through the first segments: the engine is told it waits (``waiting``: the opening chunk
    soonest) and what it holds (for the chunks after it: tests/test_pacing.py); faster, it
    plays at once, with what it has ahead. (The second of two replies: the first measures the engine.
    PCM, whose stream carries all the audio made; MP3's look-ahead: the next test.)"""

    async def reply(hub: SynthesisHub, engine: ModalFake, settings: Settings) -> tuple[int, list[tuple[float, bool]]]:
        options = parse_options({"text": REPLY, "cache": False, "format": "pcm"}, settings, engine)
        asked = len(engine.asked)
        ready, events = await spoken(StreamSession(engine, options, settings, hub=hub), options.text)
        assert events[-1].type == "done", events[-1]
        return ready["preroll_ms"], [(b, w) for (_, b), w in zip(engine.asked[asked:], engine.waiting[asked:])]

    async def main(rtf: float) -> tuple[int, list[tuple[float, bool]]]:
        settings = sim_settings(rtf)
        engine = ModalFake(settings)
        hub = SynthesisHub(engine, cache_mb=0.0, settings=settings, clock=asyncio.get_running_loop().time)
        await reply(hub, engine, settings)
        return await reply(hub, engine, settings)

    preroll, told = run_virtual(lambda: main(1.3))
    assert preroll > 1000 * fake_duration_s(FIRST) and told[1] == (fake_duration_s(FIRST), True), (preroll, told)
    preroll, told = run_virtual(lambda: main(0.2))
    # it plays: what it has ahead (less the player's lead, over the forecasts' stretch)
    assert preroll == 0 and told[1][0] > 0.1 and not told[1][1], (preroll, told)


def test_the_engine_is_not_told_of_audio_the_encoder_still_holds() -> None:
    """A playing player holds what the stream carries: the MP3 encoder keeps its look-ahead (the
    next `sentence`'s ``held_back_ms``) until the next segment's audio. Told the audio made, the
    engine sized that segment's first chunk to come as a player started on "Hello!" ran dry
    (36-66 ms to spare in Chromium here, gaps of 121-219 ms on a CI host). PCM holds nothing back:
    the same replies in virtual time tell the engine less for MP3 by that look-ahead, over the
    forecasts' stretch (1 to 2)."""

    async def main(fmt: str) -> tuple[list[float], list[float]]:
        settings = sim_settings(0.2)
        engine = ModalFake(settings)
        hub = SynthesisHub(engine, cache_mb=0.0, settings=settings, clock=asyncio.get_running_loop().time)
        for _ in range(2):  # the first measures the engine
            options = parse_options({"text": REPLY, "cache": False, "format": fmt}, settings, engine)
            asked = len(engine.asked)
            _, events = await spoken(StreamSession(engine, options, settings, hub=hub), options.text)
        back = [e.fields.get("held_back_ms", 0.0) / 1000 for e in events if e.type == "sentence"]
        return [b for _, b in engine.asked[asked:]], back

    mp3, back = run_virtual(lambda: main("mp3"))
    pcm, none = run_virtual(lambda: main("pcm"))
    assert none[1:] == [0.0] * (len(none) - 1) and all(0.08 <= b <= 0.13 for b in back[1:]), (none, back)
    assert pcm[1] > 0.1 and mp3[1] > 0  # both play on "Done.", and the engine is told what they hold
    for told_mp3, told_pcm, held_back in zip(mp3[1:], pcm[1:], back[1:]):
        assert held_back / 2 - 1e-3 <= told_pcm - told_mp3 <= held_back + 1e-3, (mp3, pcm, back)


def test_while_calls_run_over_a_waiting_player_is_still_waiting_to_the_engine() -> None:
    """Every forecast for a player not started counts the next segment's first chunk at its
    soonest (``paced_from``), so the engine is told the player waits while the calls run over
    too: told it played, it paced that chunk to the audio held, and a cold press whose hold was
    0.24 s short of what it held waited for the whole next sentence, 2.0 s (Chromium, traced).
    What a slowdown still takes away is the clock start (the test before this one's)."""
    clock, rate = Clock(), steady_rate(0.5)
    waits = listener(rate, clock)
    waits.tell(2.0)
    waits.made(RATE)
    assert waits.t_play is None and waits.waiting() and waits.buffered_s() == 1.0
    rate.observe(None, 2.0, 1.4 * rate.predict(None, 2.0), 1.4, chars=20)  # 40% over
    assert waits.slowing() and waits.waiting() and waits.buffered_s() == 1.0
    clock.t += 2.0  # it starts on its hold: playing, no longer waiting
    waits.made(RATE)
    assert waits.t_play is not None and not waits.waiting()


@pytest.mark.parametrize("rtf", [0.5, 0.7])
def test_clock_starts_allow_for_the_slowest_recent_call(rtf: float) -> None:
    """Whole segments on a host whose calls vary: one in five 25% slower than the mean, one
    25% faster. A clock start has no arrival to round it up, so the call after it decides:
    stretched by the calls' RMS overrun (about 0.1 here), starts came 0.12-0.17 s early and ran
    dry; a player that runs dry then waits for a new hold (0.74-2.2 s on ``bench listeners``
    and this replay at RTF 0.9). Now at least 1 + 2 x the most a recent call ran over
    (``EngineRate.peak``): eight replies, no stall, clock starts still offered."""

    async def main() -> list[Heard]:
        settings = sim_settings(rtf, WHOLE)
        engine = Engine(settings, JitteryFake(settings, [rtf * p for p in (1.25, 1.0, 1.0, 0.75, 1.0)]))
        await engine.warm()
        return [await engine.listen(paragraph(k)) for k in range(8)]

    heard = run_virtual(main)
    assert all(h.outcome == "admitted" and h.stalls == 0 for h in heard), heard
    assert any(h.start_ins_ms for h in heard), heard


@pytest.mark.parametrize(
    ("held_s", "mode"), [(3.0, "frozen-first"), (3.9, "frozen-first"), (0.5, "exact"), (4.5, "exact")]
)
def test_a_waiting_player_short_of_its_hold_gets_the_next_segment_streamed(held_s: float, mode: str) -> None:
    """Streaming inside a segment slower than real time (exact calls at RTF 0.6, streamed ones
    1.2, their first audio at a tenth of the call), a player holding audio but not started:
    made whole, the next sentence (4.9 s) brings the player's hold only once all of it is made
    (``bench playback``'s busy core held 4.72 s of a 4.97 s hold and waited 4.4 s for a 5.6 s
    sentence). Streamed, its first chunks bring it sooner, so it streams, the first chunk
    soonest (``waiting``); holding little, the stream would take longer than the whole call to
    bring the hold, and holding more than the whole call's forecast, the player starts now: made
    whole in both."""
    rate = EngineRate()
    for audio in (0.6, 2.5, 3.0, 1.6, 0.6, 2.5, 3.0, 1.6):
        rate.observe("exact", audio, 0.08 + 0.6 * audio, 0.08 + 0.6 * audio, chars=round(audio / 0.065))
        rate.observe("frozen-first", audio, 0.08 + 1.2 * audio, 0.1 * (0.08 + 1.2 * audio), chars=round(audio / 0.065))
    texts = [
        "Hello there.",
        "This reply is streamed one sentence at a time, so the first word comes soon.",
        "Every sentence after it is made while the one before it plays.",
        "Done.",
    ]
    waits = frozen_first_listener(rate, Settings(preroll_safety=1.3))
    waits.preroll_ms(texts, "exact", complete=True)
    waits.first_audio()
    waits.made(round(RATE * held_s))
    assert rate.streaming_too_slow(1.3) and waits.t_play is None and waits.waiting()
    assert waits.mode_for(texts[1], texts[2:]) == mode
    hold = {m: waits.preroll_ms(texts[1:], m) / 1000 for m in ("exact", "frozen-first")}
    if held_s > 4.0:  # made whole, it is forecast to come before what the player holds runs out
        assert hold["exact"] == 0, hold
    else:  # made whole, the player holds all of it first
        assert hold["frozen-first"] < hold["exact"] and hold["exact"] > held_s + rate.audio_s(texts[1]) - 0.01, hold
