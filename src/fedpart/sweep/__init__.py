"""Seeded sweeps: the cartesian grid of config overrides × seeds, run in parallel and resumably.

``fedpart sweep CONFIG key=v1,v2 ... --seeds 0,1,2 --jobs N`` expands every ``key=v1,v2,...``
into one axis of the grid (a ``key=value`` with a single value is a fixed override), runs every
cell once per seed into ``SWEEP/<cell>/seed<s>/`` and writes ``SWEEP/sweep.json`` (the manifest),
``SWEEP/table.md`` and ``SWEEP/table.csv`` (mean ± std over seeds per cell).

A run whose ``summary.json`` exists is not run again; one that was interrupted (its
``config.yaml`` exists) is continued with :func:`fedpart.api.resume`, so killing a sweep and
starting the same command again loses at most the rounds after each run's last checkpoint.
Runs execute in spawned worker processes (one torch thread each unless the config sets
``engine.threads``), or as Ray tasks on an existing cluster with ``--ray-address``.

The modules: ``grid`` (axes, cells and seeds), ``executor`` (a run's job, running the jobs, the
progress line; ``fedpart compare`` runs through it too), ``plan`` (the sweep's folder, jobs and
manifest) and ``tables`` (mean ± std per cell); :func:`run_sweep` puts them together.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fedpart.report.tables import FINAL_STAGE_NOTE
from fedpart.sweep.executor import Job, Progress, Runner, execute, run_job
from fedpart.sweep.grid import Cell, cells_of, parse_grid, parse_seeds, split_values
from fedpart.sweep.plan import MANIFEST, Sweep, plan
from fedpart.sweep.tables import (
    BLOCK_LABELS,
    METRIC_BLOCKS,
    CellResult,
    collect,
    csv_table,
    markdown_table,
    table_rows,
    write_tables,
)

__all__ = [
    "BLOCK_LABELS",
    "FINAL_STAGE_NOTE",
    "MANIFEST",
    "METRIC_BLOCKS",
    "Cell",
    "CellResult",
    "Job",
    "Progress",
    "Runner",
    "Sweep",
    "cells_of",
    "collect",
    "csv_table",
    "execute",
    "markdown_table",
    "parse_grid",
    "parse_seeds",
    "plan",
    "run_job",
    "run_sweep",
    "split_values",
    "table_rows",
    "write_tables",
]


def run_sweep(
    config: str,
    specs: Sequence[str],
    seeds: Sequence[int],
    *,
    out: str | os.PathLike | None = None,
    jobs: int = 2,
    ray_address: str | None = None,
    quiet: bool = False,
    runner: Runner = run_job,
) -> tuple[Sweep, str]:
    """Plan, run (skipping finished runs, resuming interrupted ones) and tabulate a sweep.

    Returns the sweep and its markdown table. The manifest is written before the first run and
    after every run that ends, so it always says which runs are finished.
    """
    sweep = plan(config, specs, seeds, out)
    sweep.path.mkdir(parents=True, exist_ok=True)
    outcomes: dict[Path, dict[str, Any]] = {}
    sweep.write_manifest(outcomes)
    if ray_address is None:
        from fedpart.config import load_config

        ray_address = load_config(config, sweep.fixed).engine.ray_address or None
    with Progress(sweep.jobs, enabled=not quiet, label=f"sweep {sweep.path.name}") as progress:

        def on_done(job: Job, outcome: dict[str, Any]) -> None:
            outcomes[job.run_dir] = outcome
            sweep.write_manifest(outcomes)
            progress.run_ended(job, outcome)

        outcomes.update(
            execute(
                sweep.jobs,
                config,
                workers=jobs,
                ray_address=ray_address,
                on_done=on_done,
                runner=runner,
            )
        )
    sweep.write_manifest(outcomes)
    return sweep, write_tables(sweep, collect(sweep))
