"""Benchmarks: each module here has ``main(argv: list[str]) -> int`` and prints ratios
measured side by side in one run. ``run_gateway.py bench NAME ...`` dispatches to them.

- ``engine``: embedded engine real-time factor (1 vs 2 threads), time to first audio, where the
  time goes per path (bare model, exact, frozen-first, in service) and RSS per part.
- ``quality``: intelligibility (Whisper WER) per voice and per G2P route.
- ``wer``: the word-error-rate and Whisper helpers the others and the tests share.
"""

from __future__ import annotations

import importlib


def run(name: str, argv: list[str]) -> int:
    """Run ``bench.<name>.main(argv)``; only the chosen benchmark is imported."""
    if not name.isidentifier() or name == "wer":
        raise ValueError(f"unknown benchmark {name!r}")
    module = importlib.import_module(f"{__name__}.{name}")
    return int(module.main(argv))
