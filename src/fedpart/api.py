"""The Python API: ``fedpart.run(config) -> Result`` and ``fedpart.resume(dir)``."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from fedpart.config import Config, load_config
from fedpart.engine.simulation import Result, Simulation
from fedpart.errors import FedpartError
from fedpart.tracking.run_dir import RunDir


def _as_config(
    config: Config | dict[str, Any] | str | os.PathLike, overrides: list[str] | None
) -> Config:
    if isinstance(config, Config):
        return config.with_overrides(overrides) if overrides else config
    if isinstance(config, dict):
        cfg = Config.from_dict(config)
        return cfg.with_overrides(overrides) if overrides else cfg
    return load_config(config, overrides)


def output_path(cfg: Config) -> Path:
    """``output.dir`` with its ``{algorithm}``, ``{dataset}``, ``{seed}``, ``{time}`` filled in."""
    try:
        return Path(
            cfg.output.dir.format(
                algorithm=cfg.algorithm.name,
                dataset=cfg.dataset.name,
                seed=cfg.seed,
                time=time.strftime("%Y%m%d-%H%M%S"),
            )
        )
    except (KeyError, IndexError, ValueError) as exc:
        raise FedpartError(
            f"output.dir: bad placeholder in {cfg.output.dir!r}; use {{algorithm}}, {{dataset}}, {{seed}}, {{time}}"
        ) from exc


def run(
    config: Config | dict[str, Any] | str | os.PathLike,
    overrides: list[str] | None = None,
    *,
    quiet: bool = True,
    write: bool = True,
) -> Result:
    """Run an experiment.

    ``config`` is a :class:`Config`, a nested dict or a YAML path; ``overrides`` are dotted
    ``key=value`` strings. With ``write`` the run directory (``output.dir``) receives the
    resolved config, ``metrics.jsonl``, ``summary.json``, ``clients.json`` and checkpoints.
    Raises :class:`fedpart.errors.FedpartError` subclasses on bad input.
    """
    cfg = _as_config(config, overrides)
    sim = Simulation(cfg, run_dir=output_path(cfg) if write else None, quiet=quiet)
    return sim.run()


def resume(
    run_dir: str | os.PathLike, overrides: list[str] | None = None, *, quiet: bool = True
) -> Result:
    """Continue a stopped run from its last checkpoint; ends bit-identical to an uninterrupted run.

    ``overrides`` may change e.g. ``federation.rounds`` to extend a finished run.
    """
    rd = RunDir(run_dir)
    if not (rd.path / "config.yaml").is_file():
        raise FedpartError(f"{rd.path}: not a fedpart run directory (no config.yaml)")
    cfg = load_config(rd.path / "config.yaml", overrides)
    sim = Simulation(cfg, run_dir=rd.path, quiet=quiet)
    tensors, meta = rd.load_checkpoint()
    sim.load_state(tensors, meta)
    if sim.rounds_completed < cfg.federation.rounds:
        sim.finished = False
        sim.final_row = None
    rows = []
    metrics = rd.path / "metrics.jsonl"
    if metrics.is_file():
        for line in metrics.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                if row["round"] < sim.rounds_completed and row.get("stage") is None:
                    rows.append(row)
    sim.rows = rows
    rd.write_metrics(rows + ([sim.final_row] if sim.finished and sim.final_row else []))
    if overrides:
        from fedpart.config import dump_config

        rd.write_text("config.yaml", dump_config(cfg))
    return sim.run()
