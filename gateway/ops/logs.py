"""The ``log_level`` setting: the root logger's level, then optionally other loggers' own.

``INFO`` sets the root logger; ``INFO,gateway.core=DEBUG`` also lets one part of the gateway
say more (the engine's calls against their forecasts and each ``preroll_ms`` with what it was
made of: ``gateway.core.engine_rate``, ``gateway.core.listener``) without every library's
debug lines.
"""

from __future__ import annotations

import logging


def levels(spec: str) -> tuple[int, dict[str, int]]:
    """The root level and the named loggers' levels in ``spec``; ValueError names a bad part."""
    root, named = logging.INFO, {}
    for k, part in enumerate(p.strip() for p in spec.split(",")):
        name, _, level = part.rpartition("=")
        value = logging.getLevelName(level.strip().upper())
        if not isinstance(value, int) or (k == 0) == bool(name) or (k and not name.strip()):
            raise ValueError(f"log_level: {part!r} is not a level (DEBUG, INFO, WARNING, ERROR) or NAME=LEVEL after it")
        if k == 0:
            root = value
        else:
            named[name.strip()] = value
    return root, named


def apply(spec: str) -> None:
    root, named = levels(spec)
    logging.getLogger().setLevel(root)
    for name, level in named.items():
        logging.getLogger(name).setLevel(level)
