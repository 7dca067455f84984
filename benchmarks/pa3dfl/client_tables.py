"""What the per-client scripts (``test_models.py``, ``tailorfl_models.py``, ``pfedgate_models.py``,
``decompositions.py``) share: a run restored from its last checkpoint, a model's test accuracy,
and the table of per-client accuracies by capacity group against another run."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fedpart.engine.capacity import group_labels
from fedpart.engine.checkpoint import read_checkpoint, restore, run_directory
from fedpart.engine.evaluation import evaluate_samples
from fedpart.engine.simulation import Simulation
from fedpart.errors import FedpartError

#: the narrowest clients' width (the table's "width ≤ 3/16" row)
NARROW = 3 / 16


def restored_run(run: Path, algorithm: str) -> tuple[Any, Simulation]:
    """The config and a simulation restored from the last checkpoint of ``run``, a run of
    ``algorithm`` (nothing is written)."""
    rd = run_directory(run)
    cfg, tensors, meta = read_checkpoint(rd, [])
    if meta is None or tensors is None:
        raise FedpartError(f"{run}: no checkpoint")
    if cfg.algorithm.name != algorithm:
        raise FedpartError(f"{run}: not a {algorithm} run ({cfg.algorithm.name})")
    sim = Simulation(cfg, run_dir=None, quiet=True)
    restore(sim, rd, tensors, meta)
    return cfg, sim


def accuracy_on(model: Any, state: dict[str, Any], data: Any, index: Any, batch_size: int) -> float:
    """Accuracy (%) of ``model`` with the tensors ``state`` on the pool samples ``index``."""
    ok, _ = evaluate_samples(model, state, data, index, batch_size)
    return 100 * float(ok.double().mean())


def table(
    rows: list[dict],
    against: list[float] | None,
    columns: Sequence[str],
    reference: str = "test",
) -> list[str]:
    """Means per capacity group, over the narrowest clients and over all clients, of
    ``columns`` and, with ``against``, the other run's and
    ``reference`` minus it."""
    labels = group_labels()
    subsets = [(label, [r for r in rows if r["group"] == g]) for g, label in enumerate(labels)]
    subsets.append((f"width ≤ {round(NARROW * 16)}/16", [r for r in rows if r["width"] <= NARROW]))
    subsets.append(("all", rows))
    head = ["clients", "clients (n)", *columns]
    if against is not None:
        head += ["other run", f"{reference} − other run"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for label, subset in subsets:
        if not subset:
            continue
        cells = [label, str(len(subset))]
        cells += [f"{statistics.mean(r[k] for r in subset):.2f}" for k in columns]
        if against is not None:
            theirs = [against[r["client"]] for r in subset]
            cells.append(f"{statistics.mean(theirs):.2f}")
            diff = statistics.mean(r[reference] - t for r, t in zip(subset, theirs, strict=True))
            cells.append(f"{diff:+.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def report(
    run: Path,
    against_path: Path | None,
    evaluate: Callable[[], tuple[list[dict], int]],
    columns: Sequence[str],
    reference: str = "test",
) -> tuple[int, list[dict]]:
    """Evaluate the run (``evaluate`` returns the per-client rows and the rounds completed) and
    print its table, with ``against_path``'s per-client accuracy (a record of the same seed);
    returns the exit code (2, after one line, on bad input) and the rows."""
    try:
        against = None
        if against_path is not None:
            clients = json.loads(against_path.read_text())["clients"]
            against = [100 * a if a is not None else float("nan") for a in clients["accuracy"]]
        rows, done = evaluate()
    except (FedpartError, OSError, KeyError, ValueError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2, []
    if against is not None and len(against) != len(rows):
        print(
            f"error: {against_path} has {len(against)} clients, the run {len(rows)}",
            file=sys.stderr,
        )
        return 2, []
    print(f"{run}: after {done} rounds; test accuracy (%), mean over clients\n")
    print("\n".join(table(rows, against, columns, reference)))
    return 0, rows


def report_with_notes(
    args: argparse.Namespace,
    evaluate: Callable[[], tuple[list[dict], int, list[str]]],
    columns: Sequence[str],
    heading: str,
    reference: str = "test",
) -> int:
    """:func:`report` of ``args.run`` (against ``args.against``) for an ``evaluate`` that also
    returns lines to print after the table, under ``heading``; returns the exit code."""
    notes: list[str] = []

    def rows_and_rounds() -> tuple[list[dict], int]:
        rows, done, lines = evaluate()
        notes.extend(lines)
        return rows, done

    code, _ = report(args.run, args.against, rows_and_rounds, columns, reference)
    if code == 0:
        print(f"\n{heading}\n")
        print("\n".join(notes))
    return code


def run_parser(doc: str | None, method: str) -> argparse.ArgumentParser:
    """The command line these scripts share: a ``method`` run directory and ``--against``."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("run", type=Path, help=f"a {method} run directory with a checkpoint")
    ap.add_argument("--against", type=Path, help="another run's record (same seed)")
    return ap
