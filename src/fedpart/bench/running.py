"""Running the bench: the data built once per process, every variant of a workload
(:func:`run_workload`), the ``scale1000`` round (:func:`run_scale`) and the selected workloads
(:func:`run_bench`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from fedpart.bench.devices import GpuPeak, check_device
from fedpart.bench.measure import (
    CeilingRunner,
    EngineRunner,
    NaiveRunner,
    Runner,
    VariantResult,
    WorkloadResult,
    measure_interleaved,
)
from fedpart.bench.memory import (
    MB,
    RssSampler,
    children_rss_bytes,
    mb_text,
    release_memory,
    rss_bytes,
)
from fedpart.bench.ratios import batched_ratios, parallel_efficiency
from fedpart.bench.workloads import WORKLOADS, BenchOptions, Workload, workload_config
from fedpart.config import Config
from fedpart.data import DatasetBundle, load_dataset
from fedpart.engine.data import FederatedData, build_federated_data
from fedpart.errors import FedpartError


class DataCache:
    """Datasets and partitions built once per process and shared by the variants."""

    def __init__(self) -> None:
        self.bundles: dict[tuple[str, str | None], DatasetBundle] = {}
        self.parts: dict[tuple[Any, ...], FederatedData] = {}

    def bundle(self, cfg: Config) -> DatasetBundle:
        key = (cfg.dataset.name, cfg.dataset.root)
        if key not in self.bundles:
            self.bundles[key] = load_dataset(
                cfg.dataset.name, cfg.dataset.root, download=False, **cfg.dataset.options
            )
        return self.bundles[key]

    def data(self, cfg: Config) -> FederatedData:
        p = cfg.partition
        key = (cfg.dataset.name, cfg.dataset.root, cfg.seed, p.num_clients, p.alpha, p.min_size)
        if key not in self.parts:
            self.parts[key] = build_federated_data(cfg, self.bundle(cfg))
        return self.parts[key]


def batched_unavailable(cfg: Config, data: FederatedData) -> str | None:
    """Why ``engine.backend=batched`` cannot run this config (short), or ``None``."""
    from fedpart.algorithms import ALGORITHMS
    from fedpart.engine.batched import can_batch
    from fedpart.models import build_model

    algo = ALGORITHMS[cfg.algorithm.name]
    if "batched" not in algo.backends:
        return f"{cfg.algorithm.name} is sequential-only"
    model = build_model(
        cfg.model.name,
        num_classes=data.num_classes,
        input_shape=tuple(data.bundle.input_shape),
        **cfg.model.options,
    )
    reason = can_batch(model, [])
    if reason is None:
        return None
    if "buffers" in reason:
        return "BatchNorm"
    if "dropout" in reason:
        return "dropout"
    return reason


def describe(w: Workload, cfg: Config, data: FederatedData, ceiling_batch: int) -> str:
    f = cfg.federation
    p = cfg.partition
    per_round = p.num_clients if w.all_clients else max(1, round(f.join_ratio * p.num_clients))
    train = sum(c.num_train for c in data.clients)
    test = sum(int(c.test.numel()) for c in data.clients)
    text = (
        f"{w.title}; model `{cfg.model.name}`; {cfg.dataset.name} ({train:,} train / {test:,} "
        f"test samples over {p.num_clients} clients, Dir({p.alpha:g}), min_size {p.min_size}, "
        f"75/25 split); {per_round} clients per round, batch {f.batch_size}, "
        f"{f.local_epochs} local epoch(s), lr {f.lr:g}"
    )
    if f.momentum or f.weight_decay:
        text += f", momentum {f.momentum:g}, weight decay {f.weight_decay:g}"
    sizes = [c.num_train for c in data.clients]
    if min(sizes) < f.batch_size:
        text += (
            f"; clients with no training sample: {sum(n == 0 for n in sizes)}, "
            f"with fewer than one batch: {sum(n < f.batch_size for n in sizes)}"
        )
    if not w.scale:
        text += f"; ceiling batch {ceiling_batch}"
    return text


def run_workload(
    w: Workload, opts: BenchOptions, cache: DataCache, log: Callable
) -> WorkloadResult:
    """Run the naive, sequential, batched, process and ceiling variants of one workload (those
    of ``opts.variants``), on ``opts.device``."""
    from fedpart.bench.naive import build_initial_model, round_samples

    device = torch.device(opts.device)
    kinds = set(opts.variants)

    cfg = workload_config(w, opts, "sequential")
    try:
        data = cache.data(cfg)
        model = build_initial_model(cfg, data)
    except FedpartError as exc:
        return WorkloadResult(w, w.title, skipped=str(exc))
    f = cfg.federation
    per_round = (
        data.num_clients if w.all_clients else max(1, round(f.join_ratio * data.num_clients))
    )
    ceiling_batch = per_round * f.batch_size
    result = WorkloadResult(w, describe(w, cfg, data, ceiling_batch), clients=data.num_clients)
    planned = {r: round_samples(cfg, data, model, r) for r in range(opts.repeats + 1)}
    del model
    if device.type == "cuda" and hasattr(data, "to"):
        # one copy of the pool on the GPU, shared by the variants (a Simulation given data on
        # its device keeps it), moved before the measurements: the memory columns then hold
        # each variant's own state and working memory
        with GpuPeak(device) as moved:
            data = data.to(device)
        result.notes.append(
            f"the data pool was moved onto {device} once, before the variants were set up, and "
            f"shared by them: {mb_text(moved.delta)} MB, outside the memory columns"
        )

    def naive() -> Runner:
        return NaiveRunner(cfg, data)

    def engine(backend: str, workers: int = 0, threads: int | None = None) -> Callable[[], Runner]:
        return lambda: EngineRunner(workload_config(w, opts, backend, workers), data, threads)

    def ceiling() -> Runner:
        return CeilingRunner(cfg, data, ceiling_batch, planned, device=device)

    plan: list[tuple[str, Callable[[], Runner] | None, str | None]] = []
    if "naive" in kinds:
        plan.append(("naive", naive, None))
    if "sequential" in kinds:
        plan.append(("sequential", engine("sequential"), None))
    workers = opts.workers if "processes" in kinds else []
    # the process variants are compared with the best single process, which may use every core
    # for intra-op threads: that configuration runs in the same interleaved rounds
    for n in sorted({n for n in workers if n > 1 and n != opts.threads}):
        plan.append((f"sequential, {n} threads", engine("sequential", threads=n), None))
    if "batched" in kinds:
        why = batched_unavailable(cfg, data)
        plan.append(("batched", None if why else engine("batched"), why))
    from fedpart.algorithms import ALGORITHMS

    parallel = "processes" in ALGORITHMS[cfg.algorithm.name].backends
    for n in workers:
        why_not = None if parallel else "the method has its own local update"
        plan.append((f"processes x{n}", engine("processes", n) if parallel else None, why_not))
    if "ceiling" in kinds:
        plan.append(("ceiling", ceiling, None))
    runnable = [(variant, make) for variant, make, _ in plan if make is not None]
    where = "" if device.type == "cpu" else f" on {device}"
    log(f"[bench] {w.name}: {', '.join(v for v, _ in runnable)} (interleaved rounds{where}) ...")
    timed = measure_interleaved(runnable, opts.repeats, device, count=opts.counts)
    measured = {v.variant: v for v in timed}
    for variant, make, na in plan:
        if make is None:
            result.variants.append(VariantResult(variant, na=f"n/a ({na})"))
            if variant == "batched":
                result.notes.append(
                    f"batched: n/a ({na}); `engine.backend=auto` runs this workload sequentially."
                )
            continue
        v = measured[variant]
        log(
            f"[bench] {w.name}: {variant}: {v.samples_per_s:,.0f} samples/s, "
            f"train {v.train_s:.3f} s, end-to-end {v.end_to_end_s:.3f} s"
            + (
                ""
                if v.ops_per_round is None
                else f", {v.ops_per_round:,} ops and {v.syncs_per_round:,} syncs per round"
            )
        )
        result.variants.append(v)
    result.notes += parallel_efficiency(result.variants)
    result.notes += batched_ratios(result.variants)
    counts = {v.variant: v.samples_per_round for v in result.variants if v.na is None}
    if len(set(counts.values())) > 1:
        shown = ", ".join(f"{k} {c:,.0f}" for k, c in counts.items())
        result.notes.append(f"WARNING: the variants trained different sample counts: {shown}")
    return result


def run_scale(w: Workload, opts: BenchOptions, cache: DataCache, log: Callable) -> WorkloadResult:
    """One round of the default backend (training + evaluation of every client), time and memory."""
    from fedpart.engine.simulation import Simulation

    cfg = workload_config(w, opts, "auto")
    try:
        cache.bundle(cfg)
    except FedpartError as exc:
        return WorkloadResult(w, w.title, skipped=str(exc))
    log(f"[bench] {w.name}: partition + one round ...")
    release_memory()
    try:
        # with the process backend, the workers' memory counts too
        with RssSampler(children=True) as mem:
            t0 = time.perf_counter()
            data = build_federated_data(cfg, cache.bundle(cfg))
            t1 = time.perf_counter()
            sim = Simulation(cfg, data=data)
            t2 = time.perf_counter()
            row = sim.run_round(0)
            t3 = time.perf_counter()
            train_peak = max(mem.peak, rss_bytes() + children_rss_bytes())
            ev = sim.evaluate()
            t4 = time.perf_counter()
            personal = sim.store.personal_bytes()
            backend = sim.backend
            if backend == "processes":
                backend += f" x{sim._remote.workers}" if sim._remote is not None else ""
            sim.close_workers()
            del sim
    except FedpartError as exc:
        return WorkloadResult(w, w.title, skipped=str(exc))
    release_memory()
    result = WorkloadResult(w, describe(w, cfg, data, 0))
    del data
    result.scale = {
        "backend": backend,
        "clients": cfg.partition.num_clients,
        "participants": int(row["participants"]),
        "partition_s": t1 - t0,
        "setup_s": t2 - t1,
        "train_s": t3 - t2,
        "eval_s": t4 - t3,
        "end_to_end_s": t4 - t2,
        "peak_delta_bytes": mem.delta,
        "peak_bytes": mem.peak,
        "train_peak_bytes": train_peak,
        "personal_bytes": personal,
        "accuracy": ev.get("accuracy"),
    }
    log(f"[bench] {w.name}: {t4 - t2:.2f} s, peak RSS {mem.peak / MB:,.0f} MB")
    return result


def run_bench(opts: BenchOptions, log: Callable[[str], None] | None = None) -> list[WorkloadResult]:
    """Run the selected workloads (``scale1000`` first, on a clean process) and return the data."""
    say = log or (lambda msg: None)
    check_device(opts.device)
    torch.set_num_threads(opts.threads)
    cache = DataCache()
    order = sorted(opts.workloads, key=lambda n: 0 if WORKLOADS[n].scale else 1)
    results: dict[str, WorkloadResult] = {}
    for name in order:
        w = WORKLOADS[name]
        results[name] = (
            run_scale(w, opts, cache, say) if w.scale else run_workload(w, opts, cache, say)
        )
    return [results[n] for n in opts.workloads]
