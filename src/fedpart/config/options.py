"""The vocabulary a method's ``Options`` dataclass is declared in: :func:`option` (a default, a
one-line doc and limits), :func:`fraction`, :data:`LIMITS`, and :func:`check_limits`, the one check
of declared limits (``Algorithm.parse_options`` runs it after :func:`~fedpart.config.coerce`).

``rho: float = option(0.1, "ρ of the selection phase", ge=0, le=1)``
"""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any

from fedpart.errors import ConfigError

#: the limits an options dataclass's field may declare in its metadata, checked by
#: :func:`check_limits`: bounds (``ge`` ≥, ``gt`` >, ``le`` ≤, ``lt`` <) and ``choices``
LIMITS = ("ge", "gt", "le", "lt", "choices")


def option(
    default: Any = dataclasses.MISSING,
    doc: str = "",
    *,
    factory: Any = None,
    **limits: Any,
) -> Any:
    """One option of a method's ``Options`` dataclass (an ``algorithm.*`` key): its default (or
    ``factory`` for a list), its one-line ``doc`` and its limits (:data:`LIMITS`, checked by
    :func:`check_limits`), e.g. ``rho: float = option(0.1, "ρ of the selection phase", ge=0,
    le=1)``."""
    unknown = set(limits) - set(LIMITS)
    if unknown:
        raise TypeError(f"unknown option limits {sorted(unknown)}; valid: {', '.join(LIMITS)}")
    metadata = {"doc": doc, **limits}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def fraction(default: float, doc: str) -> Any:
    """An option that is a fraction in [0, 1] (a ratio, a weight, a share of rounds):
    ``option(default, doc, ge=0, le=1)``."""
    return option(default, doc, ge=0, le=1)


def check_limits(options: Any, section: str) -> None:
    """Check every field of the dataclass ``options`` against the limits its metadata declares
    (:data:`LIMITS`); ``None`` passes (an unset optional value), a list is checked item by item.
    Raises a one-line :class:`ConfigError` naming ``section.field`` and what it allows."""
    for f in dataclasses.fields(options):
        value = getattr(options, f.name)
        limits = {k: f.metadata[k] for k in LIMITS if k in f.metadata}
        if value is None or not limits:
            continue
        key = f"{section}.{f.name}"
        if isinstance(value, list):
            for i, item in enumerate(value):
                _check_limit(f"{key}[{i}]", item, limits)
        else:
            _check_limit(key, value, limits)


def _check_limit(key: str, value: Any, limits: dict[str, Any]) -> None:
    choices = limits.get("choices")
    if choices is not None and value not in choices:
        valid = ", ".join(str(c) for c in choices)
        raise ConfigError(key, f"unknown value '{value}'; valid choices: {valid}")
    lo, lo_open = (limits["gt"], True) if "gt" in limits else (limits.get("ge"), False)
    hi, hi_open = (limits["lt"], True) if "lt" in limits else (limits.get("le"), False)
    # written as "not inside" so that a NaN fails too
    too_low = lo is not None and not (value > lo if lo_open else value >= lo)
    too_high = hi is not None and not (value < hi if hi_open else value <= hi)
    if not (too_low or too_high):
        return
    if lo is not None and hi is not None:
        bound = f"in {'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"
    elif lo is not None:
        bound = f"{'>' if lo_open else '>='} {lo}"
    else:
        bound = f"{'<' if hi_open else '<='} {hi}"
    raise ConfigError(key, f"must be {bound}, got {value}")
