"""Text pieces the reports share: markdown tables and percentages.

Below every other package (it imports nothing of fedpart), so the bench, the report, the cost
report and the command line format their tables the same way.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["is_number", "markdown_table", "pct"]


def is_number(value: Any) -> bool:
    """Whether ``value`` is a finite int or float (``bool`` is not a number here)."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


def pct(value: Any, missing: str = "-") -> str:
    """A fraction as a percentage with two decimals (``0.1234`` -> ``"12.34"``); ``missing``
    where ``value`` is no finite number (:func:`is_number`)."""
    return f"{100 * float(value):.2f}" if is_number(value) else missing


def markdown_table(
    header: Sequence[str], rows: Iterable[Sequence[str]], rule: str = "---"
) -> list[str]:
    """The lines of a markdown table: ``| a | b |``, the rule under the header (``rule`` per
    column: ``|---|---|``, or ``| --- | --- |`` with ``rule=" --- "``) and one line per row. The
    cells are taken as they are (a ``|`` inside one is the caller's to escape)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(rule for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines
