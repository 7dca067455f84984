"""The registry of methods by name, below both the engine and the methods.

``fedpart.algorithms`` registers every method here when it is imported (``register``); the
engine and the config look methods up through :func:`methods`, which imports that package by
name on first use. So the engine never imports ``fedpart.algorithms`` (no import circle between
the two), and a method plugs in by being registered.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Sequence
from typing import Any

from fedpart.errors import ConfigError

ALGORITHMS: dict[str, Any] = {}

#: the package whose import registers the built-in methods
METHODS_PACKAGE = "fedpart.algorithms"


def register(cls: Any) -> Any:
    """Class decorator adding a method to :data:`ALGORITHMS` under ``cls.name``."""
    name = getattr(cls, "name", "")
    if not isinstance(name, str) or not name or name != name.lower() or " " in name:
        raise ConfigError(
            "register_algorithm",
            f"method {getattr(cls, '__name__', cls)!r} needs a lower-case registry name "
            "(its class attribute 'name', or register_algorithm(\"name\"))",
        )
    old = ALGORITHMS.get(name)
    if old is not None and old is not cls and _qualified(old) != _qualified(cls):
        raise ConfigError(
            "register_algorithm",
            f"method name '{name}' is taken (by {_qualified(old)}); choose another",
        )
    ALGORITHMS[name] = cls
    return cls


_ALGORITHM = ("fedpart.algorithms.base", "Algorithm")


def _qualified(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', '?')}"


def register_algorithm(name: str | type | None = None) -> Any:
    """Register a method class (a subclass of ``fedpart.algorithms.Algorithm``) under
    ``name``: ``@register_algorithm("apfl")``, or bare ``@register_algorithm`` when the class
    sets its ``name``. A name taken by another class is a one-line error."""
    if isinstance(name, type):
        return register(name)

    def wrap(cls: type) -> type:
        # by its bases' names: the registry sits below the methods and imports none of them
        bases = getattr(cls, "__mro__", ())
        if not any((b.__module__, b.__qualname__) == _ALGORITHM for b in bases):
            raise ConfigError(
                "register_algorithm",
                f"{cls!r} is not a subclass of fedpart.algorithms.Algorithm (docs/extending.md)",
            )
        if name is not None:
            cls.name = name
        return register(cls)

    return wrap


def methods() -> dict[str, Any]:
    """Every registered method by name (the built-in ones imported on first use, and the
    installed plugins')."""
    from fedpart.plugins import load_entry_points  # noqa: PLC0415

    importlib.import_module(METHODS_PACKAGE)
    load_entry_points()
    return ALGORITHMS


def lookup(names: Sequence[str], value: str, key: str, what: str) -> str:
    """``value`` as a registered name, matched without regard to case; else a one-line error
    with the closest name."""
    if value in names:
        return value
    folded = {n.lower(): n for n in names}
    if isinstance(value, str) and value.lower() in folded:
        return folded[value.lower()]
    close = difflib.get_close_matches(str(value).lower(), list(folded), n=1)
    hint = f" (did you mean '{folded[close[0]]}'?)" if close else ""
    raise ConfigError(
        key, f"unknown {what} '{value}'; valid choices: {', '.join(sorted(names))}{hint}"
    )
