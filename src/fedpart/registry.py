"""The registry of methods by name, below both the engine and the methods.

``fedpart.algorithms`` registers every method here when it is imported (``register``); the
engine and the config look methods up through :func:`methods`, which imports that package by
name on first use. So the engine never imports ``fedpart.algorithms`` (no import circle between
the two), and a method plugs in by being registered.
"""

from __future__ import annotations

import importlib
from typing import Any

ALGORITHMS: dict[str, Any] = {}

#: the package whose import registers the built-in methods
METHODS_PACKAGE = "fedpart.algorithms"


def register(cls: Any) -> Any:
    """Class decorator adding a method to :data:`ALGORITHMS` under ``cls.name``."""
    if not cls.name or cls.name != cls.name.lower():
        raise ValueError(f"method {cls.__name__} needs a lower-case registry name")
    if cls.name in ALGORITHMS:
        raise ValueError(f"method name {cls.name!r} registered twice")
    ALGORITHMS[cls.name] = cls
    return cls


def methods() -> dict[str, Any]:
    """Every registered method by name (the built-in ones imported on first use)."""
    importlib.import_module(METHODS_PACKAGE)
    return ALGORITHMS
