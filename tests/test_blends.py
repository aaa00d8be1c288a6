"""Voice blends: what validation accepts, the engine's own parser takes back (issue 22, finding 11).

``check_voice`` turns a request's blend into its canonical id; the Kokoro engines mix packs from
that id (``kokoro_parts.Blends``), parsing it again. Both must agree on every weight.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import BadRequest
from gateway.kokoro import voicecatalog
from gateway.kokoro.parts import Blends

VOICES = ("af_bella", "af_sky", "am_adam", "bf_emma")
PACKS = {v: np.full(4, float(k)) for k, v in enumerate(VOICES)}  # pack k is all k's


def mixed(parts: list[tuple[np.ndarray, float]]) -> np.ndarray:
    return sum(w * pack for pack, w in parts)  # type: ignore[return-value]


def test_a_tiny_weight_passes_validation_and_the_engine_alike() -> None:
    """Issue 22, finding 11: ``af_bella(0.00005)+af_sky(1)`` passed validation as the id
    ``af_bella(5e-05)+af_sky(1)``, which the engine's own parser then refused."""
    voice = voicecatalog.resolve("af_bella(0.00005)+af_sky(1)", set(VOICES))
    pack = Blends(PACKS, mixed)[voice]
    np.testing.assert_allclose(pack, np.full(4, 1 / 1.00005))  # af_sky's pack is all 1s


@pytest.mark.parametrize("spec", ["af_bella(1e-5)+af_sky", "af_bella(2.5E2)+af_sky(1)", "af_bella(.5)+af_sky(2)"])
def test_weights_may_be_written_as_numbers_are(spec: str) -> None:
    blend = voicecatalog.parse_blend(spec, set(VOICES))
    assert blend is not None and voicecatalog.resolve(blend.id, set(VOICES)) == blend.id


@pytest.mark.parametrize(
    "spec",
    [
        "af_bella(1e)+af_sky",
        "af_bella(e5)+af_sky",
        "af_bella(1e-400)+af_sky",
        "af_bella(2e3)+af_sky",
        "af_bella(600)+af_sky+af_bella(600)",
    ],
)
def test_weights_out_of_range_or_misspelt_are_refused(spec: str) -> None:
    """A voice's weight is checked once its parts are summed: the id holds the sum."""
    with pytest.raises(BadRequest) as err:
        voicecatalog.resolve(spec, set(VOICES))
    assert err.value.code == "invalid_option"


weights = st.floats(min_value=0.0, max_value=1000.0, exclude_min=True)


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.tuples(st.sampled_from(VOICES), weights), min_size=2, max_size=5))
def test_every_accepted_blend_round_trips(parts: list[tuple[str, float]]) -> None:
    """Issue 22, finding 11 (and its item 5): any blend validation accepts has an id that
    validation and the engine read back, to the same id and (within the 6 digits the id keeps)
    the same mix."""
    spec = "+".join(f"{v}({w!r})" for v, w in parts)
    known = set(VOICES)
    totals: dict[str, float] = {}
    for v, w in parts:
        totals[v] = totals.get(v, 0.0) + w
    try:
        voice = voicecatalog.resolve(spec, known)
    except BadRequest as exc:  # refused only where one voice's parts add up past the limit
        assert exc.code == "invalid_option" and max(totals.values()) > 1000
        return
    assert voicecatalog.resolve(voice, known) == voice  # the canonical id is a fixed point
    expected = sum(totals[v] * PACKS[v] for v in totals) / sum(totals.values())
    np.testing.assert_allclose(Blends(PACKS, mixed)[voice], expected, rtol=2e-5, atol=1e-9)
    assert all(math.isfinite(x) for x in Blends(PACKS, mixed)[voice])
