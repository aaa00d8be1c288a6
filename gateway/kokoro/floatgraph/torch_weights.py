"""hexgrad's ``KModel`` parameters, read back out of the float graph (``dequantize``).

The ONNX export kept most torch parameter names on its initializers (``encoder.`` or
``decoder.`` before the ``KModel`` name); the rest are found through the operators that use
them:

* a ``Conv`` / ``ConvTranspose`` weight is named after the weight-norm product it was folded
  from (``/encoder/F0.1/Mul_1_output_0``): the module is the one its bias names, or, for the
  bias-free ``conv1x1``, the module of a sibling in the same node scope. A weight-normed
  module gets ``weight_v = W`` and ``weight_g = |W|`` per output channel, which the
  parametrization turns back into exactly ``W``;
* a ``MatMul`` weight without a torch name (ALBERT's, ``bert_encoder``, ``duration_proj``,
  the source's ``l_linear``) is the module whose bias the next operator adds (``Add``,
  ``FastGelu``, ``SkipLayerNormalization``), transposed to torch's (out, in);
* an ``LSTM`` is named by its node scope; its gates are reordered from ONNX's i, o, f, c to
  torch's i, f, g, o, and its bias split into ``bias_ih`` and ``bias_hh``.

Two kinds of ``KModel`` parameters are not in the graph because inference never uses them
as anything but constants: ALBERT's pooler (``CustomAlbert`` returns the last hidden state)
and the affine part of the ``AdaIN1d`` instance norms (identity: the export folded it away).
They are filled with what the graph computes: zeros for the pooler, ones and zeros for the
norms (``UNUSED``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

# Kokoro-82M's config.json, less its vocab (the shipped vocab is added)
CONFIG: dict[str, Any] = {
    "istftnet": {
        "upsample_kernel_sizes": [20, 12],
        "upsample_rates": [10, 6],
        "gen_istft_hop_size": 5,
        "gen_istft_n_fft": 20,
        "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
        "resblock_kernel_sizes": [3, 7, 11],
        "upsample_initial_channel": 512,
    },
    "dim_in": 64,
    "dropout": 0.2,
    "hidden_dim": 512,
    "max_conv_dim": 512,
    "max_dur": 50,
    "multispeaker": True,
    "n_layer": 3,
    "n_mels": 80,
    "n_token": 178,
    "style_dim": 128,
    "text_encoder_kernel_size": 5,
    "plbert": {
        "hidden_size": 768,
        "num_attention_heads": 12,
        "intermediate_size": 2048,
        "max_position_embeddings": 512,
        "num_hidden_layers": 12,
        "dropout": 0.1,
    },
}
MODULES = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")  # the .pth's top level
UNUSED = {"bert.pooler.weight": 0.0, "bert.pooler.bias": 0.0, ".norm.weight": 1.0, ".norm.bias": 0.0}
ONNX_GATES_TO_TORCH = (0, 2, 3, 1)  # i, o, f, c -> i, f, g(c), o


def torch_name(onnx_name: str) -> str:
    """``encoder.predictor.F0.1.conv1.bias`` -> ``predictor.F0.1.conv1.bias``."""
    return onnx_name.split(".", 1)[1] if onnx_name.startswith(("encoder.", "decoder.")) else ""


class Mapper:
    """Fills ``out`` (torch name -> array) from one float graph, for ``shapes`` (torch's)."""

    def __init__(self, model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]) -> None:
        self.graph = model.graph
        self.shapes = shapes
        self.inits = {t.name: t for t in self.graph.initializer}
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for node in self.graph.node:
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)
        self.out: dict[str, np.ndarray] = {}

    def array(self, name: str) -> np.ndarray:
        return numpy_helper.to_array(self.inits[name]).astype(np.float32)

    def put(self, name: str, value: np.ndarray) -> None:
        if tuple(value.shape) != tuple(self.shapes[name]):
            raise ValueError(f"{name}: graph gives {value.shape}, KModel has {tuple(self.shapes[name])}")
        self.out[name] = np.ascontiguousarray(value, np.float32)

    def run(self) -> dict[str, np.ndarray]:
        self.direct()
        scopes = self.convs()
        self.matmuls()
        self.lstms()
        self.bias_free_convs(scopes)
        return self.out

    def direct(self) -> None:
        for name in self.inits:
            key = torch_name(name)
            if key not in self.shapes:
                continue
            value = self.array(name)
            users = self.consumers.get(name, [])
            if any(u.op_type == "MatMul" and u.input[1] == name for u in users):
                value = value.T  # MatMul's (in, out) is torch's Linear (out, in)
            self.put(key, value)

    def conv_weight(self, module: str, weight: np.ndarray) -> None:
        if module + ".weight_g" in self.shapes:
            norm = np.sqrt((weight.astype(np.float64) ** 2).reshape(weight.shape[0], -1).sum(axis=1))
            # a channel that quantized to all zeros: g = 0 and any v with a norm (0/0 is NaN)
            direction = np.where((norm == 0).reshape(-1, *([1] * (weight.ndim - 1))), 1.0, weight)
            self.put(module + ".weight_g", norm.reshape(-1, *([1] * (weight.ndim - 1))))
            self.put(module + ".weight_v", direction)
        else:
            self.put(module + ".weight", weight)

    def convs(self) -> dict[str, str]:
        """Weights of convolutions with a named bias; returns node scope -> torch prefix."""
        scopes: dict[str, str] = {}
        for node in self.graph.node:
            if node.op_type not in ("Conv", "ConvTranspose") or len(node.input) < 3:
                continue
            module = torch_name(node.input[2]).removesuffix(".bias")
            if not module or torch_name(node.input[1]):
                continue  # not a torch module, or its weight came by name
            self.conv_weight(module, self.array(node.input[1]))
            scope, _, local = node.name.rpartition("/")[0].rpartition("/")
            if module.endswith("." + local):
                scopes[scope + "/"] = module[: -len(local)]
        return scopes

    def bias_free_convs(self, scopes: Mapping[str, str]) -> None:
        for node in self.graph.node:
            if node.op_type != "Conv" or len(node.input) > 2 or torch_name(node.input[1]):
                continue
            scope, _, local = node.name.rpartition("/")[0].rpartition("/")
            prefix = scopes.get(scope + "/")
            if prefix is not None and prefix + local + ".weight_v" in self.shapes:
                self.conv_weight(prefix + local, self.array(node.input[1]))

    def matmuls(self) -> None:
        for node in self.graph.node:
            weight = node.input[1] if node.op_type == "MatMul" and len(node.input) > 1 else ""
            if weight not in self.inits or torch_name(weight):
                continue
            value = self.array(weight).T
            for user in self.consumers.get(node.output[0], []):
                for name in user.input:
                    module = torch_name(name).removesuffix(".bias")
                    if name.endswith(".bias") and self.shapes.get(module + ".weight") == value.shape:
                        self.put(module + ".weight", value)

    def lstms(self) -> None:
        for node in self.graph.node:
            if node.op_type != "LSTM":
                continue
            module = node.name.rpartition("/")[0].removeprefix("/encoder/").replace("/", ".")
            if module + ".weight_ih_l0" not in self.shapes:
                module = "predictor." + module  # the shared LSTM's scope lost its parent
            w, r = self.array(node.input[1]), self.array(node.input[2])
            b = self.array(node.input[3])
            hidden = r.shape[-1]
            for d, suffix in enumerate(("_l0", "_l0_reverse")):
                self.put(f"{module}.weight_ih{suffix}", gates(w[d], hidden))
                self.put(f"{module}.weight_hh{suffix}", gates(r[d], hidden))
                self.put(f"{module}.bias_ih{suffix}", gates(b[d, : 4 * hidden], hidden))
                self.put(f"{module}.bias_hh{suffix}", gates(b[d, 4 * hidden :], hidden))


def gates(value: np.ndarray, hidden: int) -> np.ndarray:
    blocks = [value[k * hidden : (k + 1) * hidden] for k in range(4)]
    return np.concatenate([blocks[k] for k in ONNX_GATES_TO_TORCH])


def unused_value(name: str) -> float | None:
    """What a parameter the graph does not hold is filled with (``UNUSED``), else None."""
    for suffix, value in UNUSED.items():
        if name == suffix or (suffix.startswith(".") and name.endswith(suffix)):
            return value
    return None


def state_dict(model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """Every ``KModel`` parameter (torch name -> float32 array) from the float graph ``model``.
    Raises ``ValueError`` naming any parameter it cannot fill."""
    out = Mapper(model, shapes).run()
    missing = []
    for name, shape in shapes.items():
        if name in out:
            continue
        value = unused_value(name)
        if value is None:
            missing.append(name)
        else:
            out[name] = np.full(shape, value, np.float32)
    if missing:
        raise ValueError(f"{len(missing)} KModel parameters not found in the graph: {missing[:8]}")
    return out
