"""``fedpart bench``: fedpart's engine against a library-style FL loop and a centralized ceiling.

For each workload, four variants run one after the other in this process, on the same
:class:`~fedpart.engine.data.FederatedData` (built once, outside the measurements) and seed:

``naive``
    :class:`fedpart.bench.naive.NaiveFederation`: model deep copies, ``DataLoader``\\ s,
    ``torch.optim.SGD`` per client and round, state-dict averaging, full per-client copies,
    and per-client evaluation of every client every round (the PFLlib / FL-bench way).
``sequential`` / ``batched``
    fedpart's :class:`~fedpart.engine.simulation.Simulation` with ``engine.backend`` set so;
    ``run_round`` (local training + aggregation) and ``evaluate`` (every client) are timed.
    Where the method or model cannot be batched the row says why (``auto`` then runs
    sequentially).
``ceiling``
    :class:`fedpart.bench.naive.CentralCeiling`: one model, one SGD loop over an in-memory
    tensor, on as many samples per round as the federation trains, with batch size
    (clients per round) x (local batch size); no evaluation.

The variants are set up one after the other, each with a warm-up round (round 0); then the
``--repeats`` timed rounds run interleaved (round ``r`` of every variant before round ``r + 1``
of any, the first variant rotating), so that the slow spells of a shared machine fall on all
variants alike; the report gives medians (``time.perf_counter``). Memory: a background thread
samples the process's resident set (``/proc/self/statm``) every 10 ms during each variant's set-up
and warm-up round; the report gives the peak minus the RSS just before it (the variant's own
increment) and the absolute peak (which includes the variants set up before it). Freed memory is
handed back to the OS (``malloc_trim``) before each variant so that leftovers do not hide it.

The ``scale1000`` workload runs one FedPer round of the default backend with 1,000 clients
(10% participation) and evaluates all of them, reporting time and peak memory only.

``--device cuda`` (or ``cuda:N``) runs the FedAvgCNN workloads (FedAvg, FedPer, FedRep, DFedPGP
by default) on that GPU with the ``sequential``, ``batched`` and ``ceiling`` variants (the naive
loop and the process backend are CPU designs and are left out): the engine runs with
``engine.device`` set to the device, the ceiling's model and samples are moved onto it, and every
timer is read after ``torch.cuda.synchronize()``. Memory is then GPU memory
(``torch.cuda.max_memory_allocated``, its peak reset before each measurement): the increment of
each variant's set-up and warm-up round, the working memory of its timed rounds (peak minus what
was allocated when the round began) and the absolute peak (which also holds the variants set up
before it). The report adds batched / sequential and batched / ceiling ratios and the GPU targets
(:func:`gpu_targets`). Without a usable GPU the command stops before any work with one line
(:func:`check_device`, a :class:`~fedpart.errors.FedpartError`: exit code 2).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import math
import os
import platform
import shlex
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from fedpart.config import Config
from fedpart.data.sources import DatasetBundle, load_dataset
from fedpart.engine.data import FederatedData, build_federated_data
from fedpart.errors import FedpartError

__all__ = [
    "DEVICE_WORKLOADS",
    "VARIANT_KINDS",
    "WORKLOADS",
    "BenchOptions",
    "GpuPeak",
    "RssSampler",
    "VariantResult",
    "WorkloadResult",
    "check_device",
    "device_lines",
    "format_report",
    "gpu_targets",
    "main",
    "parse_args",
    "run_bench",
]

MB = 1024 * 1024
#: the acceptance target of ``scale1000``: peak process memory below this
SCALE_TARGET_BYTES = 3 * 1024**3
#: ... and with more than 1,000 clients (10,000: one round under 4 GB)
SCALE_TARGET_LARGE_BYTES = 4 * 1024**3


def scale_target(clients: int) -> int:
    """The peak-memory target of a scale round with ``clients`` clients."""
    return SCALE_TARGET_BYTES if clients <= 1000 else SCALE_TARGET_LARGE_BYTES


# ----------------------------------------------------------------------------- workloads
@dataclass(frozen=True)
class Workload:
    """One benchmark: a method, a model and its federation settings on the shared partition."""

    name: str
    title: str
    algorithm: dict[str, Any]
    model: str = "fedavgcnn"
    federation: dict[str, Any] = field(default_factory=dict)
    all_clients: bool = False  # decentralized: every client trains every round
    scale: bool = False  # time and memory of one default-backend round only


#: the fedseqlayer paper's MNIST protocol (configs/centralized/fedper.yaml)
FEDSEQLAYER = {
    "join_ratio": 0.1,
    "local_epochs": 1,
    "batch_size": 10,
    "lr": 0.005,
    "drop_last": True,
}

WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload("fedavg", "FedAvg", {"name": "fedavg"}),
        Workload("fedper", "FedPer", {"name": "fedper"}),
        Workload("fedrep", "FedRep (1 head epoch, then 1 body epoch)", {"name": "fedrep"}),
        Workload(
            "lenet5",
            "FedAvg with LeNet5 (BatchNorm), FedCMD protocol (batch 32, 5 local epochs)",
            {"name": "fedavg"},
            model="lenet5",
            federation={"batch_size": 32, "local_epochs": 5},
        ),
        Workload(
            "dfedpgp",
            "DFedPGP (decentralized push-sum over a time-varying kout-10 graph; every client "
            "trains every round: 1 head epoch, then 1 body epoch)",
            {"name": "dfedpgp"},
            federation={"momentum": 0.9, "weight_decay": 0.005},
            all_clients=True,
        ),
        Workload("scale1000", "FedPer at scale", {"name": "fedper"}, scale=True),
    )
}

#: the workloads ``--device cuda`` runs by default (the FedAvgCNN ones; LeNet5 may be named)
DEVICE_WORKLOADS = ["fedavg", "fedper", "fedrep", "dfedpgp"]

#: the variant kinds ``--variants`` selects from (``processes`` also brings the sequential
#: variants at more threads that the process variants are compared with)
VARIANT_KINDS = ("naive", "sequential", "batched", "processes", "ceiling")
#: ... and those that run on a GPU (the naive loop and the worker processes are CPU designs)
DEVICE_VARIANTS = ("sequential", "batched", "ceiling")

#: per dataset: (clients, min_size, scale clients, scale min_size)
DATASET_DEFAULTS: dict[str, tuple[int, int, int, int]] = {
    "mnist": (100, 40, 1000, 0),
    "fmnist": (100, 40, 1000, 0),
    "digits": (20, 10, 100, 2),
}


@dataclass
class BenchOptions:
    """The parsed command line."""

    workloads: list[str]
    repeats: int = 3
    threads: int = 1
    data_root: str | None = None
    dataset: str = "mnist"
    clients: int | None = None
    min_size: int | None = None
    scale_clients: int | None = None
    scale_min_size: int | None = None
    #: Dirichlet α of the scale workload's partition (the others use 0.1)
    scale_alpha: float = 0.1
    seed: int = 0
    out: str | None = None
    argv: list[str] = field(default_factory=list)
    #: worker counts of the process-backend variants (one variant per count)
    workers: list[int] = field(default_factory=list)
    #: ``cpu``, ``cuda`` or ``cuda:N``: where the engine, the ceiling and their data run
    device: str = "cpu"
    #: the variant kinds to run (:data:`VARIANT_KINDS`); every kind by default
    variants: list[str] = field(default_factory=lambda: list(VARIANT_KINDS))
    #: ``engine.deterministic`` of the engine's runs; ``None``: the config's default
    deterministic: bool | None = None

    @property
    def on_gpu(self) -> bool:
        return self.device.startswith("cuda")

    def resolved_root(self) -> str:
        if self.data_root:
            return self.data_root
        repo = Path(__file__).resolve().parents[3]
        if (repo / "pyproject.toml").is_file():
            return str((repo.parent / "shared" / "data").resolve())
        return "../shared/data"

    def partition(self, scale: bool) -> tuple[int, int]:
        clients, min_size, s_clients, s_min = DATASET_DEFAULTS[self.dataset]
        if scale:
            return (self.scale_clients or s_clients, self._or(self.scale_min_size, s_min))
        return (self.clients or clients, self._or(self.min_size, min_size))

    @staticmethod
    def _or(value: int | None, default: int) -> int:
        return default if value is None else value


def workload_config(w: Workload, opts: BenchOptions, backend: str, workers: int = 0) -> Config:
    """The :class:`Config` of a workload (the fedseqlayer protocol plus the workload's changes);
    the process backend runs ``workers`` workers of one thread each."""
    clients, min_size = opts.partition(w.scale)
    engine: dict[str, Any] = (
        {"backend": backend, "threads": 1, "workers": workers}
        if backend == "processes"
        else {"backend": backend, "threads": opts.threads}
    )
    if opts.device != "cpu":
        engine["device"] = opts.device
    if opts.deterministic is not None:
        engine["deterministic"] = opts.deterministic
    model: dict[str, Any] = {"name": w.model}
    if opts.dataset == "digits" and w.model == "fedavgcnn":
        model["padding"] = 2
    return Config.from_dict(
        {
            "seed": opts.seed,
            "dataset": {
                "name": opts.dataset,
                "root": opts.resolved_root(),
                "merge_test": True,
                "download": False,
            },
            "partition": {
                "kind": "dirichlet",
                "num_clients": clients,
                "alpha": opts.scale_alpha if w.scale else 0.1,
                "min_size": min_size,
                "split": [0.75, 0.0, 0.25],
            },
            "model": model,
            "algorithm": dict(w.algorithm),
            "federation": {**FEDSEQLAYER, **w.federation, "rounds": 1 + opts.repeats},
            "engine": engine,
            "output": {"checkpoint_every": 0},
        }
    )


# ----------------------------------------------------------------------------- memory
def rss_bytes() -> int:
    """The resident set size of this process (0 where ``/proc`` is missing)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def release_memory(device: torch.device | None = None) -> None:
    """Collect garbage and hand freed heap memory back to the OS (glibc), best effort; on a
    CUDA ``device`` also hand the caching allocator's free blocks back."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    if device is not None and device.type == "cuda":
        torch.cuda.empty_cache()


def children_rss_bytes(page: int = 4096) -> int:
    """The summed resident set size of this process's child processes (worker processes; 0
    where ``/proc`` is missing). Pages shared with this process (the data pool in shared memory)
    are counted in every process that maps them, so the sum is an upper bound."""
    total = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 0
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/children", "rb") as f:
                pids = f.read().split()
        except OSError:
            continue
        for pid in pids:
            try:
                with open(f"/proc/{int(pid)}/statm", "rb") as f:
                    total += int(f.read().split()[1]) * page
            except (OSError, ValueError, IndexError):
                continue
    return total


class RssSampler:
    """Samples the process RSS every ``interval`` seconds in a background thread.

    ``baseline``: the RSS when entered; ``peak``: the highest RSS seen (the last sample is taken
    on exit); ``delta``: ``peak - baseline``. With ``children=True`` every sample adds the RSS of
    the child processes (:func:`children_rss_bytes`).
    """

    def __init__(self, interval: float = 0.01, children: bool = False) -> None:
        self.children = children
        self.interval = interval
        self.baseline = 0
        self.peak = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

    def _run(self) -> None:
        try:
            f = open("/proc/self/statm", "rb", buffering=0)  # noqa: SIM115 - kept open to sample
        except OSError:
            return
        with f:
            while not self._stop.is_set():
                f.seek(0)
                value = int(f.read().split()[1]) * self._page
                if self.children:
                    value += children_rss_bytes(self._page)
                if value > self.peak:
                    self.peak = value
                self._stop.wait(self.interval)

    def __enter__(self) -> RssSampler:
        self.baseline = rss_bytes()
        self.peak = self.baseline
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        last = rss_bytes() + (children_rss_bytes(self._page) if self.children else 0)
        self.peak = max(self.peak, last)
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    @property
    def delta(self) -> int:
        return max(0, self.peak - self.baseline)


# ----------------------------------------------------------------------------- devices
def check_device(name: str) -> torch.device:
    """``name`` as a :class:`torch.device` this process can compute on, else a one-line
    :class:`FedpartError` naming the cause (asked before any data is loaded)."""
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError) as exc:
        raise FedpartError(f"--device: expected cpu, cuda or cuda:N, got {name!r}") from exc
    if device.type not in ("cpu", "cuda"):
        raise FedpartError(f"--device: expected cpu, cuda or cuda:N, got {name!r}")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            why = (
                f"this torch build ({torch.__version__}) has no CUDA support"
                if torch.version.cuda is None
                else f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU"
            )
            raise FedpartError(
                f"--device {name}: CUDA was requested but no GPU is available: {why}; "
                "use --device cpu"
            )
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise FedpartError(
                f"--device {name}: only {count} GPU(s) are visible (cuda:0 to cuda:{count - 1})"
            )
    return device


def synchronize(device: torch.device | None) -> None:
    """Wait for the work queued on ``device`` (a CUDA device) to finish; nothing elsewhere.
    Called before every timer read, as CUDA kernels run asynchronously."""
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


class GpuPeak:
    """The peak GPU memory allocated by this process during a block: the peak statistics are
    reset on entry (``torch.cuda.reset_peak_memory_stats``) and read on exit
    (``torch.cuda.max_memory_allocated``), both after a synchronisation. ``baseline``: the memory
    allocated on entry; ``delta``: ``peak - baseline``. Off a CUDA device every value is ``None``.
    """

    def __init__(self, device: torch.device | None) -> None:
        self.device = device if device is not None and device.type == "cuda" else None
        self.baseline: int | None = None
        self.peak: int | None = None

    def __enter__(self) -> GpuPeak:
        if self.device is not None:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.baseline = torch.cuda.memory_allocated(self.device)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.device is not None:
            torch.cuda.synchronize(self.device)
            self.peak = torch.cuda.max_memory_allocated(self.device)

    @property
    def delta(self) -> int | None:
        if self.peak is None or self.baseline is None:
            return None
        return max(0, self.peak - self.baseline)


def _max(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else max(a, b)


# ----------------------------------------------------------------------------- variants
class Runner(Protocol):
    backend: str

    def train_round(self, rnd: int) -> int: ...

    def evaluate(self) -> dict[str, Any] | None: ...


class EngineRunner:
    """fedpart's Simulation, counting the client-samples its local updates trained on.
    ``threads``, when given, is the torch intra-op thread count this variant's rounds run with
    (set before and restored after each call, so variants with different counts interleave)."""

    def __init__(self, cfg: Config, data: FederatedData, threads: int | None = None) -> None:
        from fedpart.engine.simulation import Simulation

        self.threads = threads
        with self._threads():
            self.sim = Simulation(cfg, data=data)
        self.backend = self.sim.backend
        self.samples = 0
        inner = self.sim.train_clients

        def counting(rnd: int, clients: list[int]) -> Any:
            results, stats = inner(rnd, clients)
            self.samples += sum(r.samples for r in results.values())
            return results, stats

        self.sim.train_clients = counting  # type: ignore[method-assign]

    @contextlib.contextmanager
    def _threads(self) -> Iterator[None]:
        before = torch.get_num_threads()
        if self.threads is not None:
            torch.set_num_threads(self.threads)
        try:
            yield
        finally:
            torch.set_num_threads(before)

    def train_round(self, rnd: int) -> int:
        self.samples = 0
        with self._threads():
            self.sim.run_round(rnd)
        return self.samples

    def evaluate(self) -> dict[str, Any]:
        with self._threads():
            return self.sim.evaluate()


class NaiveRunner:
    backend = "naive (PFLlib/FL-bench style)"

    def __init__(self, cfg: Config, data: FederatedData) -> None:
        from fedpart.bench.naive import NaiveFederation

        self.fed = NaiveFederation(cfg, data)

    def train_round(self, rnd: int) -> int:
        return self.fed.train_round(rnd)

    def evaluate(self) -> dict[str, Any]:
        return self.fed.evaluate()


class CeilingRunner:
    def __init__(
        self,
        cfg: Config,
        data: FederatedData,
        batch_size: int,
        samples: dict[int, int],
        device: torch.device | None = None,
    ) -> None:
        from fedpart.bench.naive import CentralCeiling

        self.backend = f"central SGD, batch {batch_size}"
        self.ceiling = CentralCeiling(cfg, data, batch_size, device=device)
        self.samples = samples

    def train_round(self, rnd: int) -> int:
        return self.ceiling.train_round(rnd, self.samples[rnd])

    def evaluate(self) -> None:
        return None


@dataclass
class VariantResult:
    """One variant's measurements (medians over the timed rounds); ``na`` when not run."""

    variant: str
    backend: str = ""
    na: str | None = None
    samples_per_round: float = math.nan
    samples_per_s: float = math.nan
    train_s: float = math.nan
    eval_s: float | None = math.nan
    end_to_end_s: float = math.nan
    setup_s: float = math.nan
    peak_delta_bytes: int = 0
    peak_bytes: int = 0
    #: GPU memory (``None`` off CUDA): the set-up and warm-up round's increment, the largest
    #: working memory of a timed round (its peak minus the memory allocated when it began) and
    #: the highest allocation seen in any of them
    gpu_peak_delta_bytes: int | None = None
    gpu_round_bytes: int | None = None
    gpu_peak_bytes: int | None = None
    accuracy: float | None = None
    rounds: list[dict[str, float]] = field(default_factory=list)


@dataclass
class _Live:
    """A variant being measured: its runner, its set-up measurements and its timed rounds."""

    variant: str
    runner: Runner
    setup_s: float
    peak_delta_bytes: int
    peak_bytes: int
    has_eval: bool = True
    accuracy: float | None = None
    rows: list[dict[str, float]] = field(default_factory=list)
    #: the device the variant computes on: timers are read after synchronising it
    device: torch.device | None = None
    gpu_peak_delta_bytes: int | None = None
    gpu_round_bytes: int | None = None
    gpu_peak_bytes: int | None = None

    def round(self, rnd: int, timed: bool) -> None:
        """One round (training, then evaluation), timed; on a GPU the round's peak memory is
        measured too (its own reset: the warm-up round is measured with the set-up instead)."""
        with GpuPeak(self.device if timed else None) as gpu:
            synchronize(self.device)
            t0 = time.perf_counter()
            samples = self.runner.train_round(rnd)
            synchronize(self.device)
            t1 = time.perf_counter()
            row = self.runner.evaluate()
            synchronize(self.device)
            t2 = time.perf_counter()
        self.gpu_round_bytes = _max(self.gpu_round_bytes, gpu.delta)
        self.gpu_peak_bytes = _max(self.gpu_peak_bytes, gpu.peak)
        self.has_eval = row is not None
        if row is not None and row.get("accuracy") is not None:
            self.accuracy = float(row["accuracy"])
        if timed:
            self.rows.append(
                {"round": rnd, "samples": samples, "train_s": t1 - t0, "eval_s": t2 - t1}
            )

    def result(self) -> VariantResult:
        med, rows = statistics.median, self.rows
        return VariantResult(
            variant=self.variant,
            backend=self.runner.backend,
            samples_per_round=med(r["samples"] for r in rows),
            samples_per_s=med(r["samples"] / r["train_s"] for r in rows),
            train_s=med(r["train_s"] for r in rows),
            eval_s=med(r["eval_s"] for r in rows) if self.has_eval else None,
            end_to_end_s=med(r["train_s"] + r["eval_s"] for r in rows),
            setup_s=self.setup_s,
            peak_delta_bytes=self.peak_delta_bytes,
            peak_bytes=self.peak_bytes,
            gpu_peak_delta_bytes=self.gpu_peak_delta_bytes,
            gpu_round_bytes=self.gpu_round_bytes,
            gpu_peak_bytes=self.gpu_peak_bytes,
            accuracy=self.accuracy,
            rounds=rows,
        )


def start_variant(
    variant: str, make: Callable[[], Runner], device: torch.device | None = None
) -> _Live:
    """Build a runner and run its warm-up round (round 0) under an RSS sampler (and, on a GPU,
    a :class:`GpuPeak`)."""
    release_memory(device)
    with RssSampler() as mem, GpuPeak(device) as gpu:
        synchronize(device)
        t0 = time.perf_counter()
        runner = make()
        synchronize(device)
        setup = time.perf_counter() - t0
        live = _Live(variant, runner, setup, 0, 0, device=device)
        live.round(0, timed=False)
    live.peak_delta_bytes, live.peak_bytes = mem.delta, mem.peak
    live.gpu_peak_delta_bytes, live.gpu_peak_bytes = gpu.delta, gpu.peak
    return live


def measure_interleaved(
    plan: Sequence[tuple[str, Callable[[], Runner]]],
    repeats: int,
    device: torch.device | None = None,
) -> list[VariantResult]:
    """Set every variant up (with its warm-up round, one at a time, for memory), then run the
    timed rounds interleaved: round ``r`` of every variant before round ``r + 1`` of any, the
    starting variant rotating, so that a slow spell of a shared machine falls on all variants
    rather than on whichever happened to run then. On a GPU (``device``) every timer is read
    after synchronising it."""
    live = [start_variant(variant, make, device) for variant, make in plan]
    if not live:  # e.g. --variants batched on a model that cannot be batched
        return []
    for rnd in range(1, repeats + 1):
        shift = (rnd - 1) % len(live)
        for item in live[shift:] + live[:shift]:
            item.round(rnd, timed=True)
    results = [item.result() for item in live]
    del live
    release_memory(device)
    return results


@dataclass
class WorkloadResult:
    """The rows of one workload, or the reason it was skipped."""

    workload: Workload
    description: str
    variants: list[VariantResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: str | None = None
    scale: dict[str, Any] | None = None
    #: clients of the partition (0 when skipped)
    clients: int = 0


# ----------------------------------------------------------------------------- running
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
            f"shared by them: {_mb(moved.delta)} MB, outside the memory columns"
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
    measured = {v.variant: v for v in measure_interleaved(runnable, opts.repeats, device)}
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
        )
        result.variants.append(v)
    result.notes += parallel_efficiency(result.variants)
    result.notes += batched_ratios(result.variants)
    counts = {v.variant: v.samples_per_round for v in result.variants if v.na is None}
    if len(set(counts.values())) > 1:
        shown = ", ".join(f"{k} {c:,.0f}" for k, c in counts.items())
        result.notes.append(f"WARNING: the variants trained different sample counts: {shown}")
    return result


def speed_ratio(a: VariantResult | None, b: VariantResult | None, what: str) -> float | None:
    """How much faster variant ``a`` is than ``b`` (above 1: ``a`` is faster), by training
    throughput (``what="train"``: samples/s) or by end-to-end time per round (``"end-to-end"``);
    ``None`` where either was not measured."""
    if a is None or b is None or a.na is not None or b.na is not None:
        return None
    if what == "train":
        x, y = a.samples_per_s, b.samples_per_s
    else:
        if not a.eval_s or not b.eval_s:
            return None
        x, y = b.end_to_end_s, a.end_to_end_s
    if not (x > 0 and y > 0) or math.isnan(x) or math.isnan(y):
        return None
    return x / y


def batched_ratios(variants: Sequence[VariantResult]) -> list[str]:
    """One note with batched / sequential (training throughput and end-to-end time) and batched /
    ceiling (training throughput), where those variants ran."""
    by = {v.variant: v for v in variants if v.na is None}
    batched = by.get("batched")
    if batched is None:
        return []
    parts = []
    seq = by.get("sequential")
    train, e2e = speed_ratio(batched, seq, "train"), speed_ratio(batched, seq, "end-to-end")
    if train is not None and seq is not None:
        part = f"batched / sequential: training throughput {train:.2f}x"
        if e2e is not None:
            part += (
                f", end-to-end {e2e:.2f}x ({seq.end_to_end_s:.3f} s -> "
                f"{batched.end_to_end_s:.3f} s per round)"
            )
        parts.append(part)
    ceil = speed_ratio(batched, by.get("ceiling"), "train")
    if ceil is not None:
        parts.append(f"batched / ceiling: training throughput {ceil:.2f}x")
    return ["; ".join(parts)] if parts else []


def gpu_targets(results: Sequence[WorkloadResult], device: str) -> list[tuple[str, str, str]]:
    """The GPU targets of the bench, as (target, measured, met) rows:

    * FedPer: the batched backend's training throughput at least 5x the sequential backend's;
    * DFedPGP with 100 clients: one round (``run_round``: local training of every client and the
      push-sum mixing; evaluation excluded, shown alongside) under 1 s with the batched backend
      (``engine.backend=auto`` on a GPU).

    ``met`` is ``yes`` / ``no`` on a GPU, ``not a GPU`` on the CPU (the targets are the GPU's) and
    ``not measured`` where the workload or variant did not run."""
    by = {r.workload.name: r for r in results}
    gpu = device.startswith("cuda")
    rows: list[tuple[str, str, str]] = []

    def variants(name: str) -> dict[str, VariantResult]:
        r = by.get(name)
        if r is None or r.skipped:
            return {}
        return {v.variant: v for v in r.variants if v.na is None}

    v = variants("fedper")
    ratio = speed_ratio(v.get("batched"), v.get("sequential"), "train")
    target = "FedPer: batched training throughput >= 5x sequential"
    if ratio is None:
        rows.append((target, "—", "not measured"))
    else:
        seq, bat = v["sequential"], v["batched"]
        measured = f"{ratio:.2f}x ({seq.samples_per_s:,.0f} -> {bat.samples_per_s:,.0f} samples/s)"
        rows.append((target, measured, ("yes" if ratio >= 5 else "no") if gpu else "not a GPU"))

    v = variants("dfedpgp")
    r = by.get("dfedpgp")
    clients = r.clients if r is not None else 0
    target = "DFedPGP, 100 clients: one round (training + mixing) < 1 s, batched"
    bat = v.get("batched")
    if bat is None or clients != 100:
        why = "not measured" if clients in (0, 100) else f"not measured ({clients} clients)"
        rows.append((target, "—", why))
    else:
        measured = (
            f"{bat.train_s:.3f} s (with the evaluation of all clients: {bat.end_to_end_s:.3f} s)"
        )
        rows.append(
            (target, measured, ("yes" if bat.train_s < 1 else "no") if gpu else "not a GPU")
        )
    return rows


def parallel_efficiency(variants: Sequence[VariantResult]) -> list[str]:
    """One note per process-backend variant: its end-to-end speed-up over the sequential variant
    (one thread) and the parallel efficiency (speed-up / workers), then its speed-up over the best
    single-process variant (sequential at any thread count, or batched). Worker processes' memory
    is not in the memory columns, which measure this (the driver) process."""
    by = {v.variant: v for v in variants if v.na is None}
    seq = by.get("sequential")
    single = [
        v
        for name, v in by.items()
        if (name.startswith("sequential") or name == "batched") and v.end_to_end_s
    ]
    best = min(single, key=lambda v: v.end_to_end_s) if single else None
    notes = []
    for name, v in by.items():
        if not name.startswith("processes x") or seq is None or not v.end_to_end_s:
            continue
        n = int(name.rsplit("x", 1)[1])
        speedup = seq.end_to_end_s / v.end_to_end_s
        note = (
            f"{name}: end-to-end {speedup:.2f}x the sequential variant, parallel efficiency "
            f"{speedup / n:.0%}"
        )
        if best is not None:
            note += (
                f"; {best.end_to_end_s / v.end_to_end_s:.2f}x the best single-process variant "
                f"({best.variant})"
            )
        notes.append(note + " (memory columns: the driver process only)")
    return notes


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


# ----------------------------------------------------------------------------- report
def machine_info(threads: int) -> list[str]:
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        usable = os.cpu_count() or 0
    try:
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover
        load = "n/a"
    mem = ""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = f", {int(line.split()[1]) / 1024**2:.1f} GiB RAM"
                break
    return [
        f"- machine: {model}, {os.cpu_count()} cores ({usable} usable){mem}; "
        f"{platform.system()} {platform.release()}",
        f"- Python {platform.python_version()}, torch {torch.__version__}, "
        f"torch threads {threads} (intra-op, set once for all variants)",
        f"- load average (1, 5, 15 min) at the start: {load}",
    ]


def determinism_settings() -> dict[str, Any]:
    """The process's determinism switches as they stand now (set by the engine's runs under
    ``engine.deterministic``): cuDNN's deterministic and benchmark flags, torch's deterministic
    algorithms, TF32 in matrix products and cuDNN, and ``CUBLAS_WORKSPACE_CONFIG``."""
    return {
        "cudnn.deterministic": torch.backends.cudnn.deterministic,
        "cudnn.benchmark": torch.backends.cudnn.benchmark,
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG") or "(unset)",
    }


def device_lines(device: str, deterministic: bool | None = None) -> list[str]:
    """Report lines naming the device: on CUDA the GPU's name, memory and compute capability,
    torch's CUDA and cuDNN versions and the determinism settings in effect (``deterministic``:
    the ``engine.deterministic`` the runs were given, ``None`` for the config's default)."""
    dev = torch.device(device)
    switches = ", ".join(f"{k}={v}" for k, v in determinism_settings().items())
    given = "the config's default" if deterministic is None else str(deterministic).lower()
    if dev.type != "cuda":
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        return [
            f"- device: {device} (no GPU used)",
            f"- CUDA: {torch.version.cuda or 'none (a CPU build of torch)'}, "
            f"cuDNN: {cudnn or 'n/a'}",
            f"- engine.deterministic: {given} (it acts on CUDA only); switches: {switches}",
        ]
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return [
        f"- device: {torch.cuda.get_device_name(index)} (cuda:{index}), "
        f"{props.total_memory / 1024**3:.1f} GiB, compute capability {props.major}.{props.minor}; "
        f"{torch.cuda.device_count()} GPU(s) visible",
        f"- CUDA {torch.version.cuda or 'n/a'} (torch's build), cuDNN {cudnn or 'n/a'}",
        f"- engine.deterministic: {given}; in effect after the runs: {switches}",
    ]


def _num(x: float | None, fmt: str) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return format(x, fmt)


def _ratio(a: float, b: float) -> str:
    if not (a > 0 and b > 0) or math.isnan(a) or math.isnan(b):
        return "—"
    return f"{a / b:.2f}×"


COLUMNS = [
    "variant",
    "backend",
    "client-samples/round",
    "samples/s (train)",
    "train s/round",
    "eval s/round",
    "end-to-end s/round",
    "setup s",
    "peak Δ RSS MB",
    "peak RSS MB",
    "train speed vs naive",
    "end-to-end vs naive",
    "train speed vs ceiling",
    "accuracy %",
]

#: the columns of a workload on a GPU: GPU memory, and speed against the sequential backend
DEVICE_COLUMNS = [
    "variant",
    "backend",
    "client-samples/round",
    "samples/s (train)",
    "train s/round",
    "eval s/round",
    "end-to-end s/round",
    "setup s",
    "peak Δ GPU MB",
    "round Δ GPU MB",
    "peak GPU MB",
    "peak RSS MB",
    "train speed vs sequential",
    "end-to-end vs sequential",
    "train speed vs ceiling",
    "accuracy %",
]

SCALE_COLUMNS = [
    "backend",
    "clients",
    "trained / round",
    "partition s",
    "setup s",
    "train s",
    "eval s (all clients)",
    "end-to-end s",
    "peak Δ RSS MB",
    "peak RSS MB",
    "peak RSS by end of training MB",
    "personal state MB",
    "peak under target",
]


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def workload_table(result: WorkloadResult) -> list[str]:
    by = {v.variant: v for v in result.variants if v.na is None}
    naive = by.get("naive")
    ceiling = by.get("ceiling")
    rows = []
    for v in result.variants:
        if v.na is not None:
            rows.append([v.variant, v.na] + ["—"] * (len(COLUMNS) - 2))
            continue
        vs_naive = _ratio(v.samples_per_s, naive.samples_per_s) if naive else "—"
        e2e_naive = _ratio(naive.end_to_end_s, v.end_to_end_s) if naive and v.eval_s else "—"
        vs_ceiling = _ratio(v.samples_per_s, ceiling.samples_per_s) if ceiling else "—"
        rows.append(
            [
                v.variant,
                v.backend,
                _num(v.samples_per_round, ",.0f"),
                _num(v.samples_per_s, ",.0f"),
                _num(v.train_s, ".3f"),
                _num(v.eval_s, ".3f"),
                _num(v.end_to_end_s, ".3f"),
                _num(v.setup_s, ".2f"),
                _num(v.peak_delta_bytes / MB, ",.0f"),
                _num(v.peak_bytes / MB, ",.0f"),
                vs_naive,
                e2e_naive,
                vs_ceiling,
                _num(None if v.accuracy is None else 100 * v.accuracy, ".2f"),
            ]
        )
    return _table(COLUMNS, rows)


def _mb(value: int | None) -> str:
    return "—" if value is None else f"{value / MB:,.0f}"


def _x(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}×"


def device_workload_table(result: WorkloadResult) -> list[str]:
    """The table of a workload measured on a GPU (:data:`DEVICE_COLUMNS`)."""
    by = {v.variant: v for v in result.variants if v.na is None}
    seq, ceiling = by.get("sequential"), by.get("ceiling")
    rows = []
    for v in result.variants:
        if v.na is not None:
            rows.append([v.variant, v.na] + ["—"] * (len(DEVICE_COLUMNS) - 2))
            continue
        rows.append(
            [
                v.variant,
                v.backend,
                _num(v.samples_per_round, ",.0f"),
                _num(v.samples_per_s, ",.0f"),
                _num(v.train_s, ".3f"),
                _num(v.eval_s, ".3f"),
                _num(v.end_to_end_s, ".3f"),
                _num(v.setup_s, ".2f"),
                _mb(v.gpu_peak_delta_bytes),
                _mb(v.gpu_round_bytes),
                _mb(v.gpu_peak_bytes),
                _num(v.peak_bytes / MB, ",.0f"),
                _x(speed_ratio(v, seq, "train")),
                _x(speed_ratio(v, seq, "end-to-end")),
                _x(speed_ratio(v, ceiling, "train")),
                _num(None if v.accuracy is None else 100 * v.accuracy, ".2f"),
            ]
        )
    return _table(DEVICE_COLUMNS, rows)


def targets_table(rows: Sequence[tuple[str, str, str]]) -> list[str]:
    return _table(["target", "measured", "met?"], [list(r) for r in rows])


def scale_table(s: dict[str, Any]) -> list[str]:
    row = [
        s["backend"],
        f"{s['clients']:,}",
        f"{s['participants']:,}",
        f"{s['partition_s']:.2f}",
        f"{s['setup_s']:.2f}",
        f"{s['train_s']:.3f}",
        f"{s['eval_s']:.3f}",
        f"{s['end_to_end_s']:.3f}",
        f"{s['peak_delta_bytes'] / MB:,.0f}",
        f"{s['peak_bytes'] / MB:,.0f}",
        f"{s['train_peak_bytes'] / MB:,.0f}",
        f"{s['personal_bytes'] / MB:,.1f}",
        ("yes" if s["peak_bytes"] < scale_target(s["clients"]) else "NO")
        + f" (< {scale_target(s['clients']) // 1024**3} GB)",
    ]
    return _table(SCALE_COLUMNS, [row])


#: the column legend of a GPU report
DEVICE_LEGEND = (
    "Columns: *client-samples/round* = samples trained on per round summed over clients, phases "
    "and epochs (the same for every variant); *samples/s* = that over the training time; "
    "*train* = local training + aggregation or mixing (`run_round`); *eval* = every client's "
    "personalised model on its own test split; every time is read after "
    "`torch.cuda.synchronize()`, timed rounds interleaved across the variants; *peak Δ GPU* = the "
    "peak of `torch.cuda.max_memory_allocated` during the variant's set-up and warm-up round "
    "minus the memory allocated before it (its own increment; the data pool is moved onto the "
    "GPU once per workload before, its size is in the notes); *round Δ GPU* = the largest working memory of a timed round (its "
    "peak minus the memory allocated when it began); *peak GPU* = the highest allocation seen in "
    "any of them, peak statistics reset before each (it also holds the variants set up before "
    "it); *peak RSS* = the process's host memory; *vs sequential* / *vs ceiling* = speed ratios "
    "(higher is faster); the *ceiling* is one model trained centrally on the GPU on as many "
    "samples per round as the federation trains, batch = clients per round x local batch: the "
    "arithmetic of one batched step of every client without per-client weights or engine "
    "overhead; *accuracy* = mean per-client accuracy after the last timed round (a check that "
    "every loop learns, not a result)."
)


def format_report(opts: BenchOptions, results: Sequence[WorkloadResult], wall_s: float) -> str:
    lines = ["# fedpart bench" + (f" on {opts.device}" if opts.on_gpu else ""), ""]
    lines += machine_info(opts.threads)
    if opts.on_gpu:
        lines += device_lines(opts.device, opts.deterministic)
    lines.append(f"- command: `{shlex.join(['fedpart', 'bench', *opts.argv])}`")
    lines.append(
        f"- data: {opts.dataset}"
        + ("" if opts.dataset == "digits" else f" from `{opts.resolved_root()}`")
        + f"; seed {opts.seed}; 1 warm-up round, then {opts.repeats} timed round(s), medians"
    )
    lines.append(f"- total wall time: {wall_s:.1f} s")
    if opts.on_gpu:
        lines += ["", DEVICE_LEGEND, "", "## targets", ""]
        lines += targets_table(gpu_targets(results, opts.device))
        for r in results:
            lines += ["", f"## {r.workload.name}", ""]
            if r.skipped:
                lines.append(f"skipped: {r.skipped}")
                continue
            lines += [r.description, ""]
            lines += device_workload_table(r)
            if r.notes:
                lines.append("")
                lines += [f"- {n}" for n in r.notes]
        return "\n".join(lines) + "\n"
    lines += [
        "",
        "Columns: *client-samples/round* = samples trained on per round summed over clients, "
        "phases and epochs (the same for every variant); *samples/s* = that over the training "
        "time; *train* = local training + aggregation (`run_round`); *eval* = every client's "
        "personalised model on its own test split; timed rounds interleaved across the variants; "
        "*peak Δ RSS* = peak resident memory during the variant's set-up and warm-up round minus "
        "the RSS before it (its own increment; *peak RSS* also holds the variants set up before "
        "it); *vs naive* / *vs ceiling* = "
        "speed ratios (higher is faster); *accuracy* = mean per-client accuracy after the last "
        "timed round (a check that every loop learns, not a result).",
    ]
    for r in results:
        lines += ["", f"## {r.workload.name}", ""]
        if r.skipped:
            lines.append(f"skipped: {r.skipped}")
            continue
        lines += [r.description, ""]
        if r.scale is not None:
            lines += scale_table(r.scale)
            acc = r.scale.get("accuracy")
            lines += [
                "",
                "One round of `engine.backend=auto` (training of the sampled clients + "
                "aggregation), then evaluation of every client; no warm-up; peak RSS is the "
                "whole process's plus its worker processes' (pages of the shared data pool "
                "counted once per process: an upper bound). Accuracy after the round: "
                f"{_num(None if acc is None else 100 * acc, '.2f')} %.",
            ]
            continue
        lines += workload_table(r)
        if r.notes:
            lines.append("")
            lines += [f"- {n}" for n in r.notes]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- CLI
def _workload_list(text: str) -> list[str]:
    if text.strip() in ("", "all"):
        return list(WORKLOADS)
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown workload(s) {', '.join(unknown)}; valid: {', '.join(WORKLOADS)}"
        )
    return list(dict.fromkeys(names))


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text}")
    return value


def build_parser(prog: str = "fedpart bench") -> argparse.ArgumentParser:
    from fedpart.errors import OneLineParser  # usage errors as one line, like every fedpart error

    p = OneLineParser(
        prog=prog,
        description="Time and memory of fedpart's engine (sequential and batched backends) "
        "against a PFLlib/FL-bench-style loop and a centralized training ceiling; with --device "
        "cuda, the sequential and batched backends and the ceiling on a GPU.",
    )
    p.add_argument(
        "--workloads",
        type=_workload_list,
        default=None,
        help=f"comma-separated, default all: {', '.join(WORKLOADS)} (on a GPU: "
        f"{', '.join(DEVICE_WORKLOADS)})",
    )
    p.add_argument(
        "--device",
        type=_device,
        default="cpu",
        help="cpu (default), cuda or cuda:N: where the engine, the ceiling and their data run; "
        "on a GPU the variants are sequential, batched and ceiling, memory is GPU memory",
    )
    p.add_argument(
        "--variants",
        type=_variant_list,
        default=None,
        help=f"comma-separated, from {', '.join(VARIANT_KINDS)} (default all; on a GPU "
        f"{', '.join(DEVICE_VARIANTS)})",
    )
    p.add_argument(
        "--deterministic",
        type=_bool,
        default=None,
        help="engine.deterministic of the engine's runs: true or false (default: the config's, "
        "true); on CUDA it pins cuDNN/cuBLAS kernels and turns TF32 off",
    )
    p.add_argument("--repeats", type=_positive, default=3, help="timed rounds (default 3)")
    p.add_argument("--threads", type=_positive, default=1, help="torch threads (default 1)")
    p.add_argument(
        "--data-root", default=None, help="dataset folder (default ../shared/data from the repo)"
    )
    p.add_argument(
        "--dataset",
        choices=sorted(DATASET_DEFAULTS),
        default="mnist",
        help="mnist (default), fmnist, or digits (bundled, offline; for quick runs)",
    )
    p.add_argument(
        "--clients", type=_positive, default=None, help="clients (default 100; digits 20)"
    )
    p.add_argument(
        "--min-size",
        type=_non_negative,
        default=None,
        help="Dirichlet min_size (default 40; digits 10)",
    )
    p.add_argument(
        "--scale-clients",
        type=_positive,
        default=None,
        help="clients of scale1000 (default 1000; digits 100)",
    )
    p.add_argument(
        "--scale-min-size",
        type=_non_negative,
        default=None,
        help="min_size of scale1000 (default 0: Dir(0.1) over 1,000 MNIST clients cannot give every client even 1 sample; digits 2)",
    )
    p.add_argument(
        "--scale-alpha",
        type=float,
        default=0.1,
        help="Dirichlet alpha of scale1000 (default 0.1; 10,000 MNIST clients that all hold data "
        "need e.g. 0.5 with --scale-min-size 5)",
    )
    p.add_argument(
        "--workers",
        type=_worker_list,
        default=None,
        help="worker counts of the process-backend variants, comma-separated (default: the "
        "number of cores when more than one; 0 or empty: none)",
    )
    p.add_argument("--seed", type=_non_negative, default=0, help="run seed (default 0)")
    p.add_argument("--out", default=None, help="also write the markdown report to this file")
    return p


def parse_args(argv: Sequence[str]) -> BenchOptions:
    parser = build_parser()
    args = parser.parse_args(list(argv))
    gpu = args.device != "cpu"
    workloads = args.workloads
    if workloads is None:
        workloads = list(DEVICE_WORKLOADS) if gpu else list(WORKLOADS)
    variants = args.variants
    if variants is None:
        variants = list(DEVICE_VARIANTS) if gpu else list(VARIANT_KINDS)
    if gpu:
        cpu_only = [v for v in variants if v not in DEVICE_VARIANTS]
        if cpu_only:
            parser.error(
                f"--variants: {', '.join(cpu_only)} run on the CPU only; with --device "
                f"{args.device} choose from {', '.join(DEVICE_VARIANTS)}"
            )
        if "scale1000" in workloads:
            parser.error(
                "--workloads: scale1000 measures the process memory of a CPU round; with "
                f"--device {args.device} choose from "
                f"{', '.join(n for n in WORKLOADS if not WORKLOADS[n].scale)}"
            )
        if args.workers:
            parser.error("--workers: the process backend runs on the CPU only")
    workers = args.workers
    if workers is None:
        workers = _default_workers() if "processes" in variants and not gpu else []
    return BenchOptions(
        workloads=workloads,
        repeats=args.repeats,
        threads=args.threads,
        data_root=args.data_root,
        dataset=args.dataset,
        clients=args.clients,
        min_size=args.min_size,
        scale_clients=args.scale_clients,
        scale_min_size=args.scale_min_size,
        scale_alpha=args.scale_alpha,
        seed=args.seed,
        out=args.out,
        argv=list(argv),
        workers=workers,
        device=args.device,
        variants=variants,
        deterministic=args.deterministic,
    )


def _device(text: str) -> str:
    """``cpu``, ``cuda`` or ``cuda:N`` (whether such a GPU is there is asked later:
    :func:`check_device`)."""
    name = text.strip().lower()
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        device = None
    if device is None or device.type not in ("cpu", "cuda") or name.startswith("cpu:"):
        raise argparse.ArgumentTypeError(f"expected cpu, cuda or cuda:N, got {text!r}")
    return name


def _variant_list(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in VARIANT_KINDS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown variant(s) {', '.join(unknown) or repr(text)}; valid: "
            f"{', '.join(VARIANT_KINDS)}"
        )
    return [n for n in VARIANT_KINDS if n in names]


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _default_workers() -> list[int]:
    from fedpart.engine.parallel import default_workers

    cores = default_workers()
    return [cores] if cores > 1 else []


def _worker_list(text: str) -> list[int]:
    if text.strip() in ("", "0"):
        return []
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected worker counts like 2 or 1,2,4, got {text!r}"
        ) from None
    if any(n < 1 for n in counts):
        raise argparse.ArgumentTypeError(f"worker counts must be >= 1, got {text!r}")
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    """``fedpart bench [options]``: ``argv`` holds the options after ``bench``
    (default ``sys.argv[1:]``). Prints the markdown report (progress goes to stderr);
    returns 0, or 2 on a usage error. A device that cannot run (``--device cuda`` without a GPU)
    raises :class:`FedpartError` before any work; ``fedpart bench`` prints it as one line."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        opts = parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return int(exc.code or 0)
    check_device(opts.device)
    t0 = time.perf_counter()

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    results = run_bench(opts, log)
    report = format_report(opts, results, time.perf_counter() - t0)
    print(report, end="")
    if opts.out:
        out = Path(opts.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(report)
    return 0
