"""Where Pa3dFL's accuracy comes from at the end of a run: each client's test model against the
model the server would send it now.

    python benchmarks/pa3dfl/test_models.py benchmarks/pa3dfl/runs/pa3dfl-e5now-hetero-seed0 \\
        --against benchmarks/pa3dfl/results/heterofl-noscaler-e5-hetero-seed0.json

Reads the run's last checkpoint (nothing is written) and evaluates, on every client's test split:

- ``test``: the client's test model, Alg. 1's interpolation ``M_0 + α(M_1 − M_0)`` chosen by line
  search on its validation split when it last trained (what the run reports);
- ``received``: ``M_0`` generated now (θ_u, the hyper-network's θ_v, the frozen global head);
- ``received, local head``: the same with the hyper-network's local head in place of the global
  head;
- with ``--fitted-head``, ``received, fitted head``: the same features under a linear head fitted
  on the client's own training and validation samples (multinomial logistic regression on
  standardised features): how much of a client's accuracy the head limits, and how much its
  features do.

and prints their means per capacity group (the record's groups) and over the narrowest clients
(width ≤ 3/16). With ``--against RECORD`` (a finished run's record from ``reproduce.py``, e.g. a
baseline at the same seed, hence the same clients) it adds that run's per-client accuracy and
Pa3dFL's test model minus it. ``--json PATH`` writes the per-client numbers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from fedpart.engine.capacity import group_labels
from fedpart.engine.checkpoint import read_checkpoint, restore, run_directory
from fedpart.engine.evaluation import evaluate_samples
from fedpart.engine.functional import call_method
from fedpart.engine.simulation import Simulation
from fedpart.errors import FedpartError

NARROW = 3 / 16
COLUMNS = ("test", "received", "received, local head")
FITTED = "received, fitted head"


def fitted_head_accuracy(
    model: Any, state: dict[str, torch.Tensor], data: Any, fit: torch.Tensor, test: torch.Tensor
) -> float:
    """Test accuracy (%) of ``state``'s features under a linear head fitted on the ``fit``
    samples (multinomial logistic regression on standardised features)."""

    def features(index: torch.Tensor) -> tuple[Any, Any]:
        x, y = data.batch(index)
        with torch.no_grad():
            z = call_method(model, "features", state, x)
        return z.cpu().numpy(), y.cpu().numpy()

    z_fit, y_fit = features(fit)
    z_test, y_test = features(test)
    head = make_pipeline(StandardScaler(), LogisticRegression(max_iter=5000))
    head.fit(z_fit, y_fit)
    return 100 * float(head.score(z_test, y_test))


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


def client_accuracies(run: Path, fitted_head: bool = False) -> tuple[list[dict], int]:
    """Per client: width, capacity group and the test accuracy (%) of each model of ``COLUMNS``
    (and ``FITTED`` with ``fitted_head``); and the rounds the checkpoint has completed."""
    cfg, sim = restored_run(run, "pa3dfl")
    algo, data = sim.algorithm, sim.algorithm.ctx.data
    width = algo.ctx.capacity.width
    groups = algo.ctx.capacity.groups
    out = []
    for c in range(data.num_clients):
        model, index = algo.model_for(c), data.clients[c].test

        def acc(state: dict[str, torch.Tensor], model=model, index=index) -> float:
            ok, _ = evaluate_samples(model, state, data, index, cfg.engine.eval_batch_size)
            return 100 * float(ok.double().mean())

        m0 = algo.received(c)
        local = {**m0, "head.weight": m0["local_head.weight"], "head.bias": m0["local_head.bias"]}
        row = {
            "client": c,
            "width": float(width[c]),
            "group": int(groups[c]),
            "test": acc(algo.eval_state(c)),
            "received": acc(m0),
            "received, local head": acc(local),
        }
        if fitted_head:
            split = data.clients[c]
            fit = torch.cat([split.train, split.val])
            row[FITTED] = fitted_head_accuracy(model, m0, data, fit, index)
        out.append(row)
    return out, sim.rounds_completed


def table(
    rows: list[dict],
    against: list[float] | None,
    columns: Sequence[str] | None = None,
    reference: str = "test",
) -> list[str]:
    """Means per capacity group, over the narrowest clients and over all clients, of
    ``columns`` (default: this script's) and, with ``against``, the other run's and
    ``reference`` minus it."""
    labels = group_labels()
    subsets = [(label, [r for r in rows if r["group"] == g]) for g, label in enumerate(labels)]
    subsets.append((f"width ≤ {round(NARROW * 16)}/16", [r for r in rows if r["width"] <= NARROW]))
    subsets.append(("all", rows))
    if columns is None:
        columns = [*COLUMNS, *([FITTED] if FITTED in rows[0] else [])]
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
    columns: Sequence[str] | None = None,
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("run", type=Path, help="a Pa3dFL run directory with a checkpoint")
    ap.add_argument("--against", type=Path, help="another run's record (same seed)")
    ap.add_argument("--json", type=Path, help="write the per-client numbers here")
    ap.add_argument(
        "--fitted-head", action="store_true", help="add the column with a head fitted per client"
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    code, rows = report(
        args.run, args.against, lambda: client_accuracies(args.run, args.fitted_head)
    )
    if code:
        return code
    if args.json is not None:
        args.json.write_text(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
