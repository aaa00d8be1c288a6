"""Static int8 decoder variants against today's (dynamic int8) graph, side by side in one run.

    python -m bench.static_int8 [--variants all:minmax,all-noise:p99.99] [--sweep p99.99]
        [--voices af_heart] [--sentences 3] [--calib-voices af_heart,am_michael,bf_emma]
        [--calib-sentences 6] [--observed FILE.npz] [--wer] [--repeats 3]

A variant is ``wired`` (what ``embedded_precision = "int8-static"`` runs:
``gateway.kokoro.floatgraph.static_build``, from the cache or built now) or ``GROUPS:METHOD``:
which decoder convolutions go static (``all``, ``all-G1-G2`` for all but those groups, or a
comma list of groups joined by ``+``: ``resblocks.3+resblocks.4``) and how their activation
ranges are calibrated (``minmax``, ``p99.99`` ..., ``IN~OUT`` for the convolutions' outputs by
another, ``IN~eq`` for the outputs equalized per channel (the best), ``IN~float`` for outputs
not quantized (no fusion: a diagnosis), or ``float`` for the float convolutions unquantized;
see ``gateway.kokoro.floatgraph.static_int8``). ``IN~eq/shipped`` keeps the shipped weight
codes exactly; ``METHOD@N`` calibrates on N reply sentences instead of ``--calib-sentences``.
``--sweep METHOD`` adds one variant per group (that group alone static): the per-layer sensitivity.

Per variant: speed (today's graph and the variant on the same sentences, interleaved, total
time; ``x`` = today's time / the variant's), log-spectral distance, timbre and loudness against
today's audio of the same sentence (same durations: only the decoder changes, so frames line
up), and with ``--wer`` Whisper tiny.en's word error rate. The first row is the floor: today's
graph with the decoder's input features nudged by 0.1% noise (the model's own chaos).
Benchmarks print; they never assert.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from gateway.kokoro.floatgraph import static_int8 as si
from gateway.kokoro.vocoder.names import FEATURES

from .corpus import REPLIES, SENTENCES
from .measure import distance, summary

log = logging.getLogger(__name__)

Feed = dict[str, np.ndarray]


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    convs: int
    speed: float | None  # today's time / the variant's
    lsd: Mapping[str, float]  # against today's audio
    wer: float | None
    lsd_float: float | None = None  # against the float decoder's audio (what int8 approximates)


def feed(model: Any, text: str, voice: str) -> Feed:
    ids = [model.vocab[c] for c in model.phonemes(text, voice)]
    return {
        "tokens": np.array([[0, *ids, 0]], dtype=np.int64),
        "style": model.style(voice)[len(ids) - 1].reshape(1, 256),
        "speed": np.array([1.0], dtype=np.float32),
    }


def session(proto: onnx.ModelProto) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(proto.SerializeToString(), sess_options=opts, providers=["CPUExecutionProvider"])


def run(sess: Any, f: Feed) -> tuple[np.ndarray, float]:
    t0 = time.perf_counter()
    audio = sess.run(["audio"], f)[0]
    return np.asarray(audio, np.float32).ravel(), time.perf_counter() - t0


def nudged(shipped: onnx.ModelProto) -> onnx.ModelProto:
    """Today's graph with the decoder's input features times an extra input ``nudge``."""
    out = onnx.ModelProto()
    out.CopyFrom(shipped)
    graph = out.graph
    for node in graph.node:
        node.input[:] = [f"{FEATURES}/nudged" if i == FEATURES else i for i in node.input]
    at = next(k for k, n in enumerate(graph.node) if FEATURES in n.output) + 1
    graph.node.insert(at, onnx.helper.make_node("Mul", [FEATURES, "nudge"], [f"{FEATURES}/nudged"], name="/nudge"))
    graph.input.append(onnx.helper.make_tensor_value_info("nudge", onnx.TensorProto.FLOAT, [1, 512, "T"]))
    return out


def floor_row(shipped: onnx.ModelProto, feeds: Sequence[Feed], refs: Sequence[np.ndarray]) -> Row:
    probe = onnx.ModelProto()
    probe.CopyFrom(shipped)
    probe.graph.output.append(onnx.helper.make_empty_tensor_value_info(FEATURES))
    plain, nudge = session(probe), session(nudged(shipped))
    rows = []
    for seed, (f, ref) in enumerate(zip(feeds, refs)):
        shape = plain.run([FEATURES], f)[0].shape
        noise = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
        rows.append(distance(ref, run(nudge, {**f, "nudge": 1 + 1e-3 * noise})[0]))
    return Row("floor (features x 1.001 noise)", 0, None, summary(rows), None)


def variant_row(
    name: str,
    model: onnx.ModelProto,
    convs: int,
    today: Any,
    feeds: Sequence[Feed],
    refs: Sequence[Sequence[np.ndarray]],
    texts: Sequence[str] | None,
    repeats: int,
) -> Row:
    """``refs``: today's audio and the float decoder's. Speed: per sentence the fastest of
    ``repeats`` runs of each graph, interleaved, summed over sentences (0 repeats: not timed)."""
    sess = session(model)
    run(sess, feeds[0])  # warm-up
    t_today = t_new = 0.0
    clips = []
    for f in feeds:
        times = [(run(today, f)[1], run(sess, f)[1]) for _ in range(repeats)]
        t_today += min(t[0] for t in times) if times else 0.0
        t_new += min(t[1] for t in times) if times else 0.0
        clips.append(run(sess, f)[0])
    vs_today = summary([distance(r, c) for r, c in zip(refs[0], clips)])
    vs_float = summary([distance(r, c) for r, c in zip(refs[1], clips)])["lsd_db"]
    return Row(name, convs, t_today / t_new if repeats else None, vs_today, score(texts, clips), vs_float)


def score(texts: Sequence[str] | None, clips: Sequence[np.ndarray]) -> float | None:
    if texts is None:
        return None
    from . import wer

    total = wer.WerResult(0, 0)
    for text, clip in zip(texts, clips):
        total = total + wer.score(text, wer.transcribe(clip, 24000))
    return float(total.wer)


def calibration_texts(count: int) -> list[str]:
    """The first ``count`` reply sentences of six words or more, each ending in one stop (a
    reply's last sentence kept its own, and came out with two until 2 December)."""
    out = [s.strip() for r in REPLIES for s in r.split(". ") if len(s.split()) >= 6][:count]
    return [t if t[-1] in ".!?" else t + "." for t in out]


def calibration_feeds(model: Any, voices: Sequence[str], count: int) -> list[Feed]:
    """Reply sentences (none of the test sentences), each voice reading its share."""
    return [feed(model, t, voices[i % len(voices)]) for i, t in enumerate(calibration_texts(count))]


def observe(
    floated: onnx.ModelProto,
    names: Sequence[str],
    calib: Sequence[Feed],
    cache: Path | None,
) -> si.Observed:
    """The calibration quantiles, from ``cache`` (an .npz) when it exists, else observed now."""
    if cache is not None and cache.exists():
        with np.load(cache) as saved:
            return si.Observed({k: saved[k] for k in saved.files})
    t0 = time.perf_counter()
    observed = si.observe(floated, si.conv_tensors(floated, names), calib)
    log.info("observed %d tensors on %d feeds in %.0f s", len(observed.quantiles), len(calib), time.perf_counter() - t0)
    if cache is not None:
        save: Any = np.savez  # its stubs type ``**kwds`` as its own keyword arguments
        save(cache, **observed.quantiles)
    return observed


def build(
    shipped_model: onnx.ModelProto,
    names: Sequence[str],
    observed: si.Observed,
    method: str,
    calib: Sequence[Feed],
) -> onnx.ModelProto:
    """``IN`` (one method for every activation), ``IN~OUT`` (the convolutions' outputs by
    ``OUT``), ``IN~float`` (outputs not quantized) or ``IN~eq`` (outputs equalized per channel:
    ``static_int8.equalize``); ``IN~eq/shipped``: the shipped weight codes kept exactly
    (``static_int8.shipped_weights``)."""
    floated = si.float_convs(shipped_model, names)
    method, _, shipped = method.partition("/")
    inputs, _, outputs = method.partition("~")
    ranges = observed.ranges(inputs)
    if outputs == "eq":
        peaks = si.channel_peaks(floated, sorted(si.conv_outputs(floated, names)), calib)
        floated, equalized = si.equalize(floated, names, peaks)
        static = si.quantize(floated, names, {**ranges, **equalized})
        return si.shipped_weights(static, shipped_model, names) if shipped == "shipped" else static
    if outputs and outputs != "float":
        out = observed.ranges(outputs)
        ranges.update({t: out[t] for t in si.conv_outputs(floated, names)})
    return si.quantize(floated, names, ranges, outputs=outputs != "float")


def wired() -> onnx.ModelProto:
    from gateway.kokoro.floatgraph import STATIC, graph_bytes
    from gateway.kokoro.onnx_model import load_model_bytes, shipped_sha256

    return onnx.load_from_string(graph_bytes(STATIC, load_model_bytes, shipped_sha256())[0])


def print_rows(rows: Sequence[Row], head: bool = False) -> None:
    if head:
        print(
            f"{'variant':<44} {'convs':>5} {'speed':>6} {'LSD':>6} {'timbre':>6} {'loud':>6} "
            f"{'WER':>6} {'LSD vs float':>12}"
        )
    for r in rows:
        speed = f"{r.speed:5.2f}x" if r.speed is not None else "     -"
        wer = f"{100 * r.wer:5.1f}%" if r.wer is not None else "     -"
        vs_float = f"{r.lsd_float:.2f}" if r.lsd_float is not None else "-"
        print(
            f"{r.name:<44} {r.convs:>5} {speed:>6} {r.lsd['lsd_db']:6.2f} {r.lsd['timbre_db']:6.2f} "
            f"{r.lsd['loudness_db']:+6.2f} {wer:>6} {vs_float:>12}",
            flush=True,
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.static_int8")
    parser.add_argument("--variants", default="all:minmax")
    parser.add_argument("--sweep", default="", help="one variant per group, with this method")
    parser.add_argument("--voices", default="af_heart")
    parser.add_argument("--sentences", type=int, default=3)
    parser.add_argument("--calib-voices", default="af_heart,am_michael,bf_emma")
    parser.add_argument("--calib-sentences", type=int, default=6)
    parser.add_argument("--observed", type=Path, help="an .npz: calibration quantiles, reused when it exists")
    parser.add_argument("--wer", action="store_true")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per sentence and graph (0: no timing)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from gateway.kokoro.onnx_model import KokoroModel, load_model_bytes
    from gateway.kokoro.parts import load_voice_packs

    model = KokoroModel(2, "misaki", load_voice_packs())
    shipped = onnx.load_from_string(load_model_bytes())
    texts = [t for t in SENTENCES[: args.sentences]]
    voices = args.voices.split(",")
    feeds = [feed(model, t, v) for v in voices for t in texts]
    today = session(shipped)
    refs = [run(today, f)[0] for f in feeds]
    wer_texts = [t for _ in voices for t in texts] if args.wer else None
    rows = [floor_row(shipped, feeds, refs)]
    print_rows(rows, head=True)
    rows.append(
        Row(
            "today (dynamic int8, as shipped)", 0, None, summary([distance(r, r) for r in refs]), score(wer_texts, refs)
        )
    )
    print_rows(rows[-1:])
    calib = calibration_feeds(model, args.calib_voices.split(","), args.calib_sentences)
    variants = [v for v in args.variants.split(",") if v]
    if args.sweep:
        variants += [f"{g}:{args.sweep}" for g in si.groups(si.decoder_convs(shipped))]
    everything = si.select(shipped, "all")
    floated = si.float_convs(shipped, everything)
    float_refs = [run(session(floated), f)[0] for f in feeds]
    float_row = summary([distance(r, c) for r, c in zip(refs, float_refs)])
    rows.append(
        Row(
            "float decoder convs (the rest as today)",
            len(everything),
            None,
            float_row,
            score(wer_texts, float_refs),
            0.0,
        )
    )
    print_rows(rows[-1:])
    refs2 = (refs, float_refs)
    observed = {len(calib): observe(floated, everything, calib, args.observed)}
    for spec in variants:
        if spec == "wired":  # what embedded_precision = "int8-static" runs (built or from the cache)
            rows.append(
                variant_row("int8-static (as wired)", wired(), 50, today, feeds, refs2, wer_texts, args.repeats)
            )
            print_rows(rows[-1:])
            continue
        groups, method = spec.rsplit(":", 1)
        method, _, count = method.partition("@")  # @N: N calibration sentences instead
        feeds_n = calibration_feeds(model, args.calib_voices.split(","), int(count)) if count else calib
        if len(feeds_n) not in observed:
            observed[len(feeds_n)] = observe(floated, everything, feeds_n, None)
        names = si.select(shipped, groups.replace("+", ","))
        if method == "float":
            built = si.float_convs(shipped, names)
        else:
            built = build(shipped, names, observed[len(feeds_n)], method, feeds_n)
        row = variant_row(spec, built, len(names), today, feeds, refs2, wer_texts, args.repeats)
        rows.append(row)
        print_rows([row])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
