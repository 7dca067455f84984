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

import json
import sys
from pathlib import Path
from typing import Any

import torch
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from fedpart.engine.functional import call_method

sys.path.insert(0, str(Path(__file__).resolve().parent))
from client_tables import accuracy_on, report, restored_run, run_parser  # noqa: E402

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
            return accuracy_on(model, state, data, index, cfg.engine.eval_batch_size)

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


def main(argv: list[str] | None = None) -> int:
    ap = run_parser(__doc__, "Pa3dFL")
    ap.add_argument("--json", type=Path, help="write the per-client numbers here")
    ap.add_argument(
        "--fitted-head", action="store_true", help="add the column with a head fitted per client"
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    columns = [*COLUMNS, *([FITTED] if args.fitted_head else [])]
    code, rows = report(
        args.run, args.against, lambda: client_accuracies(args.run, args.fitted_head), columns
    )
    if code:
        return code
    if args.json is not None:
        args.json.write_text(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
