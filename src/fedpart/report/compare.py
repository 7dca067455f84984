"""``fedpart report``: load finished runs and compare them — the markdown tables
(:mod:`fedpart.report.tables`) and the PNG plots (:mod:`fedpart.report.plots`) of the runs that
:func:`~fedpart.report.loading.find_runs` names."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from fedpart.errors import FedpartError
from fedpart.report.loading import RunRecord, find_runs, load_run
from fedpart.report.plots import plot_accuracy, plot_capacity_groups, plot_client_accuracy
from fedpart.report.tables import (
    CAPACITY_TABLE_TITLE,
    capacity_group_table,
    compare_table,
    setup_marks,
)


def _default_out_dir(runs: Sequence[RunRecord]) -> Path:
    try:
        return Path(os.path.commonpath([str(r.path.resolve().parent) for r in runs]))
    except ValueError:  # e.g. different drives
        return Path.cwd()


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
