"""Kokoro-82M's shipped int8 graph rewritten as a float graph: weight = (w_q - zero_point) x scale.

The shipped export is onnxruntime's dynamic quantization of a float graph, so every quantized
operator sits in a fixed pattern that undoes exactly:

* ``DynamicQuantizeLinear(x) -> MatMulInteger(xq, Wq, xzp, wzp) -> Cast -> Mul(xs x ws)``
  becomes ``MatMul(x, W)`` (per-column scales and zero points);
* ``... -> ConvInteger(xq, Wq, xzp, wzp) [-> Add(quantized bias)] -> Cast -> Mul(xs x ws)``
  becomes ``Conv(x, W, bias)``, the float bias found where the export divides it by the scale;
* ``DynamicQuantizeLSTM`` becomes ``LSTM`` (its W and R are stored transposed, per direction);
* ``Gather(int8 table) -> DequantizeLinear`` becomes ``Gather(float table)``.

Each float operator takes the quantized operator's node name and the pattern's output name, so
the tensor names that ``gateway.kokoro.vocoder.split`` cuts at are unchanged. Weights get the
quantized initializer's name without ``_quantized``; most are the torch parameter names
(``gateway.kokoro.floatgraph.torch_weights`` relies on that). Whatever the rewrite leaves unused
(the activation quantizers, the runtime bias quantization) is dropped.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection

import numpy as np
import onnx
from onnx import helper, numpy_helper

QUANTIZED = ("ConvInteger", "MatMulInteger", "DynamicQuantizeLSTM", "DequantizeLinear")


class Graph:
    """Initializers, producers and consumers of one graph, for pattern matching."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.graph = model.graph
        self.inits = {t.name: t for t in self.graph.initializer}
        self.producer = {o: n for n in self.graph.node for o in n.output}
        self.consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
        for node in self.graph.node:
            for name in node.input:
                self.consumers[name].append(node)
        self.added: dict[str, onnx.TensorProto] = {}

    def array(self, name: str) -> np.ndarray:
        return numpy_helper.to_array(self.inits[name])

    def only_consumer(self, name: str, op_type: str) -> onnx.NodeProto:
        users = self.consumers[name]
        if len(users) != 1 or users[0].op_type != op_type:
            found = [u.op_type for u in users]
            raise ValueError(f"unexpected quantization pattern after {name!r}: {found}, expected {op_type}")
        return users[0]

    def add_weight(self, name: str, value: np.ndarray) -> str:
        if name not in self.added and name not in self.inits:
            self.added[name] = numpy_helper.from_array(np.ascontiguousarray(value, np.float32), name)
        return name

    def weight_scale(self, mul: onnx.NodeProto, data: str) -> np.ndarray:
        """The weight's scale: the initializer multiplied with the input's dynamic scale."""
        other = next(i for i in mul.input if i != data)
        scales = self.producer[other]
        if scales.op_type != "Mul":
            raise ValueError(f"unexpected scale computation {scales.op_type} for {mul.name}")
        return self.array(next(i for i in scales.input if i in self.inits)).astype(np.float32)


def float_name(quantized: str) -> str:
    return quantized.removesuffix("_quantized")


def _dequantized(g: Graph, node: onnx.NodeProto, scale: np.ndarray, axis: int) -> np.ndarray:
    """(w_q - zero_point) x scale, the zero point and scale broadcast along ``axis``."""
    weight = g.array(node.input[1]).astype(np.float32)
    zero = g.array(node.input[3]).astype(np.float32) if len(node.input) > 3 and node.input[3] else np.float32(0)
    shape = [1] * weight.ndim
    shape[axis] = -1
    zero = np.reshape(zero, shape) if np.ndim(zero) else zero
    scale = np.reshape(scale, shape) if np.ndim(scale) else scale
    dequantized: np.ndarray = (weight - zero) * scale
    return dequantized


def _source(g: Graph, node: onnx.NodeProto) -> str:
    """The float input that ``DynamicQuantizeLinear`` quantized for ``node``."""
    quantizer = g.producer[node.input[0]]
    if quantizer.op_type != "DynamicQuantizeLinear":
        raise ValueError(f"{node.name}: input not from DynamicQuantizeLinear")
    return quantizer.input[0]


def _matmul(g: Graph, node: onnx.NodeProto) -> onnx.NodeProto:
    cast = g.only_consumer(node.output[0], "Cast")
    mul = g.only_consumer(cast.output[0], "Mul")
    weight = _dequantized(g, node, g.weight_scale(mul, cast.output[0]), axis=1)
    name = g.add_weight(float_name(node.input[1]), weight)
    return helper.make_node("MatMul", [_source(g, node), name], [mul.output[0]], name=node.name)


def _bias(g: Graph, add: onnx.NodeProto, data: str) -> str:
    """The float bias behind the export's runtime quantization of it (bias / (xs x ws))."""
    stack, seen = [next(i for i in add.input if i != data)], set()
    while stack:
        node = g.producer.get(stack.pop())
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if node.op_type == "Div" and node.input[0] in g.inits:
            return node.input[0]
        stack.extend(node.input)
    raise ValueError(f"no float bias behind {add.name}")


def _conv(g: Graph, node: onnx.NodeProto) -> onnx.NodeProto:
    after = g.consumers[node.output[0]]
    bias = ""
    data = node.output[0]
    if len(after) == 1 and after[0].op_type == "Add":
        bias, data = _bias(g, after[0], node.output[0]), after[0].output[0]
    cast = g.only_consumer(data, "Cast")
    mul = g.only_consumer(cast.output[0], "Mul")
    weight = _dequantized(g, node, g.weight_scale(mul, cast.output[0]), axis=0)
    name = g.add_weight(float_name(node.input[1]), weight)
    inputs = [_source(g, node), name, *([bias] if bias else [])]
    return helper.make_node(
        "Conv",
        inputs,
        [mul.output[0]],
        name=node.name,
        **{a.name: helper.get_attribute_value(a) for a in node.attribute},
    )


def _lstm(g: Graph, node: onnx.NodeProto) -> onnx.NodeProto:
    """ONNX LSTM wants W [D, 4H, in] and R [D, 4H, H]; the quantized op stores them transposed."""
    ins = list(node.input)
    weights = []
    for q, s, z in ((ins[1], ins[8], ins[9]), (ins[2], ins[10], ins[11])):
        w = g.array(q).astype(np.float32)
        w = (w - g.array(z).astype(np.float32)[:, None, None]) * g.array(s).astype(np.float32)[:, None, None]
        weights.append(g.add_weight(float_name(q), w.transpose(0, 2, 1)))
    inputs = [ins[0], *weights, *ins[3:8]]
    while inputs and not inputs[-1]:
        inputs.pop()
    return helper.make_node(
        "LSTM",
        inputs,
        list(node.output),
        name=node.name,
        **{a.name: helper.get_attribute_value(a) for a in node.attribute},
    )


def _gather(g: Graph, node: onnx.NodeProto) -> onnx.NodeProto:
    gather = g.producer[node.input[0]]
    if gather.op_type != "Gather" or gather.input[0] not in g.inits:
        raise ValueError(f"{node.name}: DequantizeLinear not after a Gather of a table")
    table = g.array(gather.input[0]).astype(np.float32)
    table = (table - g.array(node.input[2]).astype(np.float32)) * g.array(node.input[1]).astype(np.float32)
    name = g.add_weight(float_name(gather.input[0]), table)
    return helper.make_node(
        "Gather",
        [name, gather.input[1]],
        [node.output[0]],
        name=gather.name,
        **{a.name: helper.get_attribute_value(a) for a in gather.attribute},
    )


REWRITES = {"MatMulInteger": _matmul, "ConvInteger": _conv, "DynamicQuantizeLSTM": _lstm, "DequantizeLinear": _gather}


def dequantize(model: onnx.ModelProto, only: Collection[str] | None = None) -> onnx.ModelProto:
    """A float32 copy of ``model``: every quantized pattern replaced by its float operator
    (only those whose quantized node is named in ``only``, when given: the rest stay as shipped)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = Graph(out)
    replaced: dict[str, onnx.NodeProto] = {}  # the pattern's output -> its float node
    for node in out.graph.node:
        if node.op_type in REWRITES and (only is None or node.name in only):
            new = REWRITES[node.op_type](g, node)
            for name in new.output:
                replaced[name] = new
    nodes: list[onnx.NodeProto] = []
    for node in out.graph.node:  # each float node where its pattern's last node was: still sorted
        if any(o in replaced for o in node.output):
            nodes.extend({id(replaced[o]): replaced[o] for o in node.output if o in replaced}.values())
        else:
            nodes.append(node)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    out.graph.initializer.extend(g.added.values())
    prune(out)
    if only is not None:
        return out
    left = sorted({n.op_type for n in out.graph.node if n.op_type in (*QUANTIZED, "DynamicQuantizeLinear")})
    if left:
        raise ValueError(f"quantized operators left after the rewrite: {left}")
    return out


def prune(model: onnx.ModelProto) -> None:
    """Drop the nodes no graph output needs, then the initializers no node uses."""
    graph = model.graph
    needed = {o.name for o in graph.output}
    keep = []
    for node in reversed(graph.node):
        if any(o in needed for o in node.output):
            keep.append(node)
            needed.update(node.input)
    del graph.node[:]
    graph.node.extend(reversed(keep))
    used = {i for n in graph.node for i in n.input}
    inits = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(inits)
    kept = {t.name for t in inits} | {i.name for i in graph.input} | {o for n in graph.node for o in n.output}
    infos = [v for v in graph.value_info if v.name in kept]
    del graph.value_info[:]
    graph.value_info.extend(infos)
