"""The ``log_level`` setting: the root logger's level, then optionally other loggers' own.

``INFO`` sets the root logger; ``INFO,gateway.core=DEBUG`` also lets one part of the gateway
say more (``gateway.core.engine_rate``: the engine's calls against their forecasts, and each
``preroll_ms`` a listener alone is told with what it was made of) without every library's
debug lines.
"""

from __future__ import annotations

import logging


def levels(spec: str) -> tuple[int, dict[str, int]]:
    """The root level and the named loggers' levels in ``spec``; ValueError names a bad part."""
    root, named = logging.INFO, {}
    for k, part in enumerate(p.strip() for p in spec.split(",")):
        name, _, level = (x.strip() for x in part.rpartition("="))
        value = logging.getLevelName(level.upper())
        if not isinstance(value, int) or (k == 0) == bool(name):  # the root's first, then NAME=LEVEL
            raise ValueError(f"log_level: {part!r} is not a level (DEBUG, INFO, WARNING, ERROR) or NAME=LEVEL after it")
        if k == 0:
            root = value
        else:
            named[name] = value
    return root, named


def apply(spec: str) -> None:
    root, named = levels(spec)
    logging.getLogger().setLevel(root)
    for name, level in named.items():
        logging.getLogger(name).setLevel(level)
