"""The checkpoint format: what of a run goes into its checkpoint directory, and back.

A checkpoint is one safetensors file of named tensors plus ``meta.json``
(:meth:`~fedpart.tracking.run_dir.RunDir.save_checkpoint` writes both atomically, with digests).
The tensor names say where each tensor lives:

- ``global/<key>``: the server's tensors (``store.global_state``);
- ``personal/<client>/<key>`` and ``tailored/<client>/<key>``: the store's per-client layers;
- ``late/<client>/<key>``: a straggler's upload, applied in the next round;
- ``extra/<name>``: the method's own tensors (``Algorithm.extra_state``).

``meta.json`` holds the counters, the metric rows so far, the config, the method's own values
and the stragglers' weights. The format is versioned by :data:`CHECKPOINT_FORMAT`; a run
resumes only from a checkpoint of that format.

Resuming (:func:`read_checkpoint`, then :func:`restore` into a freshly built simulation) is
shared by :func:`fedpart.resume` and the Flower server's resume.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch

from fedpart.config import Config, load_config
from fedpart.errors import ConfigError, FedpartError
from fedpart.tracking.run_dir import RunDir

CHECKPOINT_FORMAT = 1


def state_tensors(sim: Any) -> dict[str, torch.Tensor]:
    """Everything of ``sim`` that evolves over rounds, as flat named tensors."""
    out = {f"global/{k}": v for k, v in sim.store.global_state.items()}
    for c, state in sim.store.personal.items():
        out.update({f"personal/{c}/{k}": v for k, v in state.items()})
    for c, state in sim.store.tailored.items():
        out.update({f"tailored/{c}/{k}": v for k, v in state.items()})
    for c, (sent, _) in sim.late.items():
        out.update({f"late/{c}/{k}": v for k, v in sent.items()})
    extra_tensors, _ = sim.algorithm.extra_state()
    out.update({f"extra/{k}": v for k, v in extra_tensors.items()})
    return out


def checkpoint_meta(sim: Any) -> dict[str, Any]:
    """The checkpoint's ``meta.json``: counters, rows, config, method values, late weights."""
    _, extra_values = sim.algorithm.extra_state()
    return {
        "format": CHECKPOINT_FORMAT,
        "rounds_completed": sim.rounds_completed,
        "finished": sim.finished,
        "elapsed": sim.elapsed,
        "client_accuracy": sim.client_accuracy,
        "final_row": sim.final_row,
        "algorithm_state": extra_values,
        # the rows logged so far and the config: a resume rebuilds metrics.jsonl from the
        # checkpoint and notices a config.yaml edited since
        "rows": sim.rows,
        "config": json.loads(json.dumps(sim.cfg.to_dict(), default=str)),
        "late": {str(c): w for c, (_, w) in sim.late.items()},
    }


def save_checkpoint(sim: Any) -> None:
    """Write ``sim``'s checkpoint into its run directory (none: nothing to do). The tensors are
    ``sim.state_tensors()``, which a subclass may extend (Flower's node bookkeeping)."""
    if sim.run_dir is None:
        return
    meta = checkpoint_meta(sim)
    sim.run_dir.save_checkpoint(sim.state_tensors(), meta)


def check_fits(tensors: dict[str, torch.Tensor], ref: dict[str, torch.Tensor], n: int) -> None:
    """Refuse a checkpoint written for another model or method, naming the first misfit
    (``ref``: the model's tensors; ``n``: the number of clients)."""
    seen = set()
    for name, value in tensors.items():
        kind, _, rest = name.partition("/")
        if kind == "global":
            want = ref.get(rest)
            if want is None or want.shape != value.shape or want.dtype != value.dtype:
                got = f"{tuple(value.shape)} {value.dtype}"
                has = "no such tensor" if want is None else f"{tuple(want.shape)} {want.dtype}"
                raise FedpartError(
                    f"the checkpoint does not fit this config: {name} is {got}, the model "
                    f"has {has}; resume with the config the run was started with"
                )
            seen.add(rest)
        elif kind in ("personal", "tailored", "late"):
            client, _, key = rest.partition("/")
            # a late upload may carry what the method sends beside model tensors
            if not client.isdigit() or int(client) >= n or (key not in ref and kind != "late"):
                raise FedpartError(
                    f"the checkpoint does not fit this config: {name} names no client "
                    f"(0..{n - 1}) and model tensor; resume with the config the run was "
                    "started with"
                )
        elif kind != "extra":
            raise FedpartError(f"the checkpoint holds an unknown entry {name!r}")
    missing = sorted(set(ref) - seen)
    if missing:
        raise FedpartError(
            f"the checkpoint does not fit this config: it has no global/{missing[0]}; "
            "resume with the config the run was started with"
        )


def load_state(sim: Any, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    """Restore a checkpoint's tensors and counters into ``sim`` (on its device)."""
    if meta.get("format") != CHECKPOINT_FORMAT:
        raise FedpartError(f"checkpoint format {meta.get('format')} is not supported")
    store = sim.store
    check_fits(tensors, store.global_state, sim.data.num_clients)
    device = sim.device
    extra: dict[str, torch.Tensor] = {}
    late: dict[int, dict[str, torch.Tensor]] = {}
    for name, value in tensors.items():
        kind, rest = name.split("/", 1)
        if kind == "global":
            store.global_state[rest] = value.to(device)
        elif kind in ("personal", "tailored"):
            client, key = rest.split("/", 1)
            per_client = store.personal if kind == "personal" else store.tailored
            per_client.setdefault(int(client), {})[key] = value.to(device)
        elif kind == "late":
            client, key = rest.split("/", 1)
            late.setdefault(int(client), {})[key] = value.to(device)
        else:
            extra[rest] = value.to(device)
    late_weights = meta.get("late", {})
    sim.late = {c: (sent, float(late_weights[str(c)])) for c, sent in sorted(late.items())}
    sim.algorithm.load_extra_state(extra, meta.get("algorithm_state", {}))
    sim.rounds_completed = int(meta["rounds_completed"])
    sim.finished = bool(meta.get("finished", False))
    sim.elapsed = float(meta.get("elapsed", 0.0))
    sim.client_accuracy = list(meta.get("client_accuracy", []))
    sim.final_row = meta.get("final_row")


# ------------------------------------------------------------------ resuming
def run_directory(path: str | Path) -> RunDir:
    """The run directory at ``path``, refused in one line unless it holds a run."""
    rd = RunDir(path)
    if not rd.path.is_dir():
        raise FedpartError(f"{rd.path}: no such run directory")
    if not (rd.path / "config.yaml").is_file():
        raise FedpartError(f"{rd.path}: not a fedpart run directory (no config.yaml)")
    return rd


def read_checkpoint(
    rd: RunDir, overrides: list[str]
) -> tuple[Config, dict[str, Any] | None, dict[str, Any] | None]:
    """The config to resume ``rd`` with (its config.yaml and ``overrides``), and the tensors and
    meta of its newest sound checkpoint (``None`` before the first); nothing is changed."""
    config_path = rd.path / "config.yaml"
    try:
        file_cfg = load_config(config_path)
    except ConfigError as exc:
        raise ConfigError("", f"{config_path}: {exc}") from exc
    tensors: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None
    if rd.has_checkpoint():
        tensors, meta = rd.load_checkpoint()
        check_config_unchanged(config_path, file_cfg, meta, overrides)
    else:
        print("notice: no checkpoint yet; starting again from round 0", file=sys.stderr)
    cfg = file_cfg.with_overrides(overrides) if overrides else file_cfg
    check_engine_taken(config_path, cfg, overrides)
    return cfg, tensors, meta


def check_engine_taken(config_path: Path, cfg: Config, overrides: list[str]) -> None:
    """Refuse to connect to the Ray cluster a run directory's config.yaml names unless the
    caller names it too (a run directory from elsewhere must not send the work to a machine
    the caller did not ask for)."""
    given = {o.split("=", 1)[0].strip() for o in overrides}
    address = cfg.engine.ray_address
    if address and "engine.ray_address" not in given:
        raise ConfigError(
            "engine.ray_address",
            f"{config_path} resumes on the Ray cluster at {address!r}; pass "
            f"engine.ray_address={address} to resume there, or engine.ray_address= (empty) to run "
            "here",
        )


def engine_taken(cfg: Config, overrides: list[str]) -> str:
    """The ``engine.*`` settings a resume takes from the run's config.yaml (not overridden)."""
    given = {o.split("=", 1)[0].strip() for o in overrides}
    keys = ("backend", "device", "threads", "workers", "deterministic")
    return ", ".join(
        f"engine.{k}={getattr(cfg.engine, k)}" for k in keys if f"engine.{k}" not in given
    )


def restore(
    sim: Any, rd: RunDir, tensors: dict[str, Any] | None, meta: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """Load the checkpoint into ``sim`` (built from :func:`read_checkpoint`'s config), which
    then writes ``rd`` (the handle holding its lock); returns the rows of the rounds before the
    checkpoint's, for ``sim.rows`` and metrics.jsonl. Nothing in ``rd`` is changed."""
    sim.run_dir = rd
    sim.resumed = True
    rounds = sim.cfg.federation.rounds
    if meta is not None and tensors is not None:
        done = meta["rounds_completed"]
        if done > rounds:
            raise FedpartError(
                f"federation.rounds={rounds} is fewer than the {done} rounds "
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
    if sim.rounds_completed < rounds:
        sim.finished = False
        sim.final_row = None
    return recovered_rows(rd, sim.rounds_completed, meta)


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and prefix.count(".") < 1:
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def check_config_unchanged(
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


def recovered_rows(rd: RunDir, done: int, meta: dict[str, Any] | None) -> list[dict[str, Any]]:
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
