"""``python run_gateway.py convert-weights --out DIR [--graphs fp32,fp16]``: a ``kokoro_dir``
for the torch engine, made from the shipped ONNX model on this machine (nothing downloaded);
with ``--graphs``, the embedded engine's float graphs are built into their cache too (for
images: their first start is then quick).

Writes ``config.json`` (Kokoro-82M's, with the shipped vocab) and ``kokoro-v1_0.pth`` (one
state dict per ``KModel`` part, as hexgrad ships it), every parameter read back from the
fp32 graph (``torch_weights``). The voices stay the gateway's voice store. Then
``--engine kokoro --set kokoro_dir=DIR`` speaks with the real weights, on CPU or CUDA.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .floatgraph import cache_dir, graph_bytes
from .floatgraph.torch_weights import CONFIG, MODULES, state_dict
from .onnx_model import load_model_bytes, shipped_sha256
from .parts import load_vocab

log = logging.getLogger(__name__)
WEIGHTS = "kokoro-v1_0.pth"  # the name the torch engine prefers
INSTALL_HINT = "convert-weights needs torch and hexgrad's kokoro: pip install -e '.[torch]'"


def kmodel(config: dict[str, Any]) -> Any:
    """A ``KModel`` of Kokoro-82M's shape with its initial (random) parameters, built offline."""
    import torch
    from kokoro.model import KModel

    with tempfile.TemporaryDirectory() as tmp:
        empty = Path(tmp) / "empty.pth"
        torch.save({}, empty)
        with warnings.catch_warnings():  # LSTM dropout and the old weight_norm warn on every build
            warnings.simplefilter("ignore")
            return KModel(repo_id="hexgrad/Kokoro-82M", config=config, model=str(empty))


def convert(out: Path, cache: str = "") -> dict[str, Any]:
    """Write the model folder; returns what was written (for the log and the tests)."""
    import onnx
    import torch

    t0 = time.perf_counter()
    config = {**CONFIG, "vocab": load_vocab()}
    graph, digest = graph_bytes("fp32", load_model_bytes, shipped_sha256(), cache)
    model = kmodel(config)
    target = model.state_dict()
    params = state_dict(onnx.load_from_string(graph), {k: tuple(v.shape) for k, v in target.items()})
    del graph
    with torch.no_grad():
        for name, value in params.items():
            target[name].copy_(torch.from_numpy(value))
    parts = {name: getattr(model, name).state_dict() for name in MODULES}
    for name, part in parts.items():  # what KModel's own loader does, strictly
        getattr(model, name).load_state_dict(part, strict=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, ensure_ascii=False, indent=1), "utf-8")
    torch.save(parts, out / WEIGHTS)
    report = {
        "folder": str(out),
        "parameters": len(params),
        "source_sha256": shipped_sha256(),
        "fp32_sha256": digest,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    (out / "SOURCE.json").write_text(json.dumps(report, indent=1) + "\n", "utf-8")
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="run_gateway.py convert-weights", description=__doc__)
    parser.add_argument("--out", required=True, help="the folder to write (kokoro_dir)")
    parser.add_argument("--cache", default="", help="float graph cache folder (default: the user cache)")
    parser.add_argument("--graphs", default="", help="also build these graphs, e.g. fp32,fp16,int8-static")
    args = parser.parse_args(argv)
    for precision in filter(None, args.graphs.split(",")):
        _, digest = graph_bytes(precision, load_model_bytes, shipped_sha256(), args.cache)
        log.info("%s graph: sha256 %s in %s", precision, digest[:16], cache_dir(args.cache))
    try:
        import kokoro.model  # noqa: F401
        import torch  # noqa: F401
    except ImportError as exc:
        raise SystemExit(f"{INSTALL_HINT} ({exc})") from None
    report = convert(Path(args.out), args.cache)
    log.info(
        "wrote %s: config.json and %s (%d parameters from the shipped model, %.1f s); serve it with "
        "--engine kokoro --set kokoro_dir=%s",
        report["folder"],
        WEIGHTS,
        report["parameters"],
        report["seconds"],
        report["folder"],
    )
    return 0
