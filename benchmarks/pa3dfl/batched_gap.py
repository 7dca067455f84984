"""Pa3dFL on the batched backend against the sequential one: how far the two runs drift apart.

Pa3dFL declares only the sequential backend. Its local update is the engine's default (the
test model of Alg. 1 is chosen in the ``trained`` hook), so the batched backend can train it;
this script lets it (for this process only) and compares three rounds of the quick start's
digits (12 Dirichlet(0.5) clients, 6 a round, lr 0.01; ``benchmarks/same_numbers.py``'s
setting) on both backends: the training loss per round and the largest difference between the
client models evaluated, with every client at full width (``ideal``: one batched group) and at
the widths of ``federation.capacity=uniform`` (groups of one: the sequential path).

    python benchmarks/pa3dfl/batched_gap.py
    python benchmarks/pa3dfl/batched_gap.py --set algorithm.test_model=trained
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import same_numbers  # noqa: E402

import fedpart  # noqa: E402
from fedpart.algorithms.pa3dfl import Pa3dFL  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--set", action="append", default=[], help="an override (repeatable)")
    args = p.parse_args()
    Pa3dFL.backends = ("sequential", "batched")
    for capacity in ("ideal", "uniform"):
        runs = {}
        for backend in ("sequential", "batched"):
            config = {
                **same_numbers.BASE,
                "algorithm": {"name": "pa3dfl"},
                "federation": {**same_numbers.FED, "lr": 0.01, "capacity": capacity},
                "engine": {"backend": backend},
            }
            run = fedpart.run(config, args.set, write=False)
            n = run.simulation.data.num_clients
            states = {c: run.simulation.algorithm.eval_state(c) for c in range(n)}
            runs[backend] = (run.metrics, states)
        (rows_s, states_s), (rows_b, states_b) = runs["sequential"], runs["batched"]
        gap = max(
            float((states_s[c][k] - states_b[c][k]).abs().max())
            for c in states_s
            for k in states_s[c]
            if states_s[c][k].is_floating_point()
        )
        print(f"capacity {capacity}: client models differ by up to {gap:.2e}")
        for r, (a, b) in enumerate(zip(rows_s, rows_b, strict=True)):
            la, lb = a["train_loss"], b["train_loss"]
            print(
                f"  round {r}: train loss {la:.6f} / {lb:.6f} (relative {abs(la - lb) / la:.1e}), "
                f"accuracy {a.get('accuracy', float('nan')):.4f} / {b.get('accuracy', float('nan')):.4f}"
            )


if __name__ == "__main__":
    main()
