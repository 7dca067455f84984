"""Whether an engine change moved any number: a few short batched runs saved, then compared.

Runs three rounds of FedAvg, FedPer (momentum, weight decay, two epochs; and ``drop_last``),
FedRep (``engine.batch_clients=3``), FedRoD, DFedPGP and FedAvg with augmentation on the batched
backend (digits, 12 Dirichlet(0.5) clients, FedAvgCNN) and saves every metrics row (timings
left out) and every client's evaluated state. Run it with the code before a change and after
(e.g. a worktree at the earlier commit on ``PYTHONPATH``), then compare: rows equal and states
``torch.equal``, case by case.

    PYTHONPATH=/path/to/worktree/src python benchmarks/same_numbers.py --out before.pt
    python benchmarks/same_numbers.py --out after.pt
    python benchmarks/same_numbers.py --compare before.pt after.pt
    python benchmarks/same_numbers.py --fold --out folded.pt   # the average as CUDA's fold

``--backend sequential`` runs the same cases on the sequential reference instead (the FedRep
case then has no clients to batch: the same run as plain FedRep). ``--methods`` runs the named
methods instead, each at lr 0.01 (capacity-aware ones with clients of different widths,
``federation.capacity=uniform``), on the given backend where the method declares it, else on
the sequential one.

    python benchmarks/same_numbers.py --methods heterofl,fedrolex,fjord,pa3dfl --out after.pt
"""

from __future__ import annotations

import argparse

import torch

import fedpart
from fedpart.algorithms import ALGORITHMS

BASE = {
    "seed": 1,
    "dataset": {"name": "digits"},
    "partition": {"kind": "dirichlet", "num_clients": 12, "alpha": 0.5, "min_size": 10},
    "model": {"name": "fedavgcnn", "padding": 2},
    "federation": {"rounds": 3, "join_ratio": 0.5, "batch_size": 10, "lr": 0.05},
    "engine": {"backend": "batched"},
}
FED = BASE["federation"]
CASES = {
    "fedavg": {"algorithm": {"name": "fedavg"}},
    "fedper momentum": {
        "algorithm": {"name": "fedper"},
        "federation": {**FED, "momentum": 0.9, "weight_decay": 1e-3, "local_epochs": 2},
    },
    "fedper drop_last": {"algorithm": {"name": "fedper"}, "federation": {**FED, "drop_last": True}},
    "fedrep": {
        "algorithm": {"name": "fedrep"},
        "engine": {"backend": "batched", "batch_clients": 3},
    },
    "fedrod": {"algorithm": {"name": "fedrod"}},
    "dfedpgp": {"algorithm": {"name": "dfedpgp"}},
    "fedavg augmented": {
        "algorithm": {"name": "fedavg"},
        "dataset": {"name": "digits", "augment": "crop_flip"},
    },
}


def method_cases(names: str) -> dict:
    """One case per named method: lr 0.01, clients of different widths where it has widths."""
    cases = {}
    for name in names.split(","):
        federation = {**FED, "lr": 0.01}
        if ALGORITHMS[name].capacity_aware:
            federation["capacity"] = "uniform"
        cases[name] = {"algorithm": {"name": name}, "federation": federation}
    return cases


def record(out: str, backend: str, cases: dict) -> None:
    results = {}
    for name, over in cases.items():
        config = {**BASE, **over}
        own = (
            backend if backend in ALGORITHMS[config["algorithm"]["name"]].backends else "sequential"
        )
        config["engine"] = {**config["engine"], "backend": own}
        run = fedpart.run(config, write=False)
        if run.simulation.backend != own:
            raise SystemExit(f"{name}: ran on {run.simulation.backend}, not {own}")
        rows = [
            {k: v for k, v in row.items() if "second" not in k and "wall" not in k}
            for row in run.metrics
        ]
        n = run.simulation.data.num_clients
        states = {c: run.simulation.algorithm.eval_state(c) for c in range(n)}
        results[name] = (rows, states)
        print(f"{name}: final accuracy {rows[-1].get('accuracy')}")
    torch.save(results, out)


def compare(a: str, b: str) -> None:
    one, two = torch.load(a, weights_only=False), torch.load(b, weights_only=False)
    for name in one:
        (rows_a, states_a), (rows_b, states_b) = one[name], two[name]
        same = all(
            torch.equal(states_a[c][k], states_b[c][k]) for c in states_a for k in states_a[c]
        )
        print(f"{name}: rows equal {rows_a == rows_b}, client states bit-identical {same}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="save this code's runs here")
    p.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    p.add_argument("--backend", default="batched", choices=["batched", "sequential"])
    p.add_argument("--methods", help="comma-separated methods instead of the engine cases")
    p.add_argument(
        "--fold",
        action="store_true",
        help="fold every average into one index_add_ on the CPU too, as the engine does on CUDA "
        "under engine.deterministic (fedpart.engine.mixing.FOLD_DEVICES)",
    )
    args = p.parse_args()
    if args.fold:
        from fedpart.engine import mixing

        mixing.FOLD_DEVICES = frozenset({"cpu", "cuda"})
    if args.compare:
        compare(*args.compare)
    elif args.out:
        record(args.out, args.backend, method_cases(args.methods) if args.methods else CASES)
    else:
        p.error("give --out or --compare")


if __name__ == "__main__":
    main()
