"""Where TailorFL's accuracy goes at the end of a run: each client's personal filters against
other selections of the same server model.

    python benchmarks/pa3dfl/tailorfl_models.py benchmarks/pa3dfl/runs/tailorfl-e5now-hetero-seed0 \\
        --against benchmarks/pa3dfl/results/heterofl-noscaler-e5-hetero-seed0.json

Reads the run's last checkpoint (nothing is written) and evaluates, on every client's test split,
the server model sliced to the client's width by:

- ``own``: the client's filters (the shared layers' largest-norm filters and its personal
  layers' own ones; what the run reports);
- ``by norm``: the largest-norm filters in every layer, personal ones included (the selection
  the shared layers use, the same nested set for every client of a width), divided by the
  width under ``width_scaling`` as the client's own test model is;
- ``whole``: no slicing (the whole server model, for every client): what the union of the
  clients' filters has learned.

It prints their means per capacity group and, per personal layer, how the clients' filters
overlap: the mean Jaccard index of two clients' sets, the filters no client holds, and the
fewest and most holders of a filter. With ``--against RECORD`` (a finished run's record at the
same seed) it adds that run's per-client accuracy.
"""

from __future__ import annotations

import itertools
import statistics
import sys
from pathlib import Path

import torch

from fedpart.algorithms.tailorfl import filter_magnitude, top_filters
from fedpart.models.width import narrow_model, slice_state
from fedpart.models.width_plan import kept_count

sys.path.insert(0, str(Path(__file__).resolve().parent))
from client_tables import accuracy_on, report_with_notes, restored_run, run_parser  # noqa: E402

COLUMNS = ("own", "by norm", "whole")


def evaluate(run: Path) -> tuple[list[dict], list[str], int]:
    """Per client: width, capacity group and the accuracy (%) of each selection of ``COLUMNS``;
    the lines on the personal layers' overlap; the rounds completed."""
    cfg, sim = restored_run(run, "tailorfl")
    algo, data = sim.algorithm, sim.algorithm.ctx.data
    state = algo.ctx.store.global_state
    norms = {g: filter_magnitude(state, g) for g in algo.plan.groups}
    rows = []
    for c in range(data.num_clients):
        p, index = algo.width(c), data.clients[c].test

        def acc(model, st, index=index) -> float:
            return accuracy_on(model, st, data, index, cfg.engine.eval_batch_size)

        row = {"client": c, "width": p, "group": int(algo.ctx.capacity.groups[c])}
        row["own"] = acc(algo.model_for(c), algo.eval_state(c))
        if p < 1.0:
            chans = {
                g: top_filters(norms[g], kept_count(n, p)) for g, n in algo.plan.groups.items()
            }
            row["by norm"] = acc(
                narrow_model(algo.ctx.model, p),
                algo.width_scaled(slice_state(state, algo.plan.index_sets(chans)), c, -1),
            )
        else:
            row["by norm"] = row["own"]
        row["whole"] = acc(algo.ctx.model, state)
        rows.append(row)
    lines = []
    for g in algo.personal_groups:
        m = algo.member[g]
        narrow = [c for c in range(m.shape[0]) if algo.width(c) < 1.0]
        jac = [
            float((m[a] * m[b]).sum() / ((m[a] + m[b]) > 0).sum())
            for a, b in itertools.combinations(narrow, 2)
        ]
        holders = m.sum(0)
        lines.append(
            f"- {g}: {m.shape[1]} filters; mean Jaccard index of two narrower-than-whole clients' "
            f"sets {statistics.mean(jac):.3f}; filters no client of width < 1 holds "
            f"{int((m[narrow].sum(0) == 0).sum())}; holders per filter {int(holders.min())}–"
            f"{int(holders.max())} of {m.shape[0]}"
        )
    return rows, lines, sim.rounds_completed


def main(argv: list[str] | None = None) -> int:
    ap = run_parser(__doc__, "TailorFL")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)

    def evaluate_run() -> tuple[list[dict], int, list[str]]:
        rows, lines, done = evaluate(args.run)
        return rows, done, lines

    return report_with_notes(
        args, evaluate_run, COLUMNS, "Personal layers, after the last round:", "own"
    )


if __name__ == "__main__":
    sys.exit(main())
