"""The streaming vocoder's pacing (``pacing.py``, ``StreamingVocoder._stream``): its window
costs, and streams on a simulated engine: calls that take no real time, each charged to a
virtual clock by a cost line (``bench/pacing_sim.py``), so chunk sizes and arrivals are exact
and the same on every machine."""

from __future__ import annotations

import logging
import re

import pytest

from bench.pacing_sim import LEAD, player_stall, reply, simulate, simulated_engine
from gateway.kokoro.vocoder import Policy
from gateway.kokoro.vocoder.chunked import SAMPLE_RATE

SPAN = 100  # generator frames: a 2.5 s sentence


def stream(
    rtf: float, buffered_s: float, waiting: bool, span: int = SPAN
) -> tuple[list[tuple[float, float]], list[int], float]:
    """One sentence (``span`` frames) streamed frozen-first: (arrival s, audio s) per chunk, the
    generator windows and the engine's busy seconds."""
    with simulated_engine(Policy(exact_below=0), rtf, fixed_ms=10.0) as (clock, vocoder, runner_for):
        runner = runner_for(span)
        chunks = vocoder._stream(runner, LEAD, LEAD + span, True, None, buffered_s, waiting)  # type: ignore[arg-type]
        got = [(clock.now, len(audio) / SAMPLE_RATE) for audio in chunks]
        return got, runner.windows, clock.now


@pytest.mark.parametrize("rtf", [0.45, 0.6])
def test_a_waiting_player_gets_the_first_chunk_soonest_and_the_rest_in_larger_ones(rtf: float) -> None:
    """A player that holds a short sentence and waits for its preroll wants the next one's first
    chunk soonest. Told it held nothing, the vocoder paced the sentence for a player starting at
    that chunk with nothing else: on ``bench listeners`` (RTF 0.6) a 2.2 s sentence went on in
    12-frame chunks that each cost about as long as they played, 2.2 s for a call forecast at
    1.4 s, and the overrun it recorded widened every margin after it. Told what it holds and
    that it waits: the same first chunk, then larger ones (less context recomputed), and a
    player that starts at the first chunk with what it held never runs dry."""
    alone, alone_windows, alone_busy = stream(rtf, 0.0, waiting=False)
    got, windows, busy = stream(rtf, 1.5, waiting=True)
    assert got[0] == alone[0] and windows[0] == alone_windows[0]  # the opening chunk, as soon
    assert len(windows) < len(alone_windows) and busy < 0.95 * alone_busy, (windows, alone_windows)
    start, ahead = got[0][0], 1.5  # the player starts at the first chunk, holding 1.5 s
    for at, audio in got:
        assert at <= start + ahead + 1e-9
        ahead += audio
    playing, _, _ = stream(rtf, 1.5, waiting=False)  # a playing player: a larger first chunk
    assert playing[0][0] > 2 * got[0][0]


def test_the_pacing_bench_runs() -> None:
    """``bench engine --parts sim`` replays the pacing on this simulated runner; it fell behind
    the runner's signature once (``whole_front``) and crashed at the first exact hand-over."""
    quiet = simulate(Policy(exact_below=0), 0.45)
    assert quiet.stall_s == 0.0 and quiet.calls > 3 and quiet.first_s > 0
    busy, start = reply(Policy(exact_below=0), 0.45)
    assert busy > 0 and 0 < start < 1.0
    assert player_stall([(0.0, SAMPLE_RATE // 2), (0.6, SAMPLE_RATE // 2)]) == pytest.approx(0.1)  # (time, samples)


def test_window_costs_do_not_trust_a_slope_drawn_from_small_windows_far_from_them() -> None:
    """The calls a stream has seen are mostly small windows; a line through them, jittered by a
    few ms, extrapolated to an exact rest of 170 frames forecast 0.6-1.0 s for a 1.5 s call
    (the stream handed over with 0.45 s in hand). Window costs keep the mean cost per frame there
    unless the line is known well enough; exact calls still follow the line exactly."""
    from gateway.kokoro.vocoder.pacing import CostModel, WindowCosts

    def true(window: int) -> float:
        return 0.030 + 0.0087 * window

    jitter = (0.012, -0.010, -0.008, 0.011, -0.012)  # a line fitted on these has a low slope
    line, robust = CostModel(), WindowCosts()
    for window, noise in zip((16, 20, 24, 16, 20), jitter):
        for costs in (line, robust):
            costs.observe(window, true(window) + noise)
    assert line.predict(170) < 0.75 * true(170)  # the old line: a third too little
    assert true(170) <= robust.predict(170) <= 1.3 * true(170)
    assert robust.predict(16) == pytest.approx(line.predict(16))  # where the calls were: the line
    exact = WindowCosts()  # the same calls without jitter: the line is known, it is used
    for window in (16, 20, 24, 16, 20):
        exact.observe(window, true(window))
    assert exact.predict(170) == pytest.approx(true(170), rel=1e-6)
    wide = WindowCosts()  # noisy, but over windows that pin the slope down: close to the line
    for window, noise in zip((16, 40, 80, 140, 170, 24), jitter + (0.01,)):
        wide.observe(window, true(window) + noise)
    assert wide.predict(170) == pytest.approx(true(170), rel=0.05)


def test_a_hand_over_to_the_exact_rest_is_traced_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    """Where a stream hands over is where its lump comes (the warm-up's 3.1 s rest in one piece
    with 0.45 s in hand): at DEBUG the vocoder says when, with what in hand and the rest's
    forecast (``log_level=INFO,gateway.kokoro.vocoder=DEBUG``)."""
    with caplog.at_level(logging.DEBUG, logger="gateway.kokoro.vocoder.streaming"):
        stream(0.45, 0.0, waiting=False, span=300)  # 7.5 s: the exact rest in time after a few chunks
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("exact rest after frame")]
    assert len(lines) == 1, lines
    said = r"exact rest after frame (\d+) of \[(\d+), (\d+)\): ([\d.]+) s in hand, .* forecast ([\d.]+) s"
    match = re.fullmatch(said, lines[0])
    assert match is not None and int(match[2]) == LEAD and int(match[3]) == LEAD + 300
    assert LEAD < int(match[1]) < LEAD + 300 and float(match[4]) > 0 and float(match[5]) > 0
