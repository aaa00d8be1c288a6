"""Kokoro-82M as float graphs (fp32, fp16) made from the shipped int8 bytes, cached by hash.

``graph_bytes("int8")`` is the shipped model (joined and hash-checked by ``onnx_kokoro``);
``"fp32"`` is its dequantized copy (``dequantize``), ``"fp16"`` that copy in half precision
for the GPU (``to_fp16``). A float graph is built on first use (or at install:
``python -m gateway.floatgraph build``, ``__main__``) from the verified int8 bytes and kept in the user's
cache folder (``~/.cache/kokoro-gateway/float``), named after the int8 model's hash, the
precision and ``VERSION``, with its own SHA-256 beside it: it is checked on every read and
rebuilt when it does not match. Nothing is downloaded and nothing is committed.

``onnx`` is imported only to build; reading a cached graph needs neither it nor the build time
(about 2 s for fp32 on two cores, 10 s more for fp16).
"""
from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from pathlib import Path
from typing import Callable

log = logging.getLogger(__name__)

PRECISIONS = ("int8", "fp32", "fp16")
VERSION = 1  # bump when the rewrite changes: old cache files are then never read
# kept in fp32 inside the fp16 graph: the text side (cheap, and the durations it rounds must
# not move) and the harmonic source (a phase summed over thousands of samples, and the STFT)
FP32_SCOPES = ("/encoder/", "/decoder/decoder/generator/m_source/", "/decoder/decoder/generator/stft/")
FP32_OPS = ["STFT", "Atan", "Exp", "CumSum", "Range", "Cos"]


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


def graph_bytes(precision: str, shipped: Callable[[], bytes], shipped_sha256: str,
                folder: str = "") -> tuple[bytes, str]:
    """The model for ``precision`` and its SHA-256: ``shipped()`` (the int8 bytes, checked
    against ``shipped_sha256``) for int8, else the cached float graph, or one built from
    ``shipped()`` now and cached."""
    check_precision(precision)
    if precision == "int8":
        return shipped(), shipped_sha256
    path = cache_path(cache_dir(folder), shipped_sha256, precision)
    cached = _read(path)
    if cached is not None:
        return cached
    blob = build(shipped(), precision)
    digest = hashlib.sha256(blob).hexdigest()
    _write(path, blob, digest)
    return blob, digest


def build(int8: bytes, precision: str) -> bytes:
    """The float graph for ``precision`` from the shipped int8 bytes (already checked)."""
    import onnx

    from .dequantize import dequantize

    model = dequantize(onnx.load_from_string(int8))
    if precision == "fp16":
        model = to_fp16(model)
    return model.SerializeToString()


def to_fp16(model: "onnx.ModelProto") -> "onnx.ModelProto":
    """Half precision for the vocoder's convolutions and norms; inputs and outputs stay
    float32, and so do ``FP32_SCOPES`` and ``FP32_OPS`` (onnxruntime's own converter)."""
    from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST, convert_float_to_float16

    keep = [n.name for n in model.graph.node if n.name.startswith(FP32_SCOPES)]
    return convert_float_to_float16(model, keep_io_types=True, op_block_list=DEFAULT_OP_BLOCK_LIST + FP32_OPS,
                                    node_block_list=keep)


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
        log.warning("could not cache the float graph in %s (%s); it is rebuilt at every start", path.parent, exc)
        return
    log.info("built %s (%d MB)", path, len(blob) >> 20)
