"""Kokoro-82M as graphs made from the shipped int8 bytes (fp32, fp16, int8-static), cached by hash.

``graph_bytes("int8")`` is the shipped model (joined and hash-checked by ``onnx_kokoro``);
``"fp32"`` is its dequantized copy (``dequantize``), ``"fp16"`` that copy in half precision
for the GPU (``to_fp16``), ``"int8-static"`` the generator's convolutions in static int8 for
the CPU's VNNI / AMX kernels (``static_build``, calibrated on fixed phonemes and installed voices:
its ``Calibration`` goes into the cache name). A graph is built on first use (or at install:
``convert-weights --graphs fp32,fp16``) from the verified int8 bytes and kept in the user's
cache folder (``~/.cache/kokoro-gateway/float``), named after the int8 model's hash, the
precision and ``VERSION``, with its own SHA-256 beside it: it is checked on every read and
rebuilt when it does not match. Nothing is downloaded and nothing is committed.

``onnx`` is imported only to build; reading a cached graph needs neither it nor the build time
(a few seconds each on two cores).
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

    from .static_build import Calibration

log = logging.getLogger(__name__)

PRECISIONS = ("int8", "fp32", "fp16", "int8-static")
STATIC = "int8-static"
VERSION = 5  # bump when the rewrite changes: old cache files are then never read
# kept in fp32 inside the fp16 graph: the text side (cheap, and the durations it rounds must
# not move) and the harmonic source (a phase summed over thousands of samples, and the STFT)
GENERATOR = "/decoder/decoder/generator/"
FP32_SCOPES = ("/encoder/", f"{GENERATOR}m_source/")
HALF_OPS = ("Conv", "ConvTranspose", "MatMul")  # with a weight: made half precision


def cache_dir(setting: str = "") -> Path:
    """``setting``, else ``$XDG_CACHE_HOME/kokoro-gateway/float`` (or under ~/.cache)."""
    if setting:
        return Path(setting)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kokoro-gateway" / "float"


def cache_path(folder: Path, source_sha256: str, precision: str) -> Path:
    return folder / f"kokoro-{source_sha256[:16]}-{precision}-v{VERSION}.onnx"


def check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise ValueError(f"embedded_precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")


def graph_bytes(
    precision: str,
    shipped: Callable[[], bytes],
    shipped_sha256: str,
    folder: str = "",
    calibration: Calibration | None = None,
) -> tuple[bytes, str]:
    """The model for ``precision`` and its SHA-256: ``shipped()`` (the int8 bytes, checked
    against ``shipped_sha256``) for int8, else the cached graph, or one built from
    ``shipped()`` now and cached. int8-static needs its ``calibration``
    (``static_build.calibration``; the default one from the voice store when not given)."""
    check_precision(precision)
    if precision == "int8":
        return shipped(), shipped_sha256
    name = precision
    if precision == STATIC:
        from .static_build import default_calibration

        calibration = calibration or default_calibration()
        name = f"{precision}-{calibration.key()[:16]}"
    path = cache_path(cache_dir(folder), shipped_sha256, name)
    cached = _read(path)
    if cached is not None:
        return cached
    blob = build(shipped(), precision, calibration)
    digest = hashlib.sha256(blob).hexdigest()
    _write(path, blob, digest)
    return blob, digest


def build(int8: bytes, precision: str, calibration: Calibration | None = None) -> bytes:
    """The graph for ``precision`` from the shipped int8 bytes (already checked)."""
    import onnx

    if precision == STATIC:
        from . import static_build

        return static_build.build(int8, calibration or static_build.default_calibration())

    from .dequantize import dequantize

    model = dequantize(onnx.load_from_string(int8))
    if precision == "fp16":
        model = to_fp16(model)
    return model.SerializeToString()


def to_fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    """Half precision where the time goes: the vocoder's convolutions and matrix products
    (weights stored in fp16, a cast of the input before each and of the output after it);
    everything between them (norms, activations), the text side, the harmonic source and the
    output's exp and iSTFT stay float32. onnxruntime's own converter was tried: it wraps
    every op it keeps in float32 in casts through fp16, and the source's spectrum (ratios
    up to 9e4) overflows there to NaN."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from .dequantize import prune

    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    inits = {t.name: t for t in graph.initializer}
    keep = set(_source_and_output_path(graph))
    halves: dict[str, str] = {}  # float32 tensor or initializer -> its fp16 copy
    nodes: list[onnx.NodeProto] = []

    def half(name: str) -> str:
        if name not in halves:
            halves[name] = f"{name}/fp16"
            if name in inits:
                value = numpy_helper.to_array(inits[name]).astype("float16")
                graph.initializer.append(numpy_helper.from_array(value, halves[name]))
            else:
                nodes.append(
                    helper.make_node("Cast", [name], [halves[name]], to=TensorProto.FLOAT16, name=f"{name}/to_fp16")
                )
        return halves[name]

    for node in list(graph.node):
        heavy = node.op_type in HALF_OPS and len(node.input) > 1 and node.input[1] in inits
        if not heavy or node.name in keep or node.name.startswith(FP32_SCOPES):
            nodes.append(node)
            continue
        result = node.output[0]
        node.input[:] = [half(i) if i else i for i in node.input]
        node.output[0] = halves[result] = f"{result}/fp16"  # a heavy consumer takes it as is
        nodes.append(node)
        nodes.append(
            helper.make_node("Cast", [node.output[0]], [result], to=TensorProto.FLOAT, name=f"{result}/to_fp32")
        )
    del graph.node[:]
    graph.node.extend(nodes)
    prune(out)
    return out


def _source_and_output_path(graph: onnx.GraphProto) -> list[str]:
    """The generator's nodes that make the harmonic source's spectrum (ratios of tiny
    numbers: inf in half precision) and everything after ``conv_post`` (exp, the iSTFT)."""
    producer = {o: n for n in graph.node for o in n.output}
    names: set[str] = set()
    stack = [n.input[0] for n in graph.node if n.name.startswith(f"{GENERATOR}noise_convs.")]
    while stack:
        node = producer.get(stack.pop())
        if node is None or node.name in names or not node.name.startswith(GENERATOR):
            continue
        names.add(node.name)
        stack.extend(node.input)
    after = {n.output[0] for n in graph.node if n.name.startswith(f"{GENERATOR}conv_post/")}
    for node in graph.node:  # topologically sorted
        if any(i in after for i in node.input):
            names.add(node.name)
            after.update(node.output)
    return sorted(names)


def _read(path: Path) -> tuple[bytes, str] | None:
    try:
        blob = path.read_bytes()
        expected = path.with_suffix(".sha256").read_text().split()[0]
    except (OSError, IndexError):
        return None
    digest = hashlib.sha256(blob).hexdigest()
    if digest != expected:
        log.warning("%s does not match its hash; rebuilding it", path)
        return None
    return blob, digest


def _write(path: Path, blob: bytes, digest: str) -> None:
    """Atomically (a reader never sees half a file); a cache that cannot be written only warns."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        for target, data in ((path, blob), (path.with_suffix(".sha256"), f"{digest}  {path.name}\n".encode())):
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, target)
    except OSError as exc:
        log.warning("could not cache the graph in %s (%s); it is rebuilt at every start", path.parent, exc)
        return
    log.info("built %s (%d MB)", path, len(blob) >> 20)
