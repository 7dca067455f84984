"""Operators dispatched and host synchronisations per round, against the clients per round.

For each method and backend, one recipe run with each number of clients per round (the same
partition, only ``federation.join_ratio`` changes): a warm-up round (0) and its evaluation, then
round 1 and the evaluation of every client counted by :class:`fedpart.bench.dispatch.
DispatchCounter` (training and evaluation apart; the per-client batch-order permutations,
drawn on the host from each client's seeded stream, in a column of their own). Then, per method and backend, the operators
that grow with the clients per round, by the source line of fedpart that dispatched them, per
added client. The default recipe is the quick start's (digits, quarter-width FedAvgCNN, batch
10, 1 local epoch) over 100 clients of equal size (an IID split of 1,600 samples: 12 or 13
training samples each, the split being stratified), so that every client takes the same two
steps whatever the round's clients.

    python benchmarks/dispatch_counts.py
    python benchmarks/dispatch_counts.py --methods fedper --backends batched --per-round 10,50
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import torch

import fedpart
from fedpart.bench.dispatch import DispatchCounter
from fedpart.config import load_config
from fedpart.engine.simulation import Simulation

QUICKSTART = Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml"
PACKAGE = str(Path(fedpart.__file__).resolve().parent)
#: 100 clients of 16 samples (12 or 13 to train on): the same steps for every client
EQUAL_CLIENTS = [
    "partition.kind=iid",
    "partition.num_clients=100",
    "partition.pool_size=1600",
    "partition.min_size=0",
]


def counted_round(
    method: str, backend: str, per_round: int, extra: list[str]
) -> tuple[DispatchCounter, DispatchCounter, int]:
    """The counters of round 1's training and of the evaluation after it, and the clients."""
    cfg = load_config(QUICKSTART, [*EQUAL_CLIENTS, *extra])
    ratio = per_round / cfg.partition.num_clients
    cfg = cfg.with_overrides(
        [
            f"algorithm.name={method}",
            f"engine.backend={backend}",
            f"federation.join_ratio={ratio}",
            "federation.rounds=2",
            "output.checkpoint_every=0",
        ]
    )
    sim = Simulation(cfg)
    sim.run_round(0)
    sim.evaluate()
    with DispatchCounter(sim.device, sites=PACKAGE) as train:
        row = sim.run_round(1)
    with DispatchCounter(sim.device, sites=PACKAGE) as evaluation:
        sim.evaluate()
    return train, evaluation, int(row["participants"])


def growth(small: Counter, large: Counter, added: int, top: int) -> list[str]:
    """The (site, operator) counts that grew, per added client, largest first."""
    keys = set(small) | set(large)
    grown = sorted(
        ((large[k] - small[k], k) for k in keys if large[k] != small[k]),
        key=lambda item: (-item[0], item[1]),
    )
    return [f"    {d / added:+7.2f}  {site}  {op}" for d, (site, op) in grown[:top]]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--methods", default="fedavg,fedper")
    p.add_argument("--backends", default="batched,sequential")
    p.add_argument("--per-round", default="10,50", help="clients per round, comma-separated")
    p.add_argument("--top", type=int, default=25, help="growing sites shown per case")
    p.add_argument("--set", nargs="*", default=[], help="more config overrides (key=value)")
    p.add_argument(
        "--fold",
        action="store_true",
        help="fold the average into one index_add_ on the CPU too, as on CUDA under "
        "engine.deterministic (fedpart.engine.mixing.FOLD_DEVICES)",
    )
    args = p.parse_args()
    torch.set_num_threads(1)
    sizes = [int(n) for n in args.per_round.split(",")]
    if args.fold:
        from fedpart.engine import mixing

        mixing.FOLD_DEVICES = frozenset({"cpu", "cuda"})
    header = (
        "| method | backend | clients/round | train ops | eval ops | ops/round | syncs/round "
        "| host draws/round |"
    )
    print(header)
    print("| --- " * 8 + "|")
    found: dict[tuple[str, str], list[tuple[int, Counter]]] = {}
    notes: list[str] = []
    for method in args.methods.split(","):
        for backend in args.backends.split(","):
            for n in sizes:
                train, ev, participants = counted_round(method, backend, n, args.set)
                syncs = train.total_syncs + ev.total_syncs
                kinds = Counter(train.syncs) + Counter(ev.syncs)
                print(
                    f"| {method} | {backend} | {participants} | {train.total_ops:,} | "
                    f"{ev.total_ops:,} | {train.total_ops + ev.total_ops:,} | {syncs} | "
                    f"{train.total_draws + ev.total_draws} |"
                )
                reads = sorted((train.sync_ops + ev.sync_ops).items())
                notes.append(
                    f"{method}, {backend}, {participants} clients: syncs {dict(kinds)}; "
                    + ", ".join(f"{kind} {what} x{c}" for (kind, what), c in reads)
                )
                found.setdefault((method, backend), []).append(
                    (participants, train.sites + ev.sites)
                )
    print()
    for line in notes:
        print(f"- {line}")
    for (method, backend), runs in found.items():
        (n_small, small), (n_large, large) = runs[0], runs[-1]
        if n_large == n_small:
            continue
        print(f"\n{method}, {backend}: per added client ({n_small} -> {n_large} clients/round)")
        print("\n".join(growth(small, large, n_large - n_small, args.top)))


if __name__ == "__main__":
    main()
