"""The Python API: ``fedpart.run(config) -> Result`` and ``fedpart.resume(dir)``."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from fedpart.config import Config, dump_config, load_config
from fedpart.engine.checkpoint import read_checkpoint, restore, run_directory
from fedpart.engine.simulation import Result, Simulation
from fedpart.errors import FedpartError
from fedpart.tracking.faults import crash, crash_point
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

    ``overrides`` may change e.g. ``federation.rounds`` to extend a finished run. The newest
    checkpoint that passes its digests is used (a damaged one is named in a notice on stderr);
    ``metrics.jsonl`` is rebuilt from it, so a torn last line or the rows of rounds after the
    checkpoint are rewritten exactly as an uninterrupted run writes them. A run killed before its
    first checkpoint starts again from round 0. Nothing in the directory is changed before every
    check has passed. Raises :class:`fedpart.errors.FedpartError` (one line) on a problem.
    """
    rd = run_directory(run_dir)
    rd.acquire()
    try:
        return _resume_locked(rd, list(overrides or []), quiet)
    finally:
        rd.release()


def _resume_locked(rd: RunDir, overrides: list[str], quiet: bool) -> Result:
    cfg, tensors, meta = read_checkpoint(rd, overrides)
    sim = Simulation(cfg, run_dir=rd.path, quiet=quiet)
    rows = restore(sim, rd, tensors, meta)
    if crash_point("resume.loaded"):
        crash()
    sim.rows = rows
    rd.write_metrics(rows + ([sim.final_row] if sim.finished and sim.final_row else []))
    if crash_point("resume.metrics"):
        crash()
    if overrides:
        rd.write_text("config.yaml", dump_config(cfg))
    return sim.run()
