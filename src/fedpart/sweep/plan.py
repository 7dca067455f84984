"""A sweep planned: its folder, grid, seeds and jobs, every cell's config checked first, and its
manifest ``sweep.json`` (the grid, and each run's directory and state)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedpart.errors import FedpartError
from fedpart.sweep.executor import Job
from fedpart.sweep.grid import Cell, cells_of, parse_grid

MANIFEST = "sweep.json"


@dataclass
class Sweep:
    """A sweep's folder, grid, seeds and jobs (see :func:`plan`)."""

    path: Path
    config: str
    fixed: list[str]
    axes: list[tuple[str, list[str]]]
    seeds: list[int]
    cells: list[Cell]
    jobs: list[Job] = field(default_factory=list)
    digest: str = ""

    def manifest(self, outcomes: dict[Path, dict[str, Any]] | None = None) -> dict[str, Any]:
        """The JSON manifest: the grid, and each cell's run directories and states."""
        outcomes = outcomes or {}
        cells = []
        for cell in self.cells:
            runs = []
            for job in (j for j in self.jobs if j.cell == cell.name):
                entry: dict[str, Any] = {
                    "seed": job.seed,
                    "dir": str(job.run_dir.relative_to(self.path)),
                    "state": job.state(),
                }
                error = outcomes.get(job.run_dir, {}).get("error")
                if error and entry["state"] != "finished":
                    entry["state"], entry["error"] = "failed", error
                runs.append(entry)
            cells.append({"name": cell.name, "overrides": cell.overrides, "runs": runs})
        return {
            "config": self.config,
            "fixed": self.fixed,
            "grid": {k: vs for k, vs in self.axes if len(vs) > 1},
            "seeds": self.seeds,
            "config_digest": self.digest,
            "cells": cells,
        }

    def write_manifest(self, outcomes: dict[Path, dict[str, Any]] | None = None) -> None:
        """Replace ``sweep.json`` atomically."""
        from fedpart.tracking.run_dir import RunDir

        RunDir(self.path).write_json(MANIFEST, self.manifest(outcomes))


def _config_digest(base: Any) -> str:
    """A digest of the resolved base config without its output section (the sweep sets it)."""
    data = base.to_dict()
    data.pop("output", None)
    data.pop("seed", None)
    text = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:10]


def plan(
    config: str,
    specs: Sequence[str],
    seeds: Sequence[int],
    out: str | os.PathLike | None = None,
) -> Sweep:
    """Expand a sweep: check every cell's config, choose the folder, list the jobs.

    The default folder ``runs/sweep-<config name>-<digest>`` depends only on the config and the
    fixed overrides, so the same command finds its earlier runs again.

    Raises:
        FedpartError: a bad override in any cell (named with the cell), or a folder that holds
            a sweep of another config.
    """
    from fedpart.config import load_config

    axes = parse_grid(specs)
    fixed = [f"{k}={vs[0]}" for k, vs in axes if len(vs) == 1]
    base = load_config(config, fixed)
    digest = _config_digest(base)
    cells = cells_of(axes)
    path = Path(out) if out else Path("runs") / f"sweep-{Path(config).stem}-{digest}"
    path = path.resolve()  # workers and Ray tasks may run in another directory
    sweep = Sweep(path, str(Path(config).resolve()), fixed, axes, list(seeds), cells, [], digest)
    old = path / MANIFEST
    if old.is_file():
        try:
            previous = json.loads(old.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise FedpartError(f"{old}: cannot read ({exc})") from exc
        if previous.get("config_digest") != digest:
            raise FedpartError(
                f"{path} holds a sweep of another config or fixed overrides; choose another --out"
            )
    for cell in cells:
        for seed in seeds:
            run_dir = path / cell.name / f"seed{seed}"
            overrides = [*fixed, *cell.overrides, f"seed={seed}"]
            try:
                cfg = base.with_overrides([*cell.overrides, f"seed={seed}"])
            except FedpartError as exc:
                raise FedpartError(f"sweep cell {cell.name}: {exc}") from exc
            sweep.jobs.append(Job(cell.name, seed, run_dir, overrides, cfg.federation.rounds))
    return sweep
