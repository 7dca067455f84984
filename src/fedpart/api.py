"""The Python API: ``fedpart.run(config) -> Result`` and ``fedpart.resume(dir)``."""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from fedpart.config import Config, dump_config, load_config
from fedpart.data.registry import DatasetBundle, register_dataset
from fedpart.engine.checkpoint import engine_taken, read_checkpoint, restore, run_directory
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


def output_path(
    cfg: Config, template: str | None = None, *, algorithm: str | None = None, stamp: str = ""
) -> Path:
    """``output.dir`` (or ``template``) with its ``{algorithm}``, ``{dataset}``, ``{seed}``,
    ``{time}`` filled in (``algorithm``, ``stamp``: in place of the config's and now); a
    placeholder that is none of these is one line."""
    template = cfg.output.dir if template is None else template
    try:
        return Path(
            template.format(
                algorithm=algorithm or cfg.algorithm.name,
                dataset=cfg.dataset.name,
                seed=cfg.seed,
                time=stamp or time.strftime("%Y%m%d-%H%M%S"),
            )
        )
    except (KeyError, IndexError, ValueError, AttributeError, TypeError) as exc:
        raise FedpartError(
            f"output.dir: bad placeholder in {template!r} ({type(exc).__name__}: {exc}); "
            "valid placeholders: {algorithm}, {dataset}, {seed}, {time}"
        ) from exc


def run(
    config: Config | dict[str, Any] | str | os.PathLike,
    overrides: list[str] | None = None,
    *,
    quiet: bool = True,
    write: bool = True,
    data: DatasetBundle | tuple | None = None,
) -> Result:
    """Run an experiment.

    ``config`` is a :class:`Config`, a nested dict or a YAML path; ``overrides`` are dotted
    ``key=value`` strings. With ``write`` the run directory (``output.dir``) receives the
    resolved config, ``metrics.jsonl``, ``summary.json``, ``clients.json`` and checkpoints.

    ``data`` runs on in-memory data instead of ``dataset.name``'s: a :class:`DatasetBundle`,
    or ``(x, y)`` / ``(x, y, x_test, y_test)`` tensors or arrays (images ``[N, C, H, W]`` or
    features ``[N, D]``; labels ``0..K-1``), partitioned by the config as any dataset. The run
    records ``dataset.name: memory`` (or the bundle's name); to resume it in another process,
    register the dataset in a plugin instead (docs/extending.md).
    Raises :class:`fedpart.errors.FedpartError` subclasses on bad input.
    """
    if data is not None:
        name = in_memory(data)
        overrides = [*(overrides or []), f"dataset.name={name}", "dataset.download=false"]
    cfg = _as_config(config, overrides)
    sim = Simulation(cfg, run_dir=output_path(cfg) if write else None, quiet=quiet)
    return sim.run()


def run_into(
    config: Config | dict[str, Any] | str | os.PathLike,
    overrides: list[str] | None,
    run_dir: str | os.PathLike,
    *,
    quiet: bool = True,
) -> Result:
    """Run into ``run_dir`` exactly as given (``fedpart compare`` and ``fedpart sweep`` have
    filled in its placeholders already: a brace in it is a brace); the run's config.yaml records
    it as ``output.dir``. ``run_dir`` is set on the config, never parsed as an override."""
    cfg = _as_config(config, overrides)
    cfg = dataclasses.replace(cfg, output=dataclasses.replace(cfg.output, dir=str(run_dir)))
    return Simulation(cfg, run_dir=Path(run_dir), quiet=quiet).run()


def in_memory(data: DatasetBundle | tuple | list) -> str:
    """Register in-memory ``data`` as a dataset (``memory``, or the bundle's own name); its
    name."""
    if isinstance(data, DatasetBundle):
        bundle = data
        name = data.name
        classes, shape = data.num_classes, tuple(data.input_shape)
        mean, std, augment = data.mean, data.std, data.augment
    else:
        if not isinstance(data, tuple | list) or len(data) not in (2, 4):
            raise FedpartError("data: expected a DatasetBundle, (x, y) or (x, y, x_test, y_test)")
        bundle = tuple(data)
        name = "memory"
        x = torch.as_tensor(data[0])
        labels = [torch.as_tensor(data[i]).reshape(-1) for i in range(1, len(data), 2)]
        classes = int(max(int(y.max()) for y in labels if len(y))) + 1
        shape = tuple(x.shape[1:]) if x.dim() != 3 else (1, *x.shape[1:])
        mean = std = ()
        augment = "none"

    def load(root: Any, download: bool) -> Any:
        return bundle

    register_dataset(
        name,
        num_classes=max(classes, 2),
        input_shape=shape,
        description="in-memory data given to fedpart.run",
        mean=mean,
        std=std,
        augment=augment,
    )(load)
    return name


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
        return resume_locked(rd, list(overrides or []), quiet)
    finally:
        rd.release()


def resume_locked(
    rd: RunDir,
    overrides: list[str],
    quiet: bool,
    build: Callable[[Config, Path], Simulation] | None = None,
    ready: Callable[[Simulation], None] | None = None,
) -> Result:
    """Continue the run in the locked directory ``rd``. ``build(cfg, path)`` makes the
    simulation (default: a :class:`Simulation`) and ``ready(sim)``, when given, runs once its
    state is restored and before anything in the directory changes (the Flower server
    connects its nodes there)."""
    cfg, tensors, meta = read_checkpoint(rd, overrides)
    if build is None:
        sim = Simulation(cfg, run_dir=rd.path, quiet=quiet)
    else:
        sim = build(cfg, rd.path)
    rows = restore(sim, rd, tensors, meta)
    if ready is not None:
        ready(sim)
    if not quiet:
        print(f"resuming with {engine_taken(cfg, overrides)} from {rd.path / 'config.yaml'}",
              file=sys.stderr)  # fmt: skip
    if crash_point("resume.loaded"):
        crash()
    sim.rows = rows
    rd.write_metrics(rows + ([sim.final_row] if sim.finished and sim.final_row else []))
    if crash_point("resume.metrics"):
        crash()
    if overrides:
        rd.write_text("config.yaml", dump_config(cfg))
    return sim.run()
