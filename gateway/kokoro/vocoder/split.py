"""Graph surgery on Kokoro-82M's ONNX graph: cut off the vocoder, free its global statistics.

Kokoro is a text encoder (tokens, style, speed -> aligned features, F0 and energy per frame)
and a vocoder: a decoder front at frame rate (about 5% of the vocoder's time) and an iSTFTNet
generator (600 samples per feature frame, 40 frames a second). The vocoder is convolutional
except for what it computes over the whole window, which is why it cannot simply be run on
pieces:

* 54 instance norms (decomposed as ReduceMean / Sub / Mul / ReduceMean / Sqrt / Div): a mean
  and a variance per channel over time;
* dynamic int8 quantization (``DynamicQuantizeLinear``) of its convolution inputs: a scale and
  zero point from the whole tensor's min and max;
* the harmonic source's phase: a cumulative sum of per-frame phase increments.

Models made here (all from the one shipped graph, in memory):

* ``encoder``: the text encoder, to the vocoder's inputs;
* ``probe``: the exact vocoder, also returning every statistic it computed (for calibration).
  It and ``frozen`` take a ``crop`` ([start, stop) in F0 frames): the front runs on the whole
  input, the generator only on the crop, so the front can see more context than the
  generator (its receptive field is wider, and it is cheap);
* ``frozen``: the statistics are inputs (filled with calibrated per-voice values) and a
  ``phase_offset`` is added after the cumulative sum: purely convolutional.

Tensor names are the ones the shipped export uses; another export fails in ``find_boundary``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import onnx
from onnx import TensorProto, helper

from .names import (
    CROP,
    CUMSUM,
    DECODER,
    DURATIONS,
    ENERGY,
    F0,
    FEATURES,
    GENERATOR,
    HARMONICS,
    PHASE_OFFSET,
    Statistic,
)


@dataclass(frozen=True, slots=True)
class Split:
    encoder: onnx.ModelProto  # tokens, style, speed -> FEATURES, F0, ENERGY, DURATIONS
    probe: onnx.ModelProto  # FEATURES, F0, ENERGY, style, crop -> audio, *statistics
    frozen: onnx.ModelProto  # FEATURES, F0, ENERGY, style, crop, phase_offset, *statistics -> audio
    statistics: tuple[Statistic, ...]  # in the order of the probe's outputs


def find_boundary(model: onnx.ModelProto) -> None:
    """Fail with a clear message when the graph is not the export this module knows."""
    produced = {out for n in model.graph.node for out in n.output}
    missing = [t for t in (FEATURES, F0, ENERGY, CUMSUM, DURATIONS) if t not in produced]
    if missing:
        raise ValueError(f"not the Kokoro export this vocoder split knows: missing {missing}")


def _float_input(name: str, shape: Sequence[int | str | None]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def extract(model: onnx.ModelProto, inputs: list[onnx.ValueInfoProto], outputs: list[str]) -> onnx.ModelProto:
    """The subgraph computing ``outputs`` from ``inputs`` (and initializers), nodes in order."""
    graph = model.graph
    producer = {out: n for n in graph.node for out in n.output}
    stop = {i.name for i in inputs} | {t.name for t in graph.initializer} | {""}
    seen: set[str] = set()
    keep: set[int] = set()
    stack = list(outputs)
    while stack:
        name = stack.pop()
        if name in seen or name in stop:
            continue
        seen.add(name)
        node = producer.get(name)
        if node is None:
            raise ValueError(f"{name!r} is neither produced nor given")
        keep.add(id(node))
        stack.extend(node.input)
    nodes = [n for n in graph.node if id(n) in keep]
    used = {i for n in nodes for i in n.input}
    outs = [helper.make_empty_tensor_value_info(o) for o in outputs]
    new = helper.make_graph(
        nodes, graph.name, inputs, outs, initializer=[t for t in graph.initializer if t.name in used]
    )
    return helper.make_model(
        new, opset_imports=model.opset_import, ir_version=model.ir_version, producer_name="gateway.vocoder"
    )


def _generator_nodes(graph: onnx.GraphProto) -> set[int]:
    """Nodes named as the generator's (the quantizer's helpers are named after weights, with
    no slash), and every node computed from one of their outputs (unnamed shape arithmetic)."""
    inside: set[int] = set()
    produced: set[str] = set()
    for node in graph.node:
        named = any(n.startswith((GENERATOR, "decoder.decoder.generator.")) for n in (node.name, *node.output))
        if named or any(i in produced for i in node.input):
            inside.add(id(node))
            produced.update(node.output)
    return inside


def _time_dependent(graph: onnx.GraphProto, sources: set[str]) -> set[str]:
    """Every tensor computed (transitively) from one of ``sources``."""
    reached = set(sources)
    for node in graph.node:  # graph.node is topologically sorted
        if any(i in reached for i in node.input):
            reached.update(node.output)
    return reached


def _rename_inputs(nodes: list[onnx.NodeProto], old: str, new: str) -> None:
    for node in nodes:
        for k, name in enumerate(node.input):
            if name == old:
                node.input[k] = new


def _add_crop(graph: onnx.GraphProto) -> None:
    """Slice every time-varying tensor the front hands the generator to ``crop`` (axis 2)."""
    timed = _time_dependent(graph, {FEATURES, F0, ENERGY})
    producer = {out: n for n in graph.node for out in n.output}
    inside = _generator_nodes(graph)
    generator = [n for n in graph.node if id(n) in inside]
    crossing = sorted(
        {i for n in generator for i in n.input if i in timed and i in producer and id(producer[i]) not in inside}
    )
    if len(crossing) != 2:  # the front's output and F0, nothing else
        raise ValueError(f"unexpected tensors between decoder front and generator: {crossing}")
    consts = [
        helper.make_node(
            "Constant",
            [],
            ["/vocoder/crop/axes"],
            name="/vocoder/crop/axes",
            value=helper.make_tensor("axes", TensorProto.INT64, [1], [2]),
        ),
        helper.make_node(
            "Split",
            [CROP],
            ["/vocoder/crop/start", "/vocoder/crop/stop"],
            name="/vocoder/crop/split",
            axis=0,
            num_outputs=2,
        ),
    ]
    slices = {}
    for name in crossing:
        cropped = name + "/cropped"
        _rename_inputs(generator, name, cropped)
        slices[name] = helper.make_node(
            "Slice",
            [name, "/vocoder/crop/start", "/vocoder/crop/stop", "/vocoder/crop/axes"],
            [cropped],
            name=f"/vocoder/crop/{name}",
        )
    ordered = list(consts)
    for node in graph.node:  # each slice right after its input's producer: still sorted
        ordered.append(node)
        ordered.extend(slices[o] for o in node.output if o in slices)
    del graph.node[:]
    graph.node.extend(ordered)
    graph.input.append(helper.make_tensor_value_info(CROP, TensorProto.INT64, [2]))


def _statistics(graph: onnx.GraphProto) -> list[tuple[onnx.NodeProto, Statistic, int]]:
    """(node, statistic, output index) for everything the vocoder computes over its window."""
    timed = _time_dependent(graph, {FEATURES, F0, ENERGY})
    found = []
    norms: dict[str, int] = {}  # a norm's mean and variance share its number
    for node in graph.node:
        if node.op_type == "ReduceMean" and node.name.startswith(DECODER):
            kind = "var" if node.name.endswith("ReduceMean_2") else "mean"
            i = norms.setdefault(node.name.rsplit("/", 1)[0], len(norms))
            found.append((node, Statistic(f"norm.{i:03d}.{kind}", kind, node.name), 0))
    quantizers = [n for n in graph.node if n.op_type == "DynamicQuantizeLinear" and n.input[0] in timed]
    for i, node in enumerate(quantizers):  # style-only quantizers stay dynamic: no time axis
        found.append((node, Statistic(f"quant.{i:03d}.scale", "scale", node.name), 1))
        found.append((node, Statistic(f"quant.{i:03d}.zero_point", "zero_point", node.name), 2))
    return found


def _freeze(vocoder: onnx.ModelProto) -> onnx.ModelProto:
    model = onnx.ModelProto()
    model.CopyFrom(vocoder)
    graph = model.graph
    nodes = list(graph.node)
    drop: set[int] = set()
    swap: dict[int, onnx.NodeProto] = {}
    for node, stat, index in _statistics(graph):
        _rename_inputs(nodes, node.output[index], stat.name)
        if stat.kind == "zero_point":
            graph.input.append(helper.make_tensor_value_info(stat.name, TensorProto.UINT8, []))
            continue
        shape: list[int | None] = [] if stat.kind == "scale" else [1, None, 1]
        graph.input.append(_float_input(stat.name, shape))
        if stat.kind == "scale":  # a QuantizeLinear with the given scale takes the node's place
            zero_point = stat.name.removesuffix("scale") + "zero_point"
            swap[id(node)] = helper.make_node(
                "QuantizeLinear", [node.input[0], stat.name, zero_point], [node.output[0]], name=node.name + "/frozen"
            )
        else:
            drop.add(id(node))
    kept = [swap.get(id(n), n) for n in nodes if id(n) not in drop]
    del graph.node[:]
    graph.node.extend(kept)
    _add_phase_offset(graph)
    return model


def _add_phase_offset(graph: onnx.GraphProto) -> None:
    """cumsum + phase_offset: the harmonic source's phase continues across chunks."""
    shifted = CUMSUM + "/shifted"
    _rename_inputs(list(graph.node), CUMSUM, shifted)
    at = next(k for k, n in enumerate(graph.node) if CUMSUM in n.output)
    graph.node.insert(at + 1, helper.make_node("Add", [CUMSUM, PHASE_OFFSET], [shifted], name="/vocoder/phase_offset"))
    graph.input.append(_float_input(PHASE_OFFSET, [1, 1, HARMONICS]))


def _probe(vocoder: onnx.ModelProto) -> tuple[onnx.ModelProto, tuple[Statistic, ...]]:
    model = onnx.ModelProto()
    model.CopyFrom(vocoder)
    graph = model.graph
    found = _statistics(graph)
    for node, stat, index in found:
        graph.node.append(
            helper.make_node("Identity", [node.output[index]], [stat.name], name=f"/vocoder/probe/{stat.name}")
        )
        graph.output.append(helper.make_empty_tensor_value_info(stat.name))
    return model, tuple(stat for _, stat, _ in found)


def split(model: onnx.ModelProto) -> Split:
    """Encoder, probe (exact vocoder) and frozen vocoder from the whole model."""
    find_boundary(model)
    graph = model.graph
    style = next(i for i in graph.input if i.name == "style")
    encoder = extract(model, list(graph.input), [FEATURES, F0, ENERGY, DURATIONS])
    boundary = [
        _float_input(FEATURES, [1, 512, "T"]),
        _float_input(F0, [1, "F"]),
        _float_input(ENERGY, [1, "F"]),
        style,
    ]
    vocoder = extract(model, boundary, [o.name for o in graph.output])
    _add_crop(vocoder.graph)
    probe, statistics = _probe(vocoder)
    return Split(encoder, probe, _freeze(vocoder), statistics)
