"""Measuring the variants of a workload: the runners (fedpart's engine, the naive loop, the
centralized ceiling), their set-up and warm-up round under the memory samplers, and the timed
rounds interleaved across the variants (:func:`measure_interleaved`)."""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from fedpart.bench.devices import GpuPeak, synchronize
from fedpart.bench.dispatch import DispatchCounter
from fedpart.bench.memory import RssSampler, release_memory
from fedpart.bench.workloads import Workload
from fedpart.config import Config
from fedpart.engine.data import FederatedData


def _max(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else max(a, b)


class Runner(Protocol):
    backend: str

    def train_round(self, rnd: int) -> int: ...

    def evaluate(self) -> dict[str, Any] | None: ...


def in_process(runner: Runner) -> bool:
    """Whether a runner computes in this process (the process and Ray backends' local training
    runs elsewhere, where no dispatch mode of this process sees it)."""
    return not str(runner.backend).startswith(("processes", "ray"))


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
    #: the ATen operators and host synchronisations of one counted round (training, then
    #: evaluation; :class:`~fedpart.bench.dispatch.DispatchCounter`); ``None``: not counted
    ops_per_round: int | None = None
    syncs_per_round: int | None = None


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
    ops: int | None = None
    syncs: int | None = None

    def count(self, rnd: int) -> None:
        """Round ``rnd`` once more (training, then evaluation), untimed, under a
        :class:`~fedpart.bench.dispatch.DispatchCounter`: its operators and host
        synchronisations. A runner whose work runs in other processes is not counted."""
        if not in_process(self.runner):
            return
        with DispatchCounter(self.device or "cpu") as counter:
            self.runner.train_round(rnd)
            self.runner.evaluate()
        self.ops, self.syncs = counter.total_ops, counter.total_syncs

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
            ops_per_round=self.ops,
            syncs_per_round=self.syncs,
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
    count: bool = False,
) -> list[VariantResult]:
    """Set every variant up (with its warm-up round, one at a time, for memory), then run the
    timed rounds interleaved: round ``r`` of every variant before round ``r + 1`` of any, the
    starting variant rotating, so that a slow spell of a shared machine falls on all variants
    rather than on whichever happened to run then. On a GPU (``device``) every timer is read
    after synchronising it. With ``count``, every variant then runs the last timed round's
    index once more, untimed, under a dispatch counter (:meth:`_Live.count`): the same clients
    and steps as that round; the timings and the accuracy are those of the timed rounds."""
    live = [start_variant(variant, make, device) for variant, make in plan]
    if not live:  # e.g. --variants batched on a model that cannot be batched
        return []
    for rnd in range(1, repeats + 1):
        shift = (rnd - 1) % len(live)
        for item in live[shift:] + live[:shift]:
            item.round(rnd, timed=True)
    if count:
        for item in live:
            item.count(repeats)
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
