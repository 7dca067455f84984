"""Operators the quick start dispatches, method by method: its config's sequential backend
against the backend ``engine.backend=auto`` picks on a GPU.

``fedpart compare configs/quickstart.yaml engine.device=cuda`` trains a quarter-width CNN whose
steps are a few microseconds of arithmetic, so on a GPU a run costs what its launches cost. This
counts, on the CPU, the ATen operators (each a kernel launch on a GPU) and host synchronisations
of every method's first ``--rounds`` rounds and evaluations (:class:`fedpart.bench.dispatch.
DispatchCounter`), on the sequential backend the quick start's config pins and on the batched
backend where the method and model have one (what ``auto`` picks on CUDA), so the ratio of
launches a GPU would make with either is known without a GPU. The runs are made with
``engine.device=cuda`` on the test suite's fake CUDA device (``tests/fake_cuda.py``: the CPU's
kernels, CUDA's placement), so every choice the engine makes by device — the evaluation batch,
the evaluation in one pass, the folded average — is the GPU's. That device also counts the
blocking copies of host data onto it (``FakeCuda.host_writes``; the dispatch counter does not
see them), each of which makes a GPU's host wait for every kernel queued before it.

    python benchmarks/quickstart_ops.py                     # every method, 3 rounds
    python benchmarks/quickstart_ops.py --methods fedavg,fedper --rounds 2
    python benchmarks/quickstart_ops.py --methods pfedgate --sites 3   # where the copies are made

``--config`` counts another recipe instead (``--set`` overrides it), e.g. one round of Pa3dFL's
paper protocol (20 clients of different widths, 5 epochs of batch 50; Fashion-MNIST from
``../shared/data``):

    python benchmarks/quickstart_ops.py --config configs/pa3dfl/pa3dfl.yaml --methods pa3dfl \
        --rounds 1 --set dataset.root=../shared/data --sites 4
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections import Counter
from pathlib import Path

import torch

import fedpart
from fedpart.bench.dispatch import DispatchCounter
from fedpart.config import load_config
from fedpart.errors import FedpartError
from fedpart.registry import methods

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "configs" / "quickstart.yaml"
sys.path.insert(0, str(ROOT / "tests"))
from fake_cuda import FakeCuda, torch_switches_kept  # noqa: E402

PACKAGE = "/src/fedpart/"


class SitedCuda(FakeCuda):
    """The fake device, its blocking host-to-device copies also counted by the innermost source
    line of fedpart that made them (``sites``)."""

    def __init__(self) -> None:
        self.sites: Counter[str] = Counter()
        super().__init__()

    @property  # type: ignore[override]
    def host_writes(self) -> int:
        return self.__dict__.get("_writes", 0)

    @host_writes.setter
    def host_writes(self, value: int) -> None:
        if value:
            for frame in reversed(traceback.extract_stack()[:-1]):
                if PACKAGE in frame.filename and "/fedpart/bench/" not in frame.filename:
                    self.sites[f"{frame.filename.split(PACKAGE)[1]}:{frame.lineno}"] += 1
                    break
            else:
                self.sites["?"] += 1
        self.__dict__["_writes"] = value


def counted(
    method: str, backend: str, rounds: int, config: Path = QUICKSTART, extra: tuple[str, ...] = ()
) -> DispatchCounter | None:
    """The counter of a whole run of ``method`` (``None``: the backend is not possible), with
    the run's blocking host-to-device copies as ``host_writes``."""
    overrides = [
        *extra,
        f"algorithm.name={method}",
        f"engine.backend={backend}",
        f"federation.rounds={rounds}",
        "output.checkpoint_every=0",
        "engine.device=cuda",
    ]
    with torch_switches_kept(), SitedCuda() as gpu, DispatchCounter("cuda") as counter:
        try:
            fedpart.run(config, overrides, write=False)
        except FedpartError as exc:
            if "engine.backend" in str(exc):
                return None
            raise
    counter.host_writes = gpu.host_writes  # type: ignore[attr-defined]
    counter.write_sites = gpu.sites  # type: ignore[attr-defined]
    counter.device_reads = gpu.host_reads  # type: ignore[attr-defined]
    return counter


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--methods", default="", help="comma-separated (default: compare's)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--sites",
        type=int,
        default=0,
        help="list each run's N source lines that made the most host-to-device copies",
    )
    p.add_argument(
        "--config", type=Path, default=QUICKSTART, help="the recipe (default: quick start)"
    )
    p.add_argument("--set", action="append", default=[], help="an override of it (repeatable)")
    args = p.parse_args()
    torch.set_num_threads(1)
    base = load_config(args.config, args.set)
    run_of = {"config": args.config, "extra": tuple(args.set)}
    registry = methods()
    names = (
        args.methods.split(",")
        if args.methods
        else [n for n, cls in registry.items() if cls.supports(base)]
    )
    recipe = "quick start" if args.config == QUICKSTART else str(args.config)
    print(f"{recipe}, {args.rounds} rounds, torch {torch.__version__}\n")
    print(
        "| method | auto on CUDA | ops sequential | ops batched | sequential / batched "
        "| syncs sequential | syncs batched | host→device sequential | host→device batched |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    totals = {"sequential": 0, "auto": 0}
    copies = {"sequential": 0, "auto": 0}
    reads = {"sequential": 0, "auto": 0}
    sites: list[str] = []
    for name in names:
        seq = counted(name, "sequential", args.rounds, **run_of)
        assert seq is not None
        bat = (
            counted(name, "batched", args.rounds, **run_of)
            if "batched" in registry[name].backends
            else None
        )
        auto = bat or seq
        totals["sequential"] += seq.total_ops
        totals["auto"] += auto.total_ops
        for which, run in (("sequential", seq), ("auto", auto)):
            copies[which] += run.host_writes  # type: ignore[attr-defined]
            reads[which] += run.device_reads  # type: ignore[attr-defined]
        cells = [f"{seq.total_ops:,}", "—", "—", f"{seq.total_syncs:,}", "—"]
        cells += [f"{seq.host_writes:,}", "—"]  # type: ignore[attr-defined]
        if bat is not None:
            cells[1:3] = [f"{bat.total_ops:,}", f"{seq.total_ops / bat.total_ops:.2f}×"]
            cells[4] = f"{bat.total_syncs:,}"
            cells[6] = f"{bat.host_writes:,}"  # type: ignore[attr-defined]
        print(f"| {name} | {'batched' if bat else 'sequential'} | " + " | ".join(cells) + " |")
        runs = [("sequential", seq)] + ([("batched", bat)] if bat is not None else [])
        for backend, run in runs if args.sites else []:
            top = run.write_sites.most_common(args.sites)  # type: ignore[attr-defined]
            where = ", ".join(f"{site} {n:,}" for site, n in top) or "none"
            back = run.device_reads  # type: ignore[attr-defined]
            sites.append(
                f"- {name}, {backend}: {where} (values read back from the device: {back:,})"
            )
    ratio = totals["sequential"] / totals["auto"]
    print(
        f"\nall {len(names)} methods: {totals['sequential']:,} operators sequential, "
        f"{totals['auto']:,} with auto's backend on CUDA ({ratio:.2f}× fewer); blocking "
        f"host-to-device copies {copies['sequential']:,} sequential, {copies['auto']:,} with "
        f"auto's; values read back from the device {reads['sequential']:,} sequential, "
        f"{reads['auto']:,} with auto's"
    )
    if sites:
        print("\nhost-to-device copies by the source line that made them:")
        print("\n".join(sites))


if __name__ == "__main__":
    main()
