"""Finished runs read back: a run directory's ``summary.json`` (required), ``metrics.jsonl``
(through :func:`fedpart.tracking.metrics.parse_metrics`), ``clients.json`` and ``config.yaml``
as written by :mod:`fedpart.tracking`, and the run directories named by paths."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedpart.errors import FedpartError
from fedpart.formatting import is_number
from fedpart.tracking.metrics import MetricsLineError, parse_metrics


@dataclass
class RunRecord:
    """The files of one finished (or interrupted) run."""

    path: Path
    summary: dict[str, Any]
    metrics: list[dict[str, Any]] = field(default_factory=list)
    clients: dict[str, Any] | None = None
    config: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        """The run's directory name, or its algorithm when the directory has no name."""
        return self.path.name or str(self.summary.get("algorithm", "run"))

    @property
    def algorithm(self) -> str:
        return str(self.summary.get("algorithm", "?"))

    @property
    def dataset(self) -> str:
        return str(self.summary.get("dataset", "?"))

    def client_accuracies(self) -> list[float]:
        """Final per-client accuracies (fractions), without missing values."""
        values = (self.clients or {}).get("client_accuracy") or []
        return [float(v) for v in values if is_number(v)]


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError) as exc:
        raise FedpartError(f"{path}: cannot read ({exc})") from exc


def load_run(path: str | os.PathLike) -> RunRecord:
    """Read a run directory (or the path of its ``summary.json``).

    Raises:
        FedpartError: the directory has no ``summary.json`` or one of its files is corrupted.
    """
    p = Path(path)
    if p.is_file() and p.name == "summary.json":
        p = p.parent
    summary_path = p / "summary.json"
    if not summary_path.is_file():
        why = "does not exist" if not p.exists() else "has no summary.json"
        raise FedpartError(f"not a fedpart run directory: {p} ({why})")
    summary = _read_json(summary_path)
    if not isinstance(summary, dict):
        raise FedpartError(f"{summary_path}: expected a JSON object")
    metrics: list[dict[str, Any]] = []
    metrics_path = p / "metrics.jsonl"
    if metrics_path.is_file():
        try:
            data = metrics_path.read_bytes()
        except OSError as exc:
            raise FedpartError(f"{metrics_path}: cannot read ({exc.strerror})") from exc
        try:
            metrics = [row for _, row in parse_metrics(data) if isinstance(row, dict)]
        except MetricsLineError as exc:
            raise FedpartError(
                f"{metrics_path}:{exc.line}: not valid JSON ({exc.error})"
            ) from exc.error
    clients = _read_json(p / "clients.json") if (p / "clients.json").is_file() else None
    config = None
    if (p / "config.yaml").is_file():
        import yaml

        try:
            loaded = yaml.safe_load((p / "config.yaml").read_bytes().decode("utf-8"))
        except (OSError, ValueError, yaml.YAMLError, RecursionError) as exc:
            raise FedpartError(f"{p / 'config.yaml'}: cannot read (not UTF-8 YAML)") from exc
        config = loaded if isinstance(loaded, dict) else None
    if config and isinstance(config.get("plugins"), list):
        _import_plugins(config["plugins"], p / "config.yaml")
    return RunRecord(
        path=p.resolve(),
        summary=summary,
        metrics=metrics,
        clients=clients if isinstance(clients, dict) else None,
        config=config,
    )


def _import_plugins(names: list[Any], where: Path) -> None:
    """The plugins a run was made with, so its method is known by its setting; one that
    cannot be imported is a notice (the table needs only the run's files)."""
    from fedpart.plugins import load_plugins

    try:
        load_plugins([str(n) for n in names], f"plugins of {where}")
    except FedpartError as exc:
        print(f"notice: {exc}", file=sys.stderr)


def find_runs(paths: Sequence[str | os.PathLike]) -> list[Path]:
    """The run directories named by ``paths``, in order, each once.

    A run directory (or its ``summary.json``) stands for itself; a folder without a
    ``summary.json`` — a sweep or compare folder — for every run below it (sorted); other files
    (the report's own PNGs, tables) are skipped.

    Raises:
        FedpartError: a path does not exist, or a folder has no run in or below it.
    """
    found: list[Path] = []
    for given in paths:
        p = Path(given)
        if not p.exists():
            raise FedpartError(f"not a fedpart run directory: {p} (does not exist)")
        if p.is_file():
            if p.name == "summary.json":
                found.append(p.parent)
            continue
        if (p / "summary.json").is_file():
            found.append(p)
            continue
        below = sorted(
            s.parent for s in p.rglob("summary.json") if "checkpoint" not in s.parent.name
        )
        if not below:
            raise FedpartError(f"not a fedpart run directory: {p} (no summary.json in or below it)")
        found.extend(below)
    unique: list[Path] = []
    seen: set[Path] = set()
    for run in found:
        if run.resolve() not in seen:
            seen.add(run.resolve())
            unique.append(run)
    return unique
