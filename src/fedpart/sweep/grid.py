"""A sweep's grid: ``key=v1,v2,...`` arguments as axes, their cartesian product as cells, and
the seeds (``0,1,2`` or ``0-4``)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from fedpart.errors import FedpartError


def split_values(text: str) -> list[str]:
    """``v1,v2,...`` split at the commas that are not inside brackets or quotes, each value
    stripped; a text without such a comma is one value, taken as written (as ``fedpart run``
    takes it: a path keeps its spaces).

    ``partition.split=[0.75,0,0.25]`` therefore stays one value.
    """
    values, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == "," and depth == 0:
            values.append(text[start:i])
            start = i + 1
    values.append(text[start:])
    return [v.strip() for v in values] if len(values) > 1 else [text]


def parse_grid(specs: Sequence[str]) -> list[tuple[str, list[str]]]:
    """The axes of a sweep from ``key=v1,v2,...`` arguments, in the order given.

    Raises:
        FedpartError: an argument is not ``key=values``, a value is empty, or a key repeats.
    """
    axes: list[tuple[str, list[str]]] = []
    for spec in specs:
        key, sep, text = spec.partition("=")
        key = key.strip()
        if not sep or not key:
            raise FedpartError(f"sweep: expected key=value[,value...], got {spec!r}")
        values = split_values(text)
        if any(v == "" for v in values):
            raise FedpartError(f"sweep: {key}: empty value in {text!r}")
        if key in (k for k, _ in axes):
            raise FedpartError(f"sweep: {key} is given twice; list its values once: {key}=a,b")
        if key == "seed":
            raise FedpartError("sweep: give the seeds with --seeds 0,1,2, not seed=...")
        if key == "output.dir":
            raise FedpartError(
                "sweep: the runs go into <--out>/<cell>/seed<s>; give the folder with --out DIR, "
                "not output.dir=..."
            )
        axes.append((key, values))
    return axes


def parse_seeds(text: str) -> list[int]:
    """``0,1,2`` or a range ``0-4`` (inclusive) as a list of distinct seeds.

    Raises:
        FedpartError: not a list of non-negative integers.
    """
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d{1,9})(?:-(\d{1,9}))?", part)
        if not m:
            raise FedpartError(f"--seeds: expected integers like 0,1,2 or 0-4, got {text!r}")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise FedpartError(f"--seeds: empty range {part!r}")
        seeds.extend(s for s in range(lo, hi + 1) if s not in seeds)
    return seeds


def _slug(text: str) -> str:
    """A directory-name-safe form of an override value."""
    slug = re.sub(r"[^A-Za-z0-9._+-]+", "-", text).strip("-.")
    return slug[:40] or "x"


@dataclass
class Cell:
    """One point of the grid: its overrides (the swept keys only) and its directory name."""

    name: str
    overrides: list[str]


def cells_of(axes: Sequence[tuple[str, list[str]]]) -> list[Cell]:
    """The cartesian product of the axes with more than one value (single values are fixed).

    A cell is named by its values (``fedavg`` or ``fedavg_lr-0.1``); the key is added where two
    axes would otherwise give the same name.
    """
    swept = [(k, vs) for k, vs in axes if len(vs) > 1]
    cells = []
    for combo in itertools.product(*(vs for _, vs in swept)):
        pairs = list(zip((k for k, _ in swept), combo, strict=True))
        name = "_".join(_slug(v) for _, v in pairs) or "all"
        cells.append(Cell(name, [f"{k}={v}" for k, v in pairs]))
    names = [c.name for c in cells]
    if len(set(names)) < len(names):  # e.g. two axes with the value 1: name the keys too
        for c in cells:
            c.name = "_".join(_slug(o.replace("=", "-")) for o in c.overrides)
    return cells
