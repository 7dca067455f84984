"""Where one batched round's time goes: ``torch.profiler`` over a round of ``fedpart bench``'s
workloads (FedPer and DFedPGP on MNIST by default), after a warm-up round.

Per workload it prints the round's wall time without the profiler, with
``engine.deterministic`` true and false; under the profiler, the kernels launched, their summed
device time (the time the GPU was busy) and the operators with the most host time. A round whose
device time is a small part of its wall time is bound by the host's dispatch of kernels, not by
the GPU's arithmetic. On a machine without a GPU, ``--device cpu`` profiles the CPU the same way
(``--dataset digits`` needs no download). ``--captured`` profiles the round with the training
captured (``engine.cuda_graphs=true``): a round after the warm-up rounds replays its graphs, so
the table is what a replayed round costs the GPU.

    python benchmarks/gpu_round_profile.py --device cuda --data-root ../shared/data
    python benchmarks/gpu_round_profile.py --device cuda --workloads fedper --captured
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

import torch
from torch.profiler import ProfilerActivity, profile

from fedpart.bench.devices import check_device
from fedpart.bench.workloads import WORKLOADS, BenchOptions, workload_config
from fedpart.engine.simulation import Simulation
from fedpart.errors import FedpartError


def profile_workload(name: str, opts: BenchOptions, rows: int, captured: bool = False) -> list[str]:
    cuda = opts.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    lines = []
    plain = {}
    for det in (False, True):  # the deterministic simulation is the one profiled
        cfg = workload_config(
            WORKLOADS[name], BenchOptions(**{**vars(opts), "deterministic": det}), "batched"
        )
        if captured:
            cfg = cfg.with_overrides(["engine.cuda_graphs=true"])
        sim = Simulation(cfg, quiet=True)
        sim.run_round(0)  # warm-up
        sync()
        t0 = time.perf_counter()
        sim.run_round(1)
        sync()
        plain[det] = time.perf_counter() - t0
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        t0 = time.perf_counter()
        sim.run_round(2)
        sync()
        wall = time.perf_counter() - t0
    events = prof.key_averages()
    kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    busy = sum(e.self_device_time_total for e in kernels) / 1e6
    lines.append(
        f"== {name}, batched backend{' (captured)' if captured else ''} on {opts.device}: "
        f"round {plain[True]:.3f} s "
        f"(engine.deterministic=false: {plain[False]:.3f} s); under the profiler {wall:.3f} s"
        + (f", {sum(e.count for e in kernels):,} kernels, GPU busy {busy:.3f} s" if cuda else "")
    )
    lines.append(
        events.table(sort_by="self_cpu_time_total", row_limit=rows, max_name_column_width=48)
    )
    if cuda:
        lines.append(
            events.table(sort_by="self_device_time_total", row_limit=rows, max_name_column_width=48)
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    p.add_argument("--workloads", default="fedper,dfedpgp", help="fedpart bench workloads")
    p.add_argument("--data-root", default=None, help="dataset folder (default ../shared/data)")
    p.add_argument("--dataset", default="mnist", choices=["mnist", "fmnist", "digits"])
    p.add_argument("--rows", type=int, default=18, help="operators listed per table")
    p.add_argument(
        "--captured", action="store_true", help="the training captured (engine.cuda_graphs=true)"
    )
    args = p.parse_args(argv)
    names = [w for w in args.workloads.split(",") if w]
    try:
        check_device(args.device)
        bad = [w for w in names if w not in WORKLOADS or WORKLOADS[w].scale]
        if bad:
            raise FedpartError(f"--workloads: unknown or not profiled: {', '.join(bad)}")
    except FedpartError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    opts = BenchOptions(
        workloads=names,
        device=args.device,
        data_root=args.data_root,
        dataset=args.dataset,
        repeats=2,
    )
    for name in names:
        print("\n".join(profile_workload(name, opts, args.rows, args.captured)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
