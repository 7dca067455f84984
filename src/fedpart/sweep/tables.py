"""A sweep's table: mean ± std over seeds per cell, from the finished runs' summaries, in
markdown (``table.md``) and CSV (``table.csv``)."""

from __future__ import annotations

import csv
import io
import math
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fedpart.report.tables import FINAL_STAGE_NOTE, has_final_stage
from fedpart.sweep.plan import Sweep

#: the accuracy-like blocks of ``summary.json`` a sweep table aggregates, in column order
METRIC_BLOCKS = (
    "accuracy",
    "accuracy_weighted",
    "global_accuracy",
    "participants_accuracy_before",
    "participants_accuracy_after",
)

#: their column names in the table
BLOCK_LABELS = {
    "accuracy": "acc",
    "accuracy_weighted": "weighted",
    "global_accuracy": "global",
    "participants_accuracy_before": "participants before",
    "participants_accuracy_after": "participants after",
}


def _mean_std(values: Sequence[float]) -> tuple[float, float | None]:
    mean = statistics.fmean(values)
    return mean, (statistics.stdev(values) if len(values) > 1 else None)


def _fmt(values: Sequence[float], scale: float = 100.0, digits: int = 2) -> str:
    if not values:
        return "-"
    mean, std = _mean_std(values)
    text = f"{scale * mean:.{digits}f}"
    return text if std is None else f"{text} ± {scale * std:.{digits}f}"


def _value(summary: dict[str, Any], block: str, stat: str) -> float | None:
    entry = summary.get(block)
    value = entry.get(stat) if isinstance(entry, dict) else None
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


@dataclass
class CellResult:
    """The finished runs of one cell: summaries and whether the method has a final stage."""

    name: str
    overrides: list[str]
    summaries: list[dict[str, Any]]
    final_stage: bool = False
    missing: int = 0


def collect(sweep: Sweep) -> list[CellResult]:
    """Read the summaries of every finished run, cell by cell."""
    from fedpart.report import load_run

    results = []
    for cell in sweep.cells:
        res = CellResult(cell.name, cell.overrides, [])
        for job in (j for j in sweep.jobs if j.cell == cell.name):
            if job.state() != "finished":
                res.missing += 1
                continue
            run = load_run(job.run_dir)
            res.summaries.append(run.summary)
            res.final_stage |= has_final_stage(run.metrics)
        results.append(res)
    return results


def table_rows(results: Sequence[CellResult], last_k: int = 10) -> tuple[list[str], list[list]]:
    """Header and rows of the aggregated table: per cell the number of seeds and, per metric,
    the list of per-seed values (fractions for accuracies, MB, seconds).

    Columns: final / best / last-k of every accuracy block any run has, up/down MB, wall s.
    """
    header = ["cell", "seeds"]
    getters: list[tuple[str, Callable[[dict[str, Any]], float | None]]] = []
    for block in METRIC_BLOCKS:
        if not any(_value(s, block, "final") is not None for r in results for s in r.summaries):
            continue
        stats = ("final", "best", "last10_mean") if block != "accuracy_weighted" else ("final",)
        for stat in stats:
            title = {"final": "final", "best": "best", "last10_mean": f"last-{last_k}"}[stat]
            label = BLOCK_LABELS[block]
            getters.append((f"{label} {title} %", lambda s, b=block, t=stat: _value(s, b, t)))

    def comm(key: str) -> Callable[[dict[str, Any]], float | None]:
        def get(s: dict[str, Any]) -> float | None:
            value = (s.get("communication") or {}).get(key)
            return float(value) / 1e6 if isinstance(value, int | float) else None

        return get

    getters += [("up MB", comm("up_bytes")), ("down MB", comm("down_bytes"))]
    getters.append(
        ("wall s", lambda s: float(s["wall_seconds"]) if _is_num(s.get("wall_seconds")) else None)
    )
    header += [g[0] for g in getters]
    rows = []
    for r in results:
        row: list[Any] = [r.name, len(r.summaries)]
        for _, get in getters:
            row.append([v for s in r.summaries if (v := get(s)) is not None])
        rows.append(row)
    return header, rows


def _is_num(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _last_k(results: Sequence[CellResult]) -> int:
    for r in results:
        for s in r.summaries:
            for key in s.get("accuracy") or {}:
                m = re.fullmatch(r"last(\d+)_mean", key)
                if m and key != "last10_mean":
                    return int(m.group(1))
    return 10


def markdown_table(results: Sequence[CellResult]) -> str:
    """The sweep table in markdown: mean ± std over seeds (sample std), accuracies in %."""
    header, rows = table_rows(results, _last_k(results))
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    marked = False
    for r, row in zip(results, rows, strict=True):
        cells = [row[0].replace("|", "\\|"), str(row[1])]
        if r.missing:
            cells[1] += f" ({r.missing} unfinished)"
        for title, values in zip(header[2:], row[2:], strict=True):
            if title.endswith("%"):
                text = _fmt(values)
                if r.final_stage and title.endswith(" final %") and values:
                    text += " †"
                    marked = True
            elif title == "wall s":
                text = _fmt(values, 1.0, 1)
            else:
                text = _fmt(values, 1.0, 2)
            cells.append(text)
        lines.append("| " + " | ".join(cells) + " |")
    if marked:
        lines += ["", FINAL_STAGE_NOTE]
    return "\n".join(lines)


def csv_table(results: Sequence[CellResult]) -> str:
    """The sweep table as CSV: per metric a ``_mean`` and a ``_std`` column, in the summaries'
    units (accuracies as fractions), and ``final_stage`` (1 where final is after fine-tuning)."""
    header, rows = table_rows(results, _last_k(results))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    cols = ["cell", "seeds", "unfinished", "final_stage"]
    for title in header[2:]:
        key = re.sub(r"[^a-z0-9]+", "_", title.replace("%", "").lower()).strip("_")
        cols += [f"{key}_mean", f"{key}_std"]
    writer.writerow(cols)
    for r, row in zip(results, rows, strict=True):
        line: list[Any] = [row[0], row[1], r.missing, int(r.final_stage)]
        for values in row[2:]:
            if values:
                mean, std = _mean_std(values)
                line += [repr(mean), "" if std is None else repr(std)]
            else:
                line += ["", ""]
        writer.writerow(line)
    return out.getvalue()


def write_tables(sweep: Sweep, results: Sequence[CellResult]) -> str:
    """Write ``table.md`` and ``table.csv`` into the sweep folder; return the markdown."""
    from fedpart.tracking.run_dir import RunDir

    text = markdown_table(results)
    rd = RunDir(sweep.path)
    rd.write_text("table.md", text + "\n")
    rd.write_text("table.csv", csv_table(results))
    return text
