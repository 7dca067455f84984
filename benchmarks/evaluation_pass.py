"""Every client's evaluation client by client (the reference) against one pass (the batched
backend's, ``fedpart.engine.evaluation_pass``): operators dispatched, host synchronisations,
time, and how far the numbers are apart.

    python benchmarks/evaluation_pass.py                    # MNIST from ../shared/data, CPU
    python benchmarks/evaluation_pass.py --device cuda
    python benchmarks/evaluation_pass.py --dataset digits   # no download, small

The workload is the fedseqlayer protocol's evaluation: 100 clients of MNIST (Dirichlet 0.1), each
client's test split (the protocol's every-client evaluation of a round), FedAvgCNN. Two kinds of
personalised states: a shared body with a head per client (FedPer, FedRep, …: every head
differs) and a whole model per client (Local-Only, Ditto, …); each client's tensors are the
initial model's plus a small per-client perturbation. Counted and timed: the evaluation and the
read-back of every client's (correct, loss sum) — what ``evaluate_run`` does each round; the
one-pass layout is built once (the backend keeps it for the lists evaluated every round) and its
cost shown on its own.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from fedpart.bench.dispatch import DispatchCounter  # noqa: E402
from fedpart.config import Config  # noqa: E402
from fedpart.engine.evaluation import evaluate_clients, host_sums  # noqa: E402
from fedpart.engine.evaluation_pass import (  # noqa: E402
    STACK_BYTES,
    VMAP_PASS_COST,
    Layout,
    evaluate_one_pass,
    pass_counts,
)
from fedpart.engine.simulation import Simulation  # noqa: E402


def simulation(args: argparse.Namespace) -> Simulation:
    dataset = {"name": args.dataset}
    if args.dataset != "digits":
        dataset["root"] = args.data_root
    cfg = {
        "seed": 0,
        "dataset": dataset,
        "partition": {"kind": "dirichlet", "num_clients": args.clients, "alpha": 0.1},
        "model": {"name": "fedavgcnn"},
        "algorithm": {"name": "fedper"},
        "federation": {"rounds": 1},
        "engine": {"device": args.device, "eval_batch_size": args.eval_batch_size},
    }
    return Simulation(Config.from_dict(cfg))


def states_of(sim: Simulation, kind: str) -> list[dict[str, torch.Tensor]]:
    """Per client: the shared body with its own head (``head``), or its own whole model."""
    base = sim.store.global_state
    head = set(sim.model.head_names)
    out = []
    g = torch.Generator(device=sim.device).manual_seed(1)
    for _ in range(sim.data.num_clients):
        state = {}
        for k, v in base.items():
            own = kind == "whole" or sim.model.block_of(k) in head
            noise = torch.randn(v.shape, generator=g, device=v.device) if own else None
            state[k] = v + 1e-2 * noise if own and v.is_floating_point() else v
        out.append(state)
    return out


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(fn, device: torch.device, reps: int) -> tuple[float, DispatchCounter, object]:
    out = fn()  # warm-up
    times = []
    for _ in range(reps):
        sync(device)
        t0 = time.perf_counter()
        out = fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    with DispatchCounter(device) as counter:
        fn()
    return statistics.median(times), counter, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="mnist")
    ap.add_argument("--data-root", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--eval-batch-size", type=int, default=0, help="0: the engine's default")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    sim = simulation(args)
    device, data, bs = sim.device, sim.data, sim.cfg.engine.eval_batch_size
    index = [data.clients[c].test for c in range(data.num_clients)]
    samples = sum(int(i.numel()) for i in index)
    print(
        f"{data.num_clients} clients, {samples} test samples (largest client {max(i.numel() for i in index)}), "
        f"{args.dataset}, FedAvgCNN, eval batch {bs}, {device}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads"
    )
    t_layout, c_layout, layout = measure(lambda: Layout(index), device, args.reps)
    print(
        f"layout (built once, kept): {t_layout * 1e3:.2f} ms, {c_layout.total_ops} operators, "
        f"{c_layout.total_syncs} syncs"
    )
    size = sum(t.numel() * t.element_size() for t in sim.store.global_state.values())
    most = max(1, STACK_BYTES // size)
    ours, reference = pass_counts(layout, bs, most)
    padded = sum(b.valid.numel() for b in layout.buckets) / samples - 1
    print(
        f"{len(layout.buckets)} buckets ({padded:.0%} padding); whole models: {ours} forward "
        f"passes in one pass, {reference} client by client; the engine's choice on a GPU: "
        f"{'one pass' if VMAP_PASS_COST * ours < reference else 'client by client'}, on the CPU: "
        "client by client"
    )
    print(
        "| states | evaluation | ms | operators | syncs | correct equal | max loss-sum diff (rel) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for kind, label in (
        ("head", "shared body, a head per client"),
        ("whole", "a model per client"),
    ):
        states = states_of(sim, kind)

        def reference(states=states):
            return host_sums(evaluate_clients(sim.model, states, index, data, bs))

        def one_pass(states=states):
            out = evaluate_one_pass(sim.model, states, index, data, bs, layout, whole_models=True)
            return host_sums(out)

        t_ref, c_ref, ref = measure(reference, device, args.reps)
        t_one, c_one, one = measure(one_pass, device, args.reps)
        equal = [a[0] for a in ref] == [b[0] for b in one]
        diff = max(abs(a[1] - b[1]) / max(abs(a[1]), 1e-12) for a, b in zip(ref, one, strict=True))
        for name, t, c in (("client by client", t_ref, c_ref), ("one pass", t_one, c_one)):
            print(
                f"| {label} | {name} | {t * 1e3:.2f} | {c.total_ops} | {c.total_syncs} | "
                f"{'—' if name != 'one pass' else ('yes' if equal else 'no')} | "
                f"{'—' if name != 'one pass' else f'{diff:.1e}'} |"
            )


if __name__ == "__main__":
    main()
