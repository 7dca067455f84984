"""The Python API: ``fedpart.run(config) -> Result`` and ``fedpart.resume(dir)``."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from fedpart.config import Config, dump_config, load_config
from fedpart.engine.simulation import Result, Simulation
from fedpart.errors import ConfigError, FedpartError
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
    rd = RunDir(run_dir)
    if not rd.path.is_dir():
        raise FedpartError(f"{rd.path}: no such run directory")
    if not (rd.path / "config.yaml").is_file():
        raise FedpartError(f"{rd.path}: not a fedpart run directory (no config.yaml)")
    rd.acquire()
    try:
        return _resume_locked(rd, list(overrides or []), quiet)
    finally:
        rd.release()


def _resume_locked(rd: RunDir, overrides: list[str], quiet: bool) -> Result:
    config_path = rd.path / "config.yaml"
    try:
        file_cfg = load_config(config_path)
    except ConfigError as exc:
        raise ConfigError("", f"{config_path}: {exc}") from exc
    tensors: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None
    if rd.has_checkpoint():
        tensors, meta = rd.load_checkpoint()
        _check_config_unchanged(config_path, file_cfg, meta, overrides)
    else:
        print("notice: no checkpoint yet; starting again from round 0", file=sys.stderr)
    cfg = file_cfg.with_overrides(overrides) if overrides else file_cfg
    sim = Simulation(cfg, run_dir=rd.path, quiet=quiet)
    sim.run_dir = rd  # the handle that holds the lock
    sim.resumed = True
    if meta is not None and tensors is not None:
        done = meta["rounds_completed"]
        if done > cfg.federation.rounds:
            raise FedpartError(
                f"federation.rounds={cfg.federation.rounds} is fewer than the {done} rounds "
                f"{rd.path} has completed; give federation.rounds={done} or more"
            )
        try:
            sim.load_state(tensors, meta)
        except FedpartError:
            raise
        except (KeyError, ValueError, TypeError, IndexError, RuntimeError) as exc:
            raise FedpartError(
                f"{rd.path}: the checkpoint does not fit this config ({type(exc).__name__}: "
                f"{exc}); resume with the config the run was started with"
            ) from exc
    if sim.rounds_completed < cfg.federation.rounds:
        sim.finished = False
        sim.final_row = None
    rows = _recovered_rows(rd, sim.rounds_completed, meta)
    if crash_point("resume.loaded"):
        crash()
    sim.rows = rows
    rd.write_metrics(rows + ([sim.final_row] if sim.finished and sim.final_row else []))
    if crash_point("resume.metrics"):
        crash()
    if overrides:
        rd.write_text("config.yaml", dump_config(cfg))
    return sim.run()


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and prefix.count(".") < 1:
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _check_config_unchanged(
    path: Path, file_cfg: Config, meta: dict[str, Any], overrides: list[str]
) -> None:
    """Refuse a config.yaml whose values differ from those its checkpoint was written under,
    unless this command's overrides restate each change (a hand edit or a damaged file would
    otherwise silently change the run)."""
    saved = meta.get("config")
    if not isinstance(saved, dict):
        return  # a checkpoint of an older version: no record to compare with
    now = _flat(json.loads(json.dumps(file_cfg.to_dict(), default=str)))
    then = _flat(saved)
    given = {o.split("=", 1)[0].strip() for o in overrides}
    for key in sorted(now.keys() & then.keys()):
        if now[key] != then[key] and key not in given:
            raise FedpartError(
                f"{path} differs from the config of its checkpoint at {key} "
                f"({_short(now[key])}, checkpoint {_short(then[key])}); restore it, or restate "
                f"the change on the command line: fedpart run --resume {path.parent} "
                f"{key}={_short(now[key])}"
            )


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _recovered_rows(rd: RunDir, done: int, meta: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The metrics rows of the rounds before the checkpoint's.

    A checkpoint carries its own copy (``meta.rows``); a ``metrics.jsonl`` that disagrees with it
    below a torn last line was damaged or edited and is named in a notice. For a checkpoint of an
    older version the rows come from ``metrics.jsonl`` itself.
    """
    path = rd.path / "metrics.jsonl"
    try:
        file_rows, bad = rd.read_metrics()
    except OSError as exc:
        raise FedpartError(f"{path}: cannot read ({exc.strerror})") from exc
    logged = [r for r in file_rows if r["round"] < done and r.get("stage") is None]
    if meta is None:
        return []
    saved = meta.get("rows")
    if saved is not None:
        rows = [r for r in saved if r["round"] < done and r.get("stage") is None]
        # compared as JSON text: a NaN loss is equal to itself there
        differs = json.dumps(logged) != json.dumps(rows[: len(logged)])
        if differs or (bad is not None and len(logged) < len(rows)):
            where = f" (line {bad} damaged)" if bad is not None else ""
            print(
                f"notice: {path} did not match its checkpoint's record of rounds 0-{done - 1}"
                f"{where}; rewritten from the checkpoint",
                file=sys.stderr,
            )
        return rows
    if bad is not None and len(logged) < done:
        raise FedpartError(
            f"{path}:{bad} is damaged and the checkpoint (of an older version) keeps no copy of "
            "the rows; repair or delete that line and resume again"
        )
    return logged
