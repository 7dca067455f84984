"""The registry of methods by name."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fedpart.algorithms.base import Algorithm

ALGORITHMS: dict[str, type[Algorithm]] = {}


def register(cls: type[Algorithm]) -> type[Algorithm]:
    """Class decorator adding a method to :data:`ALGORITHMS` under ``cls.name``."""
    if not cls.name or cls.name != cls.name.lower():
        raise ValueError(f"method {cls.__name__} needs a lower-case registry name")
    if cls.name in ALGORITHMS:
        raise ValueError(f"method name {cls.name!r} registered twice")
    ALGORITHMS[cls.name] = cls
    return cls
