"""The bench's workloads and options: what each workload runs, the command line's parsed
options (:class:`BenchOptions`) and a workload's :class:`~fedpart.config.Config`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedpart.config import Config

#: the acceptance target of ``scale1000``: peak process memory below this
SCALE_TARGET_BYTES = 3 * 1024**3
#: ... and with more than 1,000 clients (10,000: one round under 4 GB)
SCALE_TARGET_LARGE_BYTES = 4 * 1024**3


def scale_target(clients: int) -> int:
    """The peak-memory target of a scale round with ``clients`` clients."""
    return SCALE_TARGET_BYTES if clients <= 1000 else SCALE_TARGET_LARGE_BYTES


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
    #: count the operators and host synchronisations of one extra, untimed round per variant
    counts: bool = True

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
