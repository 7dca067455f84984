"""Load finished runs and compare them: a markdown table and PNG plots.

A run directory holds ``summary.json`` (required), ``metrics.jsonl``, ``clients.json`` and
``config.yaml`` as written by :mod:`fedpart.tracking`. Plots use matplotlib's Agg canvas directly
(no pyplot, no global backend switch), imported inside the functions to keep imports fast.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedpart.errors import FedpartError


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
        return [float(v) for v in values if _is_number(v)]


def _is_number(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


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
            lines = metrics_path.read_bytes().split(b"\n")
        except OSError as exc:
            raise FedpartError(f"{metrics_path}: cannot read ({exc.strerror})") from exc
        if lines[-1]:
            lines = lines[:-1]  # a last line without its newline: a run killed mid-append
        for lineno, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line.decode("utf-8"))
            except ValueError as exc:
                raise FedpartError(f"{metrics_path}:{lineno}: not valid JSON ({exc})") from exc
            if isinstance(row, dict):
                metrics.append(row)
    clients = _read_json(p / "clients.json") if (p / "clients.json").is_file() else None
    config = None
    if (p / "config.yaml").is_file():
        import yaml

        try:
            loaded = yaml.safe_load((p / "config.yaml").read_bytes().decode("utf-8"))
        except (OSError, ValueError, yaml.YAMLError, RecursionError) as exc:
            raise FedpartError(f"{p / 'config.yaml'}: cannot read (not UTF-8 YAML)") from exc
        config = loaded if isinstance(loaded, dict) else None
    return RunRecord(
        path=p.resolve(),
        summary=summary,
        metrics=metrics,
        clients=clients if isinstance(clients, dict) else None,
        config=config,
    )


# ------------------------------------------------------------------------------- table
def _stat(summary: dict[str, Any], key: str, stat: str) -> Any:
    block = summary.get(key)
    if not isinstance(block, dict):
        return None
    if stat == "last10_mean" and block.get(stat) is None:
        for k, v in block.items():  # last{k}_mean written with another window
            if k.startswith("last") and k.endswith("_mean") and v is not None:
                return v
    return block.get(stat)


def _pct(value: Any) -> str:
    return f"{100 * float(value):.2f}" if _is_number(value) else "-"


def _mb(value: Any) -> str:
    return f"{float(value) / 1e6:.2f}" if _is_number(value) else "-"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _labels(runs: Sequence[RunRecord]) -> list[str]:
    """Run names, made unique by prefixing parent directories where two runs share a name."""
    names = [r.name for r in runs]
    for depth in range(1, 4):
        dupes = {n for n in names if names.count(n) > 1}
        if not dupes:
            break
        names = [
            "/".join(r.path.parts[-(depth + 1) :]) if n in dupes else n
            for n, r in zip(names, runs, strict=True)
        ]
    return names


def compare_table(runs: Sequence[RunRecord]) -> str:
    """A markdown table with one row per run.

    Columns: run, algorithm, final / best (round) / last-10 mean personalised accuracy (%),
    sample-weighted final accuracy (%), a global-model final accuracy column when any run has
    one, uploaded and downloaded megabytes (10^6 bytes), and wall-clock seconds.
    """
    has_global = any(_stat(r.summary, "global_accuracy", "final") is not None for r in runs)
    header = [
        "run",
        "algorithm",
        "final acc %",
        "best acc % (round)",
        "last-10 mean %",
        "weighted final %",
    ]
    if has_global:
        header.append("global final %")
    header += ["up MB", "down MB", "wall s"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for run, label in zip(runs, _labels(runs), strict=True):
        s = run.summary
        best = _pct(_stat(s, "accuracy", "best"))
        best_round = _stat(s, "accuracy", "best_round")
        if best != "-" and best_round is not None:
            best += f" ({best_round})"
        comm = s.get("communication") if isinstance(s.get("communication"), dict) else {}
        wall = s.get("wall_seconds")
        row = [
            _cell(label),
            _cell(run.algorithm),
            _pct(_stat(s, "accuracy", "final")),
            best,
            _pct(_stat(s, "accuracy", "last10_mean")),
            _pct(_stat(s, "accuracy_weighted", "final")),
        ]
        if has_global:
            row.append(_pct(_stat(s, "global_accuracy", "final")))
        row += [
            _mb(comm.get("up_bytes")),
            _mb(comm.get("down_bytes")),
            f"{float(wall):.1f}" if _is_number(wall) else "-",
        ]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------- plots
def _figure(width: float = 8.0, height: float = 5.0, ncols: int = 1) -> tuple[Any, list[Any]]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(1, ncols, i + 1) for i in range(ncols)]
    return fig, axes


def _save(fig: Any, path: str | os.PathLike) -> None:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, format="png")


def _series(
    run: RunRecord, key: str
) -> tuple[list[float], list[float], tuple[float, float] | None]:
    """(rounds, accuracy %) of the evaluated rounds, and the post-training ("final" stage) point."""
    xs, ys, final = [], [], None
    for row in run.metrics:
        value, rnd = row.get(key), row.get("round")
        if not _is_number(value) or not _is_number(rnd):
            continue
        if row.get("stage") == "final":
            final = (float(rnd), 100 * float(value))
        else:
            xs.append(float(rnd))
            ys.append(100 * float(value))
    return xs, ys, final


def plot_accuracy(runs: Sequence[RunRecord], path: str | os.PathLike) -> None:
    """PNG of personalised accuracy vs round, one line per run.

    The global model's accuracy is drawn dashed in the run's colour where recorded, and a
    post-training evaluation (``"stage": "final"``) as a cross.
    """
    from matplotlib.ticker import MaxNLocator

    fig, (ax,) = _figure()
    colors = [f"C{i % 10}" for i in range(len(runs))]
    plotted = False
    for run, label, color in zip(runs, _labels(runs), colors, strict=True):
        xs, ys, final = _series(run, "accuracy")
        if xs:
            ax.plot(xs, ys, color=color, label=label, marker="." if len(xs) < 30 else None)
            plotted = True
        if final is not None:
            ax.plot(
                *final,
                color=color,
                marker="x",
                markersize=8,
                label=None if xs else label,
                linestyle="none",
            )
            plotted = True
        gx, gy, _ = _series(run, "global_accuracy")
        if gx:
            ax.plot(gx, gy, color=color, linestyle="--", label=f"{label} (global model)")
    if not plotted:
        ax.text(0.5, 0.5, "no evaluated rounds", ha="center", va="center", transform=ax.transAxes)
    else:
        ax.legend(fontsize="small")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("round")
    ax.set_ylabel("accuracy (%)")
    ax.set_title("personalised test accuracy (mean over clients)")
    ax.grid(True, alpha=0.3)
    _save(fig, path)


def plot_client_accuracy(runs: Sequence[RunRecord], path: str | os.PathLike) -> None:
    """PNG of the final per-client accuracies: sorted per run (left) and as box plots (right)."""
    from matplotlib.ticker import MaxNLocator

    fig, (left, right) = _figure(width=12.0, ncols=2)
    data = [
        (label, [100 * a for a in run.client_accuracies()])
        for run, label in zip(runs, _labels(runs), strict=True)
    ]
    data = [(label, acc) for label, acc in data if acc]
    if not data:
        for ax in (left, right):
            ax.text(
                0.5,
                0.5,
                "no per-client accuracies (clients.json)",
                ha="center",
                va="center",
                transform=ax.transAxes,
            )
    else:
        for i, (label, acc) in enumerate(data):
            left.plot(range(len(acc)), sorted(acc), color=f"C{i % 10}", label=label)
        left.legend(fontsize="small")
        right.boxplot([acc for _, acc in data], showmeans=True)
        right.set_xticks(range(1, len(data) + 1))
        right.set_xticklabels(
            [label for label, _ in data], rotation=30, ha="right", fontsize="small"
        )
    left.xaxis.set_major_locator(MaxNLocator(integer=True))
    left.set_xlabel("client (sorted by accuracy)")
    left.set_ylabel("final accuracy (%)")
    left.set_title("per-client accuracy, sorted")
    right.set_ylabel("final accuracy (%)")
    right.set_title("per-client accuracy distribution")
    for ax in (left, right):
        ax.grid(True, alpha=0.3)
    _save(fig, path)


def _default_out_dir(runs: Sequence[RunRecord]) -> Path:
    try:
        return Path(os.path.commonpath([str(r.path.resolve().parent) for r in runs]))
    except ValueError:  # e.g. different drives
        return Path.cwd()


def report(paths: Sequence[str | os.PathLike], out_dir: str | os.PathLike | None = None) -> str:
    """Compare the runs in ``paths``: return the markdown table, write the plots.

    Writes ``accuracy.png`` (accuracy vs round) and ``clients.png`` (per-client accuracies) into
    ``out_dir``, by default the runs' common parent directory.

    Raises:
        FedpartError: no path given, or a path is not a run directory.
    """
    if not paths:
        raise FedpartError("report: no run directories given")
    runs = [load_run(p) for p in paths]
    out = Path(out_dir) if out_dir is not None else _default_out_dir(runs)
    out.mkdir(parents=True, exist_ok=True)
    plot_accuracy(runs, out / "accuracy.png")
    plot_client_accuracy(runs, out / "clients.png")
    return compare_table(runs)
