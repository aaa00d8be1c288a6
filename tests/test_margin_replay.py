"""Replies of different lengths one after another, replayed on virtual time: no reply stalls.

The margin a reply's forecast is stretched by is learned from what earlier replies' arrivals
needed (``gateway/core/margins.py``). On the fake engine (a known pace, exact) the forecast
misses only by its texts' estimated lengths (10-25% per segment), so nearly every reply needs
a stretch of exactly 1.0: learned from one or two of them, the margin had no slack, and a later
text whose estimate ran short stalled (before: 6 stalls, 4.6 s in all, on this matrix: a
``paragraph(2)`` streamed at RTF 1.3 after two short replies 0.93 s; whole segments at RTF 1.15
1.78 s; at RTF 1.0 after five paragraphs 0.24 s). The rule before learning now stays in the
learned margin as one pseudo-reply that decays as replies come (``Margins.factor``).
Each run: the gateway's own start-up warm-up, then six replies; the assertions are on simulated
players' stalls, never on how long anything took.
"""

from __future__ import annotations

import pytest

from bench.corpus import REPLIES
from bench.listeners import paragraph
from gateway.config import Settings
from gateway.core.warmup import warm_up

from .support.listeners_sim import Engine, Heard, sim_settings
from .support.virtual_time import run_virtual

STREAMED, WHOLE = 100, 100_000  # the fake engine's chunk: longer than any segment sends it whole
RTFS = (0.3, 0.4, 0.5, 0.65, 0.8, 0.9, 1.0, 1.15, 1.3)


def short(k: int) -> str:
    """One sentence of a corpus reply: a single segment."""
    return REPLIES[k % len(REPLIES)].split(". ")[0] + "."


def long(k: int) -> str:
    """Two paragraphs: about 25-40 s of audio."""
    return paragraph(k) + " " + paragraph(k + 4)


SEQUENCES = {
    "mixed": [paragraph(2), short(1), REPLIES[3], long(0), short(4), paragraph(5)],
    "short first": [short(0), short(2), paragraph(2), long(3), REPLIES[6], paragraph(7)],
    "long first": [long(1), paragraph(2), short(3), REPLIES[0], paragraph(4), short(6)],
    "paragraphs": [paragraph(k) for k in range(6)],
}


def replay(rtf: float, chunk_ms: int, texts: list[str]) -> list[Heard]:
    """Start-up (the warm-up) on an engine at ``rtf``, then ``texts`` one reply after another."""

    async def main() -> list[Heard]:
        engine = Engine(sim_settings(rtf, chunk_ms))
        await warm_up(
            engine.hub, engine.engine, engine.settings, Settings().speed_warmup_text, engine.engine.default_voice
        )
        return [await engine.listen(text) for text in texts]

    return run_virtual(main)


@pytest.mark.parametrize("chunk_ms", [STREAMED, WHOLE], ids=["streamed", "whole segments"])
@pytest.mark.parametrize("name", list(SEQUENCES))
def test_no_reply_stalls_on_a_margin_learned_from_few_replies(name: str, chunk_ms: int) -> None:
    for rtf in RTFS:
        heard = replay(rtf, chunk_ms, SEQUENCES[name])
        assert all(h.outcome == "admitted" and h.stalls == 0 for h in heard), (rtf, heard)
