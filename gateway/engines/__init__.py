"""Engines by import string, so choosing one never imports the others (or their heavy deps)."""

from __future__ import annotations

import importlib

from ..config import Settings
from .base import Capabilities, Engine, EngineBase, Voice

ENGINES: dict[str, str] = {
    "embedded": "gateway.engines.embedded:EmbeddedEngine",
    "kokoro": "gateway.engines.kokoro:KokoroEngine",
    "container": "gateway.engines.container:ContainerEngine",
    "sagemaker": "gateway.engines.sagemaker:SageMakerEngine",
    "fake": "gateway.engines.fake:FakeEngine",
}


def create_engine(settings: Settings, name: str | None = None) -> Engine:
    """Build (not start) the engine named by ``name`` or ``settings.engine``.

    A name containing ``:`` is taken as an import string ``module:Class``.
    """
    name = name or settings.engine
    target = ENGINES.get(name, name if ":" in name else None)
    if target is None:
        raise ValueError(f"unknown engine {name!r}; choose one of {', '.join(ENGINES)}")
    module_name, _, attr = target.partition(":")
    cls = getattr(importlib.import_module(module_name), attr)
    engine: Engine = cls(settings)
    return engine


__all__ = ["ENGINES", "Capabilities", "Engine", "EngineBase", "Voice", "create_engine"]
