"""The PNG plots of ``fedpart report``: accuracy against round, the per-client accuracies and
the accuracy per capacity group. Plots use matplotlib's Agg canvas directly (no pyplot, no global
backend switch), imported inside the functions to keep imports fast."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fedpart.formatting import is_number
from fedpart.report.loading import RunRecord
from fedpart.report.tables import capacity_group_accuracy, group_header, run_labels


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
        if not is_number(value) or not is_number(rnd):
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

    labels = run_labels(runs)
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
        for run, label, style in zip(runs, run_labels(runs), run_styles(len(runs)), strict=True)
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
        for run, label in zip(runs, run_labels(runs), strict=True)
    ]
    data = [(label, groups) for label, groups in data if groups]
    if not data:
        return False
    header = group_header(data)
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
