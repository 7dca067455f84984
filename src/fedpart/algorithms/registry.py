"""The registry of methods by name (:mod:`fedpart.registry`; re-exported for method files)."""

from fedpart.registry import ALGORITHMS, register

__all__ = ["ALGORITHMS", "register"]
