"""Load finished runs and compare them: a markdown table and PNG plots.

A run directory holds ``summary.json`` (required), ``metrics.jsonl``, ``clients.json`` and
``config.yaml`` as written by :mod:`fedpart.tracking`. Plots use matplotlib's Agg canvas directly
(no pyplot, no global backend switch), imported inside the functions to keep imports fast.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

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


def has_final_stage(metrics: Sequence[dict[str, Any]]) -> bool:
    """Whether a run's ``final`` accuracy comes from a stage after the federated rounds (the
    fine-tuning of FedBABU and fedseqlayer): a ``"stage": "final"`` row after evaluated rounds."""
    evaluated = any(r.get("stage") is None and r.get("accuracy") is not None for r in metrics)
    return evaluated and any(r.get("stage") == "final" for r in metrics)


def _model_of(run: RunRecord) -> str | None:
    """The model a run trained, as ``name(option=value, ...)`` with the options it was built
    with (``summary.json``'s ``model_options``: the config's, the method's defaults included);
    None for a run that did not record them."""
    s = run.summary
    options = s.get("model_options")
    if not isinstance(options, dict) or not isinstance(s.get("model"), str):
        return None
    inner = ", ".join(f"{k}={options[k]}" for k in sorted(options))
    return f"{s['model']}({inner})"


#: what a comparison holds fixed besides the method: summary.json's record of each
SETUP_FIELDS = ("dataset", "model", "rounds", "seed", "backend")


def _setup(run: RunRecord) -> dict[str, str | None]:
    s = run.summary
    values = {
        "dataset": s.get("dataset"),
        "model": _model_of(run),
        "rounds": s.get("rounds_completed"),
        "seed": s.get("seed"),
        "backend": s.get("backend"),
    }
    return {k: None if v is None else str(v) for k, v in values.items()}


class Setup(NamedTuple):
    """What the runs of a table share and where they differ (besides the method)."""

    #: per run, `` ‡`` when it differs from most runs in anything but the method
    marks: list[str]
    #: the fields that differ between runs, one table column each
    columns: list[str]
    #: the footnote naming what differs, or None
    note: str | None
    #: one line with what every run shares, or None
    shared: str | None


def setup_marks(runs: Sequence[RunRecord]) -> Setup:
    """Compare the runs' dataset, model (with options), rounds, seed and backend: a run that
    differs from most runs in any of them is marked ``‡``, the differing fields become columns,
    and a footnote names what differs (FedBN's and FedAP's BatchNorm variant of the model is
    such a difference: their accuracy is then not that of the method alone)."""
    setups = [_setup(r) for r in runs]
    marks = [""] * len(runs)
    columns, differences, shared = [], [], []
    labels = _labels(runs)
    for name in SETUP_FIELDS:
        values = [s[name] for s in setups]
        known = [v for v in values if v is not None]
        if not known:
            continue
        if len(set(known)) < 2:
            shared.append(f"{name} {known[0]}")
            continue
        columns.append(name)
        common = max(set(known), key=known.count)
        others = []
        for i, v in enumerate(values):
            if v is not None and v != common:
                marks[i] = " ‡"
                why = ""
                if name == "model" and _method_model_defaults(runs[i]):
                    why = ", the method's own model defaults"
                others.append(f"{labels[i]}: {v}{why}")
        differences.append(f"{name} (most runs: {common}; {'; '.join(others)})")
    note = None
    if differences:
        note = (
            "‡ differs from the other runs in more than the method — "
            + "; ".join(differences)
            + ": its accuracy is not comparable with the rest of the table as a method alone."
        )
    line = "All runs: " + ", ".join(shared) + "." if shared else None
    return Setup(marks, columns, note, line)


def _method_model_defaults(run: RunRecord) -> bool:
    from fedpart.registry import methods

    cls = methods().get(run.algorithm)
    return bool(getattr(cls, "model_defaults", None))


FINAL_STAGE_NOTE = (
    "† final is measured after the method's final fine-tuning stage (FedBABU, fedseqlayer); "
    "best and last-k are over the federated rounds before it."
)


def compare_table(runs: Sequence[RunRecord]) -> str:
    """A markdown table with one row per run.

    Columns: run, algorithm, final / best (round) / last-10 mean personalised accuracy (%),
    sample-weighted final accuracy (%), a global-model final accuracy column when any run has
    one, uploaded and downloaded megabytes (10^6 bytes), and wall-clock seconds. A final
    accuracy measured after a final fine-tuning stage is marked ``†``, with a footnote under
    the table (best and last-10 do not include that stage).
    """
    has_global = any(_stat(r.summary, "global_accuracy", "final") is not None for r in runs)
    setup = setup_marks(runs)
    header = [
        "run",
        "algorithm",
        *setup.columns,
        "final acc %",
        "best acc % (round)",
        "last-10 mean %",
        "weighted final %",
    ]
    if has_global:
        header.append("global final %")
    header += ["up MB", "down MB", "wall s"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    marked = False
    for run, label, other in zip(runs, _labels(runs), setup.marks, strict=True):
        s = run.summary
        mark = " †" if has_final_stage(run.metrics) else ""
        marked |= bool(mark)
        best = _pct(_stat(s, "accuracy", "best"))
        best_round = _stat(s, "accuracy", "best_round")
        if best != "-" and best_round is not None:
            best += f" ({best_round})"
        comm = s.get("communication") if isinstance(s.get("communication"), dict) else {}
        wall = s.get("wall_seconds")
        row = [
            _cell(label) + other,
            _cell(run.algorithm),
            *(_cell(_setup(run)[c] or "-") for c in setup.columns),
            _pct(_stat(s, "accuracy", "final")) + mark,
            best,
            _pct(_stat(s, "accuracy", "last10_mean")),
            _pct(_stat(s, "accuracy_weighted", "final")) + mark,
        ]
        if has_global:
            row.append(_pct(_stat(s, "global_accuracy", "final")))
        row += [
            _mb(comm.get("up_bytes")),
            _mb(comm.get("down_bytes")),
            f"{float(wall):.1f}" if _is_number(wall) else "-",
        ]
        lines.append("| " + " | ".join(row) + " |")
    if marked:
        lines += ["", FINAL_STAGE_NOTE]
    if setup.note:
        lines += ["", setup.note]
    return "\n".join(lines)


#: without ``capacity_group_labels``, group numbers above this are taken for damage
_MAX_UNLABELLED_GROUPS = 100


class GroupAccuracy(NamedTuple):
    """The final accuracy of one capacity group of a run."""

    #: the group's interval of capacity ratios ``r``, e.g. ``"(0.2, 0.4]"``
    label: str
    #: mean final accuracy (a fraction) of the group's clients with a test accuracy; ``None``
    #: when none has one
    accuracy: float | None
    #: number of clients in the group (those without test data included)
    clients: int


def capacity_group_accuracy(run: RunRecord) -> list[GroupAccuracy]:
    """Mean final test accuracy per capacity group of a run (Pa3dFL's Fig. 2).

    Reads ``clients.json``: ``capacity_groups`` (each client's group, ``0`` = lowest capacity,
    see :func:`fedpart.engine.capacity.capacity_groups`: equal-width intervals of ``r`` over
    ``(0, 1]``), ``capacity_group_labels`` (the groups' names) and ``client_accuracy``. Every
    labelled group is returned, in group order, empty ones too (``accuracy=None, clients=0``).
    A client without a test accuracy (``None``, no test data) counts in ``clients`` but not in
    the mean. Without ``capacity_group_labels`` the groups are named ``"group <g>"``.

    Returns:
        One :class:`GroupAccuracy` per group; an empty list when the run has no capacity groups
        to compare: ``clients.json`` has no ``capacity_groups`` (a run from before capacity
        profiles), every client's ``capacity`` is 1 (``federation.capacity: ideal``, the
        default: every client in the top group), or it does not pair one group (a labelled one;
        without labels, one of the first 100) with one accuracy per client.
    """
    clients = run.clients or {}
    groups = clients.get("capacity_groups")
    accuracies = clients.get("client_accuracy")
    if not isinstance(groups, list) or not groups or not isinstance(accuracies, list):
        return []
    if len(groups) != len(accuracies) or not all(
        isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in groups
    ):
        return []
    capacity = clients.get("capacity")
    if isinstance(capacity, list) and all(_is_number(r) and float(r) == 1.0 for r in capacity):
        return []  # the ideal profile: no capacity heterogeneity
    labels = clients.get("capacity_group_labels")
    if isinstance(labels, list) and labels and all(isinstance(x, str) for x in labels):
        names = list(labels)
    else:
        names = [f"group {g}" for g in range(min(max(groups) + 1, _MAX_UNLABELLED_GROUPS))]
    if max(groups) >= len(names):
        return []  # a group without a label, or a damaged file
    result = []
    for g, name in enumerate(names):
        members = [a for grp, a in zip(groups, accuracies, strict=True) if grp == g]
        values = [float(a) for a in members if _is_number(a)]
        mean = sum(values) / len(values) if values else None
        result.append(GroupAccuracy(name, mean, len(members)))
    return result


def _group_header(rows: Sequence[tuple[str, list[GroupAccuracy]]]) -> list[str]:
    """The group labels of all runs, each once, in the order they first appear."""
    return list(dict.fromkeys(g.label for _, groups in rows for g in groups))


CAPACITY_TABLE_TITLE = (
    "Final accuracy % per capacity group r (mean over the group's clients; clients in the group)"
)


def capacity_group_table(runs: Sequence[RunRecord]) -> str:
    """A markdown table of :func:`capacity_group_accuracy`: one row per run that has capacity
    groups (labelled as in :func:`compare_table`), one column per group (headed by its ``r``
    interval), cells ``"mean % (clients)"`` (``-`` for a group without an evaluated client).
    Runs without capacity groups are left out; without any such run, the empty string."""
    rows = [
        (label, capacity_group_accuracy(run))
        for run, label in zip(runs, _labels(runs), strict=True)
    ]
    rows = [(label, groups) for label, groups in rows if groups]
    if not rows:
        return ""
    header = _group_header(rows)
    lines = [
        "| run | " + " | ".join(_cell(h) for h in header) + " |",
        "|" + "|".join("---" for _ in range(len(header) + 1)) + "|",
    ]
    for label, groups in rows:
        by_label = {g.label: g for g in groups}
        cells = [
            f"{_pct(by_label[h].accuracy)} ({by_label[h].clients})" if h in by_label else "-"
            for h in header
        ]
        lines.append("| " + " | ".join([_cell(label), *cells]) + " |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------- plots
def _figure(
    width: float = 8.0, height: float = 5.0, ncols: int = 1, layout: str | None = None
) -> tuple[Any, list[Any]]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout=layout)
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(1, ncols, i + 1) for i in range(ncols)]
    return fig, axes


def _save(fig: Any, path: str | os.PathLike) -> None:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    if fig.get_layout_engine() is None:  # a constrained layout places an outside legend itself
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


#: line styles cycled after the ten colours, so 40 runs get 40 distinct (colour, style) pairs
LINE_STYLES = ("-", "--", ":", "-.")


def run_styles(n: int) -> list[dict[str, Any]]:
    """Matplotlib line properties for ``n`` runs: ten colours × four line styles, then again
    with markers, so every curve of a 26-method comparison has its own colour-and-style pair."""
    markers = (None, "o", "s", "^")
    return [
        {
            "color": f"C{i % 10}",
            "linestyle": LINE_STYLES[(i // 10) % 4],
            "marker": markers[(i // 40) % 4],
        }
        for i in range(n)
    ]


def _legend_columns(entries: int) -> int:
    return 1 if entries <= 18 else 2


def _setting_groups(runs: Sequence[RunRecord]) -> list[tuple[str, list[int]]]:
    """Runs grouped by their method's setting (centralized, cloud-edge, decentralized) when
    there are more than 12 runs of several settings — one panel each keeps the curves
    readable; otherwise one group of all runs."""
    from fedpart.registry import methods

    ALGORITHMS = methods()  # with the plugins' methods: placed by their declared setting

    def setting(run: RunRecord) -> str:
        cls = ALGORITHMS.get(run.algorithm)
        return str(getattr(cls, "setting", "other")) if cls is not None else "other"

    settings = [setting(r) for r in runs]
    if len(runs) <= 12 or len(set(settings)) < 2:
        return [("", list(range(len(runs))))]
    order = ["centralized", "cloud-edge", "decentralized"]
    names = sorted(set(settings), key=lambda s: (order.index(s) if s in order else 9, s))
    return [(name, [i for i, s in enumerate(settings) if s == name]) for name in names]


def plot_accuracy(runs: Sequence[RunRecord], path: str | os.PathLike) -> None:
    """PNG of personalised accuracy vs round, one line per run.

    Every run has its own colour × line style (:func:`run_styles`); the legend sits outside the
    axes, to the right, so it never covers a curve. More than 12 runs of several settings get
    one panel per setting (centralized, cloud-edge, decentralized). Where any run records the
    global model's accuracy it is drawn in a second column with the same styles. A post-training
    evaluation (``"stage": "final"``, the fine-tuning of FedBABU and fedseqlayer) is a cross
    labelled with the run's name, with its own legend entry.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    labels = _labels(runs)
    has_global = any(_series(r, "global_accuracy")[0] for r in runs)
    groups = _setting_groups(runs)
    heights = [max(3.4, 0.19 * len(idx) / _legend_columns(len(idx) + 1) + 1.2) for _, idx in groups]
    ncol_max = max(_legend_columns(len(idx) + 1) for _, idx in groups)
    fig = Figure(
        figsize=((13.0 if has_global else 8.5) + 2.4 * ncol_max, sum(heights)),
        dpi=100,
        layout="constrained",
    )
    FigureCanvasAgg(fig)
    grid = fig.subplots(
        len(groups),
        2 if has_global else 1,
        squeeze=False,
        sharex=True,
        gridspec_kw={"height_ratios": heights},
    )
    last_final = -math.inf
    for (setting, idx), row in zip(groups, grid, strict=True):
        handles: list[Any] = []
        any_final = False
        for i, style in zip(idx, run_styles(len(idx)), strict=True):
            run, label = runs[i], labels[i]
            xs, ys, final = _series(run, "accuracy")
            line_style = {**style, "marker": style["marker"] or ("." if len(xs) < 30 else None)}
            if xs:
                row[0].plot(xs, ys, **line_style, markersize=4, linewidth=1.4)
            if final is not None:
                row[0].plot(*final, color=style["color"], marker="x", markersize=8, ls="none")
                row[0].annotate(
                    label, final, xytext=(5, 0), textcoords="offset points", fontsize="x-small",
                    color=style["color"], va="center",
                )  # fmt: skip
                any_final = True
                last_final = max(last_final, final[0])
            if xs or final is not None:
                handles.append(Line2D([], [], **line_style, markersize=4, label=label))
            if has_global:
                gx, gy, _ = _series(run, "global_accuracy")
                if gx:
                    row[1].plot(gx, gy, **line_style, markersize=4, linewidth=1.4)
        if any_final:
            handles.append(
                Line2D(
                    [], [], color="black", marker="x", ls="none", label="after final fine-tuning"
                )
            )
        if not handles:
            row[0].text(
                0.5, 0.5, "no evaluated rounds", ha="center", va="center",
                transform=row[0].transAxes,
            )  # fmt: skip
        else:
            row[-1].legend(
                handles=handles,
                loc="upper left",
                bbox_to_anchor=(1.02, 1.0),
                borderaxespad=0.0,
                fontsize="small",
                ncol=_legend_columns(len(handles)),
            )
        suffix = f" — {setting}" if setting else ""
        titles = ["personalised test accuracy (mean over clients)", "global model accuracy"]
        for ax, title in zip(row, titles, strict=False):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylabel("accuracy (%)")
            ax.set_title(title + suffix, fontsize="medium")
            ax.grid(True, alpha=0.3)
    for ax in grid[-1]:
        ax.set_xlabel("round")
    if math.isfinite(last_final):  # room for the crosses' names right of the last round
        left, right = grid[0][0].get_xlim()
        grid[0][0].set_xlim(left, max(right, last_final + 0.15 * (last_final - left)))
    _save(fig, path)


def plot_client_accuracy(runs: Sequence[RunRecord], path: str | os.PathLike) -> None:
    """PNG of the final per-client accuracies: sorted per run (left) and as box plots (right)."""
    from matplotlib.ticker import MaxNLocator

    data = [
        (label, [100 * a for a in run.client_accuracies()], style)
        for run, label, style in zip(runs, _labels(runs), run_styles(len(runs)), strict=True)
    ]
    data = [(label, acc, style) for label, acc, style in data if acc]
    ncol = _legend_columns(len(data))
    fig, (left, right) = _figure(
        width=12.0 + 2.6 * ncol,
        height=max(5.0, 0.2 * len(data) / ncol + 1.5),
        ncols=2,
        layout="constrained",
    )
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
        for label, acc, style in data:
            left.plot(range(len(acc)), sorted(acc), **style, markersize=4, label=label)
        fig.legend(loc="outside right upper", fontsize="small", ncol=ncol)
        right.boxplot([acc for _, acc, _ in data], showmeans=True)
        right.set_xticks(range(1, len(data) + 1))
        right.set_xticklabels(
            [label for label, _, _ in data],
            rotation=60 if len(data) > 8 else 30,
            ha="right",
            fontsize="small",
        )
        right.set_xlabel(
            "box: quartiles, line: median, triangle: mean, whiskers: 1.5 IQR, circles: beyond",
            fontsize="small",
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


def plot_capacity_groups(runs: Sequence[RunRecord], path: str | os.PathLike) -> bool:
    """PNG of the mean final accuracy per capacity group (Pa3dFL's Fig. 2): x = the group's
    interval of ``r``, y = mean accuracy (%), one line with markers per run that has capacity
    groups (:func:`capacity_group_accuracy`), styled by :func:`run_styles`, legend outside the
    axes. A group without an evaluated client is a gap in its run's line.

    Returns:
        Whether the PNG was written: ``False`` (and no file) when no run has capacity groups.
    """
    from matplotlib.ticker import MaxNLocator

    data = [
        (label, capacity_group_accuracy(run))
        for run, label in zip(runs, _labels(runs), strict=True)
    ]
    data = [(label, groups) for label, groups in data if groups]
    if not data:
        return False
    header = _group_header(data)
    ncol = _legend_columns(len(data))
    fig, (ax,) = _figure(
        width=7.5 + 2.6 * ncol,
        height=max(4.5, 0.2 * len(data) / ncol + 1.5),
        layout="constrained",
    )
    for (label, groups), style in zip(data, run_styles(len(data)), strict=True):
        by_label = {g.label: g.accuracy for g in groups}
        ys = [100 * acc if (acc := by_label.get(h)) is not None else math.nan for h in header]
        ax.plot(
            range(len(header)),
            ys,
            **{**style, "marker": style["marker"] or "o"},
            markersize=5,
            linewidth=1.4,
            label=label,
        )
    fig.legend(loc="outside right upper", fontsize="small", ncol=ncol)
    ax.set_xticks(range(len(header)))
    ax.set_xticklabels(header, rotation=30 if len(header) > 6 else 0, fontsize="small")
    ax.yaxis.set_major_locator(MaxNLocator(nbins=10))
    ax.set_xlabel("capacity group (capacity ratio r)")
    ax.set_ylabel("mean final accuracy (%)")
    ax.set_title("personalised test accuracy per capacity group", fontsize="medium")
    ax.grid(True, alpha=0.3)
    _save(fig, path)
    return True


def _default_out_dir(runs: Sequence[RunRecord]) -> Path:
    try:
        return Path(os.path.commonpath([str(r.path.resolve().parent) for r in runs]))
    except ValueError:  # e.g. different drives
        return Path.cwd()


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


def write_report(
    paths: Sequence[str | os.PathLike], out_dir: str | os.PathLike | None = None
) -> tuple[str, list[Path]]:
    """Compare the runs in ``paths`` (see :func:`find_runs`): the report text and the PNGs
    written, ``accuracy.png`` and ``clients.png`` in ``out_dir`` (default: the runs' common
    parent directory).

    The text is the :func:`compare_table`; when any run has capacity groups
    (``federation.capacity``), followed by the :func:`capacity_group_table` of those runs, and
    ``capacity_groups.png`` (:func:`plot_capacity_groups`) is written too.

    Raises:
        FedpartError: no path given, or a path that holds no run.
    """
    if not paths:
        raise FedpartError("report: no run directories given")
    runs = [load_run(p) for p in find_runs(paths)]
    if not runs:
        raise FedpartError("report: no run directories given (only other files)")
    out = Path(out_dir) if out_dir is not None else _default_out_dir(runs)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "accuracy.png", out / "clients.png"]
    plot_accuracy(runs, written[0])
    plot_client_accuracy(runs, written[1])
    text = compare_table(runs)
    groups = capacity_group_table(runs)
    if groups:
        text += f"\n\n{CAPACITY_TABLE_TITLE}\n\n{groups}"
        if plot_capacity_groups(runs, out / "capacity_groups.png"):
            written.append(out / "capacity_groups.png")
    return text, written


def shared_setup(paths: Sequence[str | os.PathLike]) -> str | None:
    """One line with what every run in ``paths`` shares besides the method (dataset, model,
    rounds, seed, backend: :func:`setup_marks`), or None; what differs is in the table."""
    return setup_marks([load_run(p) for p in find_runs(paths)]).shared


def report(paths: Sequence[str | os.PathLike], out_dir: str | os.PathLike | None = None) -> str:
    """Compare the runs in ``paths``: return the markdown table, write the plots.

    Writes ``accuracy.png`` (accuracy vs round) and ``clients.png`` (per-client accuracies) into
    ``out_dir``, by default the runs' common parent directory, and ``capacity_groups.png``
    (accuracy per capacity group) when a run has capacity groups; :func:`write_report` also
    returns their paths.

    Raises:
        FedpartError: no path given, or a path that holds no run.
    """
    return write_report(paths, out_dir)[0]
