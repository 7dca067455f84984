"""``fedpart bench``'s command line: its options, parsed into :class:`BenchOptions`, and
:func:`main` (run the workloads, print and write the report)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from fedpart.bench.devices import check_device
from fedpart.bench.report import format_report
from fedpart.bench.running import run_bench
from fedpart.bench.workloads import (
    DATASET_DEFAULTS,
    DEVICE_VARIANTS,
    DEVICE_WORKLOADS,
    VARIANT_KINDS,
    WORKLOADS,
    BenchOptions,
)


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
    p.add_argument(
        "--counts",
        type=_bool,
        default=True,
        help="true (default) or false: after the timed rounds, run each variant's last round "
        "once more, untimed, counting its ATen operators and host synchronisations (the "
        "ops/round and syncs/round columns)",
    )
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
        counts=args.counts,
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
