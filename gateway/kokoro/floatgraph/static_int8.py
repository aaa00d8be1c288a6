"""Kokoro-82M with some decoder convolutions in static int8 (QDQ, run as ``QLinearConv``).

The shipped graph is onnxruntime's *dynamic* int8: each ``ConvInteger`` quantizes its input
per call (u8, per tensor, from that call's min and max), which onnxruntime's VNNI / AMX
kernels do not run. A static graph fixes each activation's range ahead of time (calibrated
on real sentences), stores the weights s8 per output channel, and onnxruntime fuses each
``DequantizeLinear -> Conv -> QuantizeLinear`` into one ``QLinearConv``.

Built from the shipped bytes, never from anything downloaded: the chosen ``ConvInteger``
patterns are dequantized (``dequantize(only=...)``, the rest of the graph stays exactly as
shipped, so the text side and its durations do not move and audio compares frame by frame
with today's), their input and output ranges observed on calibration feeds, then quantized
by onnxruntime's ``QDQQuantizer`` with those ranges. ``bench/static_int8.py`` measures the
variants (speed against today's graph, log-spectral distance against the model's own chaos
floor, Whisper WER); docs/STATIC_INT8.md has the table.
"""

from __future__ import annotations

import platform
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from .dequantize import dequantize

DECODER = "/decoder/decoder/"
# per-feed quantiles kept for every observed tensor, in percent: enough for min-max and the
# percentile methods without running the feeds again
QUANTILES = (0.0, 0.001, 0.01, 0.1, 1.0, 99.0, 99.9, 99.99, 99.999, 100.0)


def decoder_convs(model: onnx.ModelProto) -> list[str]:
    """The shipped decoder's dynamic int8 convolutions (``ConvInteger``), in graph order."""
    return [n.name for n in model.graph.node if n.op_type == "ConvInteger" and n.name.startswith(DECODER)]


def group_of(name: str) -> str:
    """A convolution's module: ``resblocks.3``, ``decode.0``, ``noise_res.1``, ``F0_conv`` ..."""
    rest = name[len(DECODER) :].removeprefix("generator/")
    return re.sub(r"^(noise_convs)\.\d+$", r"\1", rest.split("/")[0])


def groups(names: Iterable[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name in names:
        out.setdefault(group_of(name), []).append(name)
    return out


def select(model: onnx.ModelProto, spec: str) -> list[str]:
    """The convolutions a spec names: ``all``, a comma list of groups, or ``all-G1-G2`` (all but
    those groups). Group names match by prefix (``resblocks`` is all six)."""
    convs = decoder_convs(model)
    if spec.startswith("all"):
        dropped = [g for g in spec.split("-")[1:] if g]
        return [c for c in convs if not any(group_of(c).startswith(g) for g in dropped)]
    wanted = [g for g in spec.split(",") if g]
    chosen = [c for c in convs if any(group_of(c).startswith(g) for g in wanted)]
    if not chosen:
        raise ValueError(f"no decoder convolution in {spec!r}; groups: {sorted(groups(convs))}")
    return chosen


@dataclass(frozen=True, slots=True)
class Observed:
    """Per-feed quantiles (``QUANTILES``) of every observed tensor: name -> [feeds, quantiles]."""

    quantiles: Mapping[str, np.ndarray]

    def ranges(self, method: str) -> dict[str, tuple[float, float]]:
        """``minmax`` (lowest and highest seen) or ``pNN`` (the NN-th percentile and its mirror,
        per feed, the widest over feeds), always spanning 0."""
        upper = 100.0 if method == "minmax" else float(method.removeprefix("p"))
        lower = round(100.0 - upper, 6)
        if upper not in QUANTILES or lower not in QUANTILES:
            raise ValueError(f"calibration method must be minmax or one of p{QUANTILES[5:]}, not {method!r}")
        lo_i, hi_i = QUANTILES.index(lower), QUANTILES.index(upper)
        return {
            name: (min(0.0, float(q[:, lo_i].min())), max(0.0, float(q[:, hi_i].max())))
            for name, q in self.quantiles.items()
        }


def float_convs(shipped: onnx.ModelProto, names: Sequence[str]) -> onnx.ModelProto:
    """The shipped graph with only ``names`` made float ``Conv`` (same names, same outputs).
    Their weights are renamed: the quantizer names its s8 copies ``<weight>_quantized``, and
    ``<weight>_zero_point``, which the shipped graph's u8 ones are already called."""
    model = dequantize(shipped, only=set(names))
    wanted, renamed = set(names), {}
    for node in model.graph.node:
        if node.name in wanted and node.op_type == "Conv":
            renamed[node.input[1]] = node.input[1] = f"{node.input[1]}/static"
    for init in model.graph.initializer:
        init.name = renamed.get(init.name, init.name)
    return model


def conv_tensors(model: onnx.ModelProto, names: Sequence[str]) -> list[str]:
    """The activations around the float convolutions ``names``: each one's input and output."""
    wanted = set(names)
    seen: dict[str, None] = {}
    for node in model.graph.node:
        if node.name in wanted and node.op_type == "Conv":
            seen.update({node.input[0]: None, node.output[0]: None})
    return list(seen)


def _runs(
    model: onnx.ModelProto, tensors: Sequence[str], feeds: Iterable[Mapping[str, np.ndarray]], threads: int
) -> Iterator[dict[str, np.ndarray]]:
    """``model`` run on every feed with ``tensors`` as extra outputs: their values, per feed."""
    import onnxruntime as ort

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    known = {o.name for o in probe.graph.output}
    probe.graph.output.extend(onnx.helper.make_empty_tensor_value_info(t) for t in tensors if t not in known)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.log_severity_level = 3
    session = ort.InferenceSession(probe.SerializeToString(), sess_options=opts, providers=["CPUExecutionProvider"])
    for feed in feeds:
        yield dict(zip(tensors, (np.asarray(v, np.float32) for v in session.run(list(tensors), dict(feed)))))


def _quantiles(value: np.ndarray) -> np.ndarray:
    return np.asarray(np.percentile(value.ravel(), QUANTILES), np.float32)


def observe(
    model: onnx.ModelProto, tensors: Sequence[str], feeds: Iterable[Mapping[str, np.ndarray]], threads: int = 2
) -> Observed:
    """Run ``model`` on every feed with ``tensors`` as extra outputs and keep their quantiles."""
    rows: dict[str, list[np.ndarray]] = {t: [] for t in tensors}
    for values in _runs(model, tensors, feeds, threads):
        for name, value in values.items():
            rows[name].append(_quantiles(value))
    return Observed({name: np.stack(q) for name, q in rows.items()})


def observe_for_equalize(
    model: onnx.ModelProto, names: Sequence[str], feeds: Iterable[Mapping[str, np.ndarray]], threads: int = 2
) -> tuple[Observed, dict[str, np.ndarray]]:
    """In one pass over the feeds: the quantiles of the float convolutions' (``names``) inputs
    and the per-channel peaks of their outputs (``channel_peaks``)."""
    outputs = conv_outputs(model, names)
    inputs = [t for t in conv_tensors(model, names) if t not in outputs]
    rows: dict[str, list[np.ndarray]] = {t: [] for t in inputs}
    peaks: dict[str, np.ndarray] = {}
    for values in _runs(model, [*inputs, *sorted(outputs)], feeds, threads):
        for name, value in values.items():
            if name in outputs:
                peak = np.abs(value).max(axis=(0, 2))
                peaks[name] = np.maximum(peaks[name], peak) if name in peaks else peak
            else:
                rows[name].append(_quantiles(value))
    return Observed({name: np.stack(q) for name, q in rows.items()}), peaks


def conv_outputs(model: onnx.ModelProto, names: Sequence[str]) -> set[str]:
    wanted = set(names)
    return {n.output[0] for n in model.graph.node if n.name in wanted and n.op_type == "Conv"}


def saturates(cpuinfo: str | None = None) -> bool:
    """Would onnxruntime's u8 x s8 convolutions saturate with full-range s8 weights here? On an
    x86 CPU without VNNI they run on ``VPMADDUBSW``, whose pairwise sums are int16: u8 inputs
    against weights up to 127 overflow it (onnxruntime's quantization guide: use 7-bit weights,
    ``reduce_range``, there). On an AVX2-only AMD EPYC a per-channel s8 convolution came out
    6% off its float function where 7-bit weights were 0.7% (``tests/test_static_int8.py``).
    ``cpuinfo``: /proc/cpuinfo's text (read when None; unreadable on x86: assumed to saturate)."""
    if platform.machine().lower() not in ("x86_64", "amd64", "i686", "x86"):
        return False  # (ARM's int8 dot products widen to int32)
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return True
    flags = next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines() if line.startswith("flags")), [])
    return not {"avx512_vnni", "avx_vnni", "amx_int8"} & set(flags)


def quantize(
    model: onnx.ModelProto,
    names: Sequence[str],
    ranges: Mapping[str, tuple[float, float]],
    outputs: bool = True,
    reduce_range: bool | None = None,
) -> onnx.ModelProto:
    """``model`` (float convolutions ``names``) with those convolutions in QDQ: activations u8
    with the given ranges, weights s8 symmetric per output channel (7-bit with ``reduce_range``;
    None: where the CPU ``saturates``), biases int32; with ``outputs`` False the convolutions'
    outputs stay float (no ``QLinearConv`` fusion then: a diagnosis of where the error comes from)."""
    from onnxruntime.quantization import QuantType
    from onnxruntime.quantization.calibrate import (
        CalibrationMethod,
        TensorData,
        TensorsData,
    )
    from onnxruntime.quantization.qdq_quantizer import QDQQuantizer
    from onnxruntime.quantization.quant_utils import (
        save_and_reload_model_with_shape_infer,
    )

    data = {k: TensorData(lowest=np.float32(lo), highest=np.float32(hi)) for k, (lo, hi) in ranges.items()}
    inferred = save_and_reload_model_with_shape_infer(model)
    quantizer = QDQQuantizer(
        inferred,
        True,
        saturates() if reduce_range is None else reduce_range,
        QuantType.QInt8,
        QuantType.QUInt8,
        TensorsData(CalibrationMethod.MinMax, data),
        list(names),
        [],
        ["Conv"],
        {
            "WeightSymmetric": True,
            "ActivationSymmetric": False,
            "OpTypesToExcludeOutputQuantization": [] if outputs else ["Conv"],
        },
    )
    quantizer.quantize_model()
    out: onnx.ModelProto = quantizer.model.model
    return out


def channel_peaks(
    model: onnx.ModelProto, tensors: Sequence[str], feeds: Iterable[Mapping[str, np.ndarray]], threads: int = 2
) -> dict[str, np.ndarray]:
    """Each ``[1, C, T]`` tensor's largest magnitude per channel over all feeds."""
    peaks: dict[str, np.ndarray] = {}
    for values in _runs(model, tensors, feeds, threads):
        for name, value in values.items():
            peak = np.abs(value).max(axis=(0, 2))
            peaks[name] = np.maximum(peaks[name], peak) if name in peaks else peak
    return peaks


def equalize(
    model: onnx.ModelProto,
    names: Sequence[str],
    peaks: Mapping[str, np.ndarray],
) -> tuple[onnx.ModelProto, dict[str, tuple[float, float]]]:
    """Each float convolution ``names`` made to output its channels divided by their peaks
    (weights and bias scaled), then multiplied back in float: one u8 scale per tensor then fits
    every channel. Returns the model and the equalized outputs' ranges ([-1, 1])."""
    from onnx import numpy_helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    inits = {t.name: t for t in graph.initializer}
    wanted, ranges, muls = set(names), {}, []
    for node in graph.node:
        if node.name not in wanted or node.op_type != "Conv" or node.output[0] not in peaks:
            continue
        scale = np.maximum(peaks[node.output[0]], 1e-6 * peaks[node.output[0]].max()).astype(np.float32)
        for k, shape in ((1, (-1, 1, 1)), (2, (-1,))):
            if len(node.input) > k and node.input[k]:
                t = inits[node.input[k]]
                t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) / scale.reshape(shape), t.name))
        result = node.output[0]
        node.output[0] = f"{result}/equalized"
        graph.initializer.append(numpy_helper.from_array(scale.reshape(1, -1, 1), f"{result}/peaks"))
        muls.append(
            (
                node.name,
                onnx.helper.make_node(
                    "Mul", [node.output[0], f"{result}/peaks"], [result], name=f"{node.name}/unequalize"
                ),
            )
        )
        ranges[node.output[0]] = (-1.0, 1.0)
    after = dict(muls)
    nodes = [m for n in graph.node for m in ([n, after[n.name]] if n.name in after else [n])]
    del graph.node[:]
    graph.node.extend(nodes)
    return out, ranges


def shipped_weights(quantized: onnx.ModelProto, shipped: onnx.ModelProto, names: Sequence[str]) -> onnx.ModelProto:
    """``quantized`` (QDQ) with each convolution ``names``' s8 weights replaced by the shipped
    u8 codes minus their zero point (they all fit in s8: the export used 7-bit weights) and
    the shipped scale (over the equalization peaks where equalized), the int32 bias
    requantized to match: the weights exactly as today's graph has them, no second rounding."""
    from onnx import numpy_helper

    from .dequantize import Graph

    g = Graph(shipped)
    codes: dict[str, tuple[np.ndarray, float]] = {}
    for node in shipped.graph.node:
        if node.name in set(names):
            cast = g.consumers[node.output[0]][0]
            cast = g.only_consumer(cast.output[0], "Cast") if cast.op_type == "Add" else cast
            shipped_scale = g.weight_scale(g.only_consumer(cast.output[0], "Mul"), cast.output[0])
            code = g.array(node.input[1]).astype(np.int32) - g.array(node.input[3]).astype(np.int32)
            codes[node.name] = (code, float(shipped_scale))
    out = onnx.ModelProto()
    out.CopyFrom(quantized)
    inits = {t.name: t for t in out.graph.initializer}
    producer = {o: n for n in out.graph.node for o in n.output}
    muls = {n.name.removesuffix("/unequalize"): n for n in out.graph.node if n.name.endswith("/unequalize")}

    def array(name: str) -> np.ndarray:
        return numpy_helper.to_array(inits[name])

    def put(name: str, value: np.ndarray) -> None:
        inits[name].CopyFrom(numpy_helper.from_array(value, name))

    for node in out.graph.node:
        if node.op_type != "Conv" or node.name not in codes:
            continue
        code, scale = codes[node.name]
        if code.min() < -128 or code.max() > 127:
            continue  # not representable in s8: keep the quantizer's own
        peaks = array(muls[node.name].input[1]).ravel() if node.name in muls else np.ones(code.shape[0], np.float32)
        w_dq, x_dq = producer[node.input[1]], producer[node.input[0]]
        put(w_dq.input[0], code.astype(np.int8))
        put(w_dq.input[1], (scale / peaks).astype(np.float32))
        if len(node.input) > 2 and node.input[2]:
            b_dq = producer[node.input[2]]
            bias = array(b_dq.input[0]).astype(np.float64) * array(b_dq.input[1])
            b_scale = (float(array(x_dq.input[1])) * scale / peaks).astype(np.float32)
            put(b_dq.input[1], b_scale)
            put(b_dq.input[0], np.round(bias / b_scale).astype(np.int32))
    return out
