"""Where pFedGate's accuracy goes at the end of a run: each client's gated model as the run
tests it, against the same model with the head never masked.

    python benchmarks/pa3dfl/pfedgate_models.py benchmarks/pa3dfl/runs/pfedgate-e5now-hetero-seed0 \\
        --against benchmarks/pa3dfl/results/heterofl-noscaler-e5-hetero-seed0.json

Reads the run's last checkpoint (nothing is written) and evaluates, on every client's test split,
with the client's own gating layer:

- ``own``: the blocks the run's selection keeps (what the run reports);
- ``whole head``: the same, with every block of the head kept (the head's blocks are rows, that
  is classes: a head cut to its first block can answer only the classes of that block);
- ``classes``: how many of the classes the ``own`` model predicts on the client's test split.

It prints their means per capacity group; with ``--against RECORD`` (a finished run's record at
the same seed) it adds that run's per-client accuracy.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch.func import functional_call

from fedpart.models.gated import GatedModel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from client_tables import accuracy_on, report, restored_run, run_parser  # noqa: E402

COLUMNS = ("own", "whole head", "classes")


def whole_head(model: GatedModel) -> GatedModel:
    """A view of ``model`` (same tensors) whose selection keeps every block of the head."""
    other = model.with_sparsity(model.sparsity)
    other._head = model.head_blocks  # as under ``mask_head=False``
    return other


def predicted_classes(model: GatedModel, state: dict, data, index: torch.Tensor) -> int:
    """How many classes ``model`` predicts on the pool samples ``index``."""
    model.eval()
    seen: set[int] = set()
    with torch.no_grad():
        for start in range(0, index.numel(), 500):
            x, _ = data.batch(index[start : start + 500])
            seen |= set(functional_call(model, state, (x,)).argmax(1).tolist())
    return len(seen)


def evaluate(run: Path) -> tuple[list[dict], int]:
    """Per client: width, capacity group and the ``COLUMNS``; the rounds completed."""
    cfg, sim = restored_run(run, "pfedgate")
    algo, data = sim.algorithm, sim.algorithm.ctx.data
    rows = []
    for c in range(data.num_clients):
        index, state, model = data.clients[c].test, algo.eval_state(c), algo.model_for(c)

        def acc(m, index=index, state=state) -> float:
            return accuracy_on(m, state, data, index, cfg.engine.eval_batch_size)

        row = {"client": c, "width": algo.sparsity(c), "group": int(algo.ctx.capacity.groups[c])}
        row["own"] = acc(model)
        row["whole head"] = acc(whole_head(model))
        row["classes"] = predicted_classes(model, state, data, index)
        rows.append(row)
    return rows, sim.rounds_completed


def main(argv: list[str] | None = None) -> int:
    ap = run_parser(__doc__, "pFedGate")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    code, _ = report(args.run, args.against, lambda: evaluate(args.run), COLUMNS, "own")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
