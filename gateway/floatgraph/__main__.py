"""``python -m gateway.floatgraph build [--precision fp32,fp16] [--cache DIR]``: the float
graphs made ahead of time (a container image builds them so that its first start is quick)."""
from __future__ import annotations

import argparse
import logging
from typing import Sequence

from ..engines.onnx_kokoro import load_model_bytes, shipped_sha256
from . import cache_dir, graph_bytes

log = logging.getLogger(__name__)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway.floatgraph")
    parser.add_argument("command", choices=["build"])
    parser.add_argument("--precision", default="fp32,fp16")
    parser.add_argument("--cache", default="", help="cache folder (default: the user cache)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for precision in args.precision.split(","):
        _, digest = graph_bytes(precision, load_model_bytes, shipped_sha256(), args.cache)
        log.info("%s: sha256 %s in %s", precision, digest[:16], cache_dir(args.cache))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
