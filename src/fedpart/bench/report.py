"""The bench's markdown report: the machine and device lines, one table per workload (CPU or
GPU columns), the scale round's table and the GPU targets."""

from __future__ import annotations

import contextlib
import math
import os
import platform
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from fedpart.bench.measure import VariantResult, WorkloadResult
from fedpart.bench.memory import MB, mb_text
from fedpart.bench.ratios import gpu_targets, speed_ratio
from fedpart.bench.workloads import BenchOptions, scale_target
from fedpart.formatting import markdown_table, pct


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


#: the columns every variant's table starts with: the variant and its times
TIMING_COLUMNS = [
    "variant",
    "backend",
    "client-samples/round",
    "samples/s (train)",
    "train s/round",
    "eval s/round",
    "end-to-end s/round",
    "setup s",
]

#: the dispatch counts of one untimed round (``fedpart.bench.dispatch``)
COUNT_COLUMNS = ["ops/round", "syncs/round"]

COLUMNS = [
    *TIMING_COLUMNS,
    *COUNT_COLUMNS,
    "peak Δ RSS MB",
    "peak RSS MB",
    "train speed vs naive",
    "end-to-end vs naive",
    "train speed vs ceiling",
    "accuracy %",
]

#: the columns of a workload on a GPU: GPU memory, and speed against the sequential backend
DEVICE_COLUMNS = [
    *TIMING_COLUMNS,
    *COUNT_COLUMNS,
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
    return markdown_table(header, rows, rule=" --- ")


def _timing_cells(v: VariantResult) -> list[str]:
    """The cells of :data:`TIMING_COLUMNS` and :data:`COUNT_COLUMNS` of a measured variant."""
    return [
        v.variant,
        v.backend,
        _num(v.samples_per_round, ",.0f"),
        _num(v.samples_per_s, ",.0f"),
        _num(v.train_s, ".3f"),
        _num(v.eval_s, ".3f"),
        _num(v.end_to_end_s, ".3f"),
        _num(v.setup_s, ".2f"),
        "—" if v.ops_per_round is None else f"{v.ops_per_round:,}",
        "—" if v.syncs_per_round is None else f"{v.syncs_per_round:,}",
    ]


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
                *_timing_cells(v),
                _num(v.peak_delta_bytes / MB, ",.0f"),
                _num(v.peak_bytes / MB, ",.0f"),
                vs_naive,
                e2e_naive,
                vs_ceiling,
                pct(v.accuracy, "—"),
            ]
        )
    return _table(COLUMNS, rows)


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
                *_timing_cells(v),
                mb_text(v.gpu_peak_delta_bytes),
                mb_text(v.gpu_round_bytes),
                mb_text(v.gpu_peak_bytes),
                _num(v.peak_bytes / MB, ",.0f"),
                _x(speed_ratio(v, seq, "train")),
                _x(speed_ratio(v, seq, "end-to-end")),
                _x(speed_ratio(v, ceiling, "train")),
                pct(v.accuracy, "—"),
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


#: the legend of :data:`COUNT_COLUMNS`, in both reports
COUNTS_LEGEND = (
    "*ops/round*, *syncs/round* = the ATen operators dispatched (the clients' seeded "
    "batch-order draws on the host, one per client and epoch, not included) and the host "
    "synchronisations "
    "(`.item()` and other scalar reads, copies to the host, `.tolist()`/`.numpy()` reads — on "
    "the CPU those a GPU would synchronise on —, operators of data-dependent output size) of "
    "the last timed round run once more after the timed rounds, untimed, training + "
    "evaluation, counted in this process by a `TorchDispatchMode` (`fedpart.bench.dispatch`); "
    "— where not counted (the process backend's work runs in its workers; `--counts false`)."
)

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
    "every loop learns, not a result). " + COUNTS_LEGEND
)


def _heading(r: WorkloadResult) -> list[str]:
    """A workload's section heading, then its description or why it was skipped."""
    return ["", f"## {r.workload.name}", ""] + (
        [f"skipped: {r.skipped}"] if r.skipped else [r.description, ""]
    )


def _notes(r: WorkloadResult) -> list[str]:
    """A workload's notes as a list after a blank line (none: nothing)."""
    return ["", *(f"- {n}" for n in r.notes)] if r.notes else []


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
            lines += _heading(r)
            if r.skipped:
                continue
            lines += device_workload_table(r)
            lines += _notes(r)
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
        "timed round (a check that every loop learns, not a result). " + COUNTS_LEGEND,
    ]
    for r in results:
        lines += _heading(r)
        if r.skipped:
            continue
        if r.scale is not None:
            lines += scale_table(r.scale)
            acc = r.scale.get("accuracy")
            lines += [
                "",
                "One round of `engine.backend=auto` (training of the sampled clients + "
                "aggregation), then evaluation of every client; no warm-up; peak RSS is the "
                "whole process's plus its worker processes' (pages of the shared data pool "
                "counted once per process: an upper bound). Accuracy after the round: "
                f"{pct(acc, '—')} %.",
            ]
            continue
        lines += workload_table(r)
        lines += _notes(r)
    return "\n".join(lines) + "\n"
