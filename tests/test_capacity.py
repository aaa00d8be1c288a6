"""The capacity tool (bench.capacity) on the paced fake engine, briefly: its figures are for
benchmarks; here only that a level measures what it says it does."""

from __future__ import annotations

from bench.capacity import Plan, sweep


async def test_relay_level_streams_in_real_time_through_a_model_container() -> None:
    # five sessions, more than the container engine's default pool of four sockets, each asking
    # for a reply that outlasts the window at real time: all must still be streaming at the end
    # (a container that shared or cached the repeated sentence ended them early) and none refused
    plan = Plan(fmt="pcm", window_s=2.0, settle_s=0.5, relay=True)
    [level] = await sweep([5], plan)
    assert level.errors == {}
    assert level.connected == 5 and level.streaming_at_end == 5
    assert level.payloads > 0 and level.upstream_cores is not None
