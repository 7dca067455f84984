"""Where a process-backend round goes, on pfl-research's CIFAR-10 protocol.

Builds the workload of ``benchmarks/pfl_side_by_side.py`` (1,000 users x 50 generated
CIFAR-shaped images, 50 users a round, FedAvg of pfl-research's ``simple_cnn``) and times, after
a warm-up round:

- the sequential backend's round at one thread (the work to share out);
- the process backend's round with ``--workers`` one-thread workers, and the part of it spent in
  the pool (``ProcessTrainer.train``: the jobs sent, trained and returned); the rest is the
  driver's sampling and aggregation.

The ideal process round is the sequential one divided by the workers; the output gives the
parallel efficiency (sequential / (workers x process round)). It also times the serialisation of
one client state of this model (medians of 20): torch's own pickling of its tensors (cloudpickle,
pickle) against the process backend's raw bytes (``fedpart.engine.parallel._dumps``).

    python benchmarks/process_round.py --workers 2 --rounds 3
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cloudpickle  # noqa: E402
import pfl_side_by_side as workload  # noqa: E402

from fedpart.api import _as_config, in_memory  # noqa: E402
from fedpart.engine import parallel  # noqa: E402
from fedpart.engine.simulation import Simulation  # noqa: E402


def config(name: str, backend: str, workers: int) -> dict:
    return {
        "seed": 0,
        "dataset": {"merge_test": False, "name": name, "download": False},
        "partition": {
            "kind": "iid",
            "num_clients": 1000,
            "split": [1.0, 0.0, 0.0],
            "test_source": "official",
            "min_size": 1,
        },
        "model": {"name": workload.MODEL},
        "algorithm": {"name": "fedavg"},
        "federation": {
            "rounds": 100,
            "join_ratio": 0.05,
            "local_epochs": 1,
            "batch_size": 10,
            "lr": 0.1,
        },
        "evaluation": {"every": 10},
        "engine": {"backend": backend, "workers": workers, "threads": 1},
    }


def serialisation_ms(state: dict) -> dict[str, float]:
    """Median milliseconds to serialise ``state`` three ways (after one untimed call each)."""
    ways = {
        "cloudpickle": lambda: cloudpickle.dumps(state),
        "pickle": lambda: pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL),
        "raw bytes": lambda: parallel._dumps(state, parallel._CloudPickler),
    }
    out = {}
    for name, fn in ways.items():
        fn()
        times = []
        for _ in range(20):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        out[name] = 1e3 * statistics.median(times)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3, help="timed rounds after one warm-up")
    args = p.parse_args()
    torch.set_num_threads(1)
    bundle = workload.fedpart_bundle(workload.workload_data(1000, 50, 10000, 0, None))
    name = in_memory(bundle)
    pool_time = {"s": 0.0}
    train = parallel.ProcessTrainer.train

    def timed(self, jobs, rnd):  # noqa: ANN001, ANN202
        t0 = time.perf_counter()
        out = train(self, jobs, rnd)
        pool_time["s"] += time.perf_counter() - t0
        return out

    parallel.ProcessTrainer.train = timed
    rows = {}
    for backend in ("sequential", "processes"):
        sim = Simulation(_as_config(config(name, backend, args.workers), []), run_dir=None)
        sim.run_round(0)
        walls, pools = [], []
        for rnd in range(1, args.rounds + 1):
            pool_time["s"] = 0.0
            t0 = time.perf_counter()
            sim.run_round(rnd)
            walls.append(time.perf_counter() - t0)
            pools.append(pool_time["s"])
        sim.close_workers()
        rows[backend] = (statistics.median(walls), statistics.median(pools))
    seq, (proc, pool) = rows["sequential"][0], rows["processes"]
    print(f"sequential round (one thread): {seq:.3f} s")
    print(f"process round ({args.workers} workers): {proc:.3f} s, of which the pool {pool:.3f} s")
    print(f"parallel efficiency: {seq / (args.workers * proc):.2f}")
    model = workload.SimpleCNN(10, (3, 32, 32))
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    size = sum(v.numel() * v.element_size() for v in state.values()) / 1e6
    ms = ", ".join(f"{k} {v:.2f} ms" for k, v in serialisation_ms(state).items())
    print(f"serialising one {size:.1f}-MB client state: {ms}")


if __name__ == "__main__":
    main()
