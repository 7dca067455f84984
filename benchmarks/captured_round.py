"""Rounds of ``fedpart bench`` workloads on the batched backend, eager against captured steps.

For each workload (``fedpart bench``'s: the fedseqlayer protocol on MNIST, 100 clients, 10 a
round; DFedPGP: all 100 clients every round) two simulations are built side by side, one with
``engine.cuda_graphs=false`` and one with ``true``; both run a warm-up round, then ``--rounds``
timed rounds, alternating which goes first. The table gives each one's median round
(``run_round``: local training, uploads, aggregation; the evaluation is timed apart), the ratio,
how many distinct steps were captured and how many steps ran through them over all rounds
(read from the engine's programs, :mod:`fedpart.engine.captured`), and how far apart the two
simulations are after the last round (the largest difference of any tensor of the server model
or of a client's stored state; the captured rounds pad batches and bucket rows, so they agree
with the eager ones to float rounding, as the batched backend agrees with the sequential one).

    python benchmarks/captured_round.py --device cuda --data-root ../shared/data
    python benchmarks/captured_round.py --device cpu --dataset digits --rounds 1   # dry run
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time

import torch

from fedpart.bench.workloads import WORKLOADS, BenchOptions, workload_config
from fedpart.engine import captured
from fedpart.engine.simulation import Simulation


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _states(sim: Simulation) -> list[torch.Tensor]:
    tensors = sim.state_tensors()
    return [tensors[k] for k in sorted(tensors)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--workloads", default="fedper,fedavg,dfedpgp")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds")
    p.add_argument("--data-root", default=None)
    p.add_argument("--dataset", default="mnist", choices=["mnist", "fmnist", "digits"])
    args = p.parse_args()
    opts = BenchOptions(
        workloads=args.workloads.split(","),
        device=args.device,
        data_root=args.data_root,
        dataset=args.dataset,
        repeats=args.rounds,
    )
    print(
        f"# captured rounds: {args.device} "
        f"({torch.cuda.get_device_name() if args.device.startswith('cuda') else 'cpu'}), "
        f"torch {torch.__version__}, {args.dataset}\n"
    )
    print(
        "| workload | eager s/round | captured s/round | captured / eager | evaluation s "
        "(eager, captured) | steps captured / run | max abs. Δ state |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in opts.workloads:
        sims, times, evals = {}, {}, {}
        for graphs in (False, True):
            cfg = workload_config(WORKLOADS[name], opts, "batched")
            cfg = dataclasses.replace(
                cfg, engine=dataclasses.replace(cfg.engine, cuda_graphs=graphs)
            )
            sims[graphs] = Simulation(cfg, quiet=True)
            times[graphs], evals[graphs] = [], []
        for rnd in range(args.rounds + 1):
            for graphs in (False, True) if rnd % 2 else (True, False):
                sim = sims[graphs]
                _sync(args.device)
                t0 = time.perf_counter()
                sim.run_round(rnd)
                _sync(args.device)
                t1 = time.perf_counter()
                sim.evaluate()
                _sync(args.device)
                if rnd:  # round 0 is the warm-up
                    times[graphs].append(t1 - t0)
                    evals[graphs].append(time.perf_counter() - t1)
        gap = max(
            float((a.double() - b.double()).abs().max())
            for a, b in zip(_states(sims[False]), _states(sims[True]), strict=True)
            if a.is_floating_point()
        )
        e, c = statistics.median(times[False]), statistics.median(times[True])
        ev = f"{statistics.median(evals[False]):.3f}, {statistics.median(evals[True]):.3f}"
        graphs = [p.graphs for k, p in captured._PROGRAMS.items() if k[0] == id(sims[True].model)]
        counts = f"{sum(len(g.steps) for g in graphs)} / {sum(g.replayed for g in graphs)}"
        print(
            f"| {name} | {e:.3f} | {c:.3f} | {c / e:.2f} | {ev} | {counts} | {gap:.1e} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
