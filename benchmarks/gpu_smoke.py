"""A smoke test of fedpart on a GPU: every registered method next to its CPU run, the batched
backend against the sequential one, bit-identical resume, kill-and-resume, and the timings of
``fedpart bench --device``.

    python benchmarks/gpu_smoke.py [--device cuda] [--rounds 3] [--out gpu-smoke.md]
                                   [--methods a,b] [--quick] [--skip kill,timing]

On the quick start (``configs/quickstart.yaml``: the bundled digits, 20 clients, a quarter-width
FedAvgCNN; the methods chosen as ``fedpart compare`` chooses them, the capacity-aware ones with
``federation.capacity=uniform``) it runs, printing a progress line per step:

``accuracy``
    every method for ``--rounds`` rounds on the device and on the CPU (sequential backend, the
    same config otherwise): the final accuracies must lie within ``--tolerance`` points (1) and
    every metric and every client's final model must be finite.
``batched``
    every method whose backends include ``batched`` again with ``engine.backend=batched`` on the
    device: every client's model, train loss and accuracies equal to the sequential run's up to
    float rounding, the counters (bytes, multiply-adds, participants) exactly.
``resume``
    per method and backend (sequential; batched where it runs), a run of N rounds with a
    checkpoint every round against the same run (``federation.rounds`` = N, so a schedule that
    depends on it, FedAP's pre-training or pFedSim's ρ, is the same) stopped before round N // 2
    + 1 and continued by a fresh ``fedpart.resume`` (N = max(rounds, 2)): every row of
    ``metrics.jsonl``, ``summary.json``
    (wall times aside) and every checkpoint tensor bit for bit, with the engine's deterministic
    settings (``engine.deterministic``, default true).
``kill``
    ``fedpart run`` in a subprocess, killed with SIGKILL half-way through ``--kill-rounds``
    rounds, then ``fedpart run --resume``: equal, bit for bit, to the uninterrupted run.
``timing``
    ``fedpart bench --device DEVICE`` (the harness's own code, :mod:`fedpart.bench`): the
    FedAvgCNN workloads with 100 clients on MNIST, sequential vs batched vs the ceiling, and the
    GPU targets.

With ``--device cpu`` the script checks itself on a machine without a GPU: the device is the
CPU, so the "CPU reference" is the device run itself (said so in the report). The markdown
report goes to ``--out`` (default ``gpu-smoke.md`` on a GPU, ``gpu-smoke-cpu.md`` on
the CPU); the exit code is 1 when a check failed, 2 when the device cannot run (one line).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

import fedpart
from fedpart.algorithms import ALGORITHMS
from fedpart.api import output_path
from fedpart.bench.cli import parse_args as parse_bench_args
from fedpart.bench.devices import check_device
from fedpart.bench.ratios import gpu_targets
from fedpart.bench.report import device_lines, machine_info
from fedpart.bench.report import format_report as format_bench_report
from fedpart.bench.running import run_bench
from fedpart.bench.workloads import DEVICE_VARIANTS, DEVICE_WORKLOADS
from fedpart.config import Config, load_config
from fedpart.engine.loop import Observer, observers_for, run_loop
from fedpart.engine.simulation import Simulation
from fedpart.errors import FedpartError

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "configs" / "quickstart.yaml"
CHECKS = ("accuracy", "batched", "resume", "kill", "timing")
#: what ``--quick`` leaves out: the subprocess runs and the MNIST timings
QUICK_SKIP = ("kill", "timing")
#: batched vs sequential: "equal up to float rounding" (tests/test_backends.py's tolerances,
#: loosened for a few rounds of a CNN whose max-pooling ties amplify rounding)
STATE_ATOL, STATE_RTOL = 1e-3, 1e-3
LOSS_RTOL = 1e-3
#: a batched model gap above the tolerance is still rounding when it is at most this many times
#: the gap between the device's and the CPU's sequential runs of the same method: long training
#: (fedseqlayer's 10 fine-tuning epochs at lr 0.05) grows both from the same per-step rounding
NOISE_FACTOR = 10.0
ACCURACY_ABS = 0.01
#: the per-round counters that must agree exactly between backends
COUNTERS = (
    "participants",
    "trainable_params",
    "compute_proxy",
    "train_macs",
    "up_bytes",
    "down_bytes",
)


# ----------------------------------------------------------------------------- outcomes
@dataclass
class Outcome:
    """One line of a check: ``ok`` is True (passed), False (failed) or None (not applicable)."""

    check: str
    subject: str
    ok: bool | None
    cells: list[str]
    detail: str = ""


@dataclass
class Smoke:
    """The options and everything measured so far."""

    device: str
    rounds: int
    methods: list[str]
    config: Path
    work: Path
    tolerance: float
    skip: set[str]
    kill_rounds: int
    kill_method: str | None
    bench_args: list[str]
    require_targets: bool
    argv: list[str]
    outcomes: list[Outcome] = field(default_factory=list)
    bench_report: str | None = None
    bench_results: list[Any] | None = None
    targets: list[tuple[str, str, str]] = field(default_factory=list)
    determinism: dict[str, Any] | None = None
    deterministic: bool | None = None
    #: per method, the largest |Δ| of a client model between the device's and the CPU's
    #: sequential runs (the device's own rounding, grown by training); set by the accuracy check
    floor: dict[str, float] = field(default_factory=dict)
    started: float = field(default_factory=time.perf_counter)

    @property
    def on_cpu(self) -> bool:
        return self.device == "cpu"


def say(msg: str) -> None:
    print(f"[smoke] {msg}", file=sys.stderr, flush=True)


def record(smoke: Smoke, outcome: Outcome) -> None:
    smoke.outcomes.append(outcome)
    status = {True: "ok", False: "FAIL", None: "n/a"}[outcome.ok]
    text = f"{outcome.check} {outcome.subject}: {status}"
    if outcome.detail:
        text += f" ({outcome.detail})"
    say(text)


def _error(exc: BaseException) -> str:
    text = str(exc).replace("\n", " ")
    return text if isinstance(exc, FedpartError) else f"{type(exc).__name__}: {text}"


# ----------------------------------------------------------------------------- runs
def method_overrides(name: str) -> list[str]:
    """The overrides that run method ``name`` on the quick start: ``algorithm.name``, as
    ``fedpart compare`` sets it for each method, and ``federation.capacity=uniform`` for a
    capacity-aware method (clients of different widths, as the quick start's capacity tests run
    them: ``tests/resume_check.py``)."""
    extra = ["federation.capacity=uniform"] if ALGORITHMS[name].capacity_aware else []
    return [f"algorithm.name={name}", *extra]


def applicable_methods(base: Config) -> list[str]:
    """Every registered method that can run ``base``: the methods ``fedpart compare`` runs when
    given no ``--algorithms`` (``cls.supports``)."""
    return [n for n, cls in ALGORITHMS.items() if cls.supports(base)]


def run_method(
    smoke: Smoke,
    name: str,
    device: str,
    backend: str = "sequential",
    rounds: int | None = None,
    out: Path | None = None,
) -> fedpart.api.Result:
    """One run of the quick start for ``name`` on ``device`` (``out``: its run directory, with a
    checkpoint every round; none: nothing written)."""
    overrides = _overrides(smoke, name, device, backend, rounds)
    if out is None:
        return fedpart.run(smoke.config, overrides, write=False)
    return fedpart.run(smoke.config, [*overrides, f"output.dir={out}", "output.checkpoint_every=1"])


def _overrides(smoke: Smoke, name: str, device: str, backend: str, rounds: int | None) -> list[str]:
    return [
        *method_overrides(name),
        f"federation.rounds={rounds or smoke.rounds}",
        f"engine.device={device}",
        f"engine.backend={backend}",
    ]


class _StopError(Exception):
    """Raised by :class:`StopBefore` to end a run between two rounds."""


class StopBefore(Observer):
    """Ends a run at the start of round ``rnd`` (0-based), when every earlier round is logged
    and checkpointed: as a kill between two rounds would, without changing the run's config."""

    def __init__(self, rnd: int) -> None:
        self.rnd = rnd

    def round_start(self, sim: Any, rnd: int) -> None:
        if rnd == self.rnd:
            raise _StopError


def run_stopped(smoke: Smoke, name: str, backend: str, total: int, stop: int, out: Path) -> None:
    """``name``'s run of ``total`` rounds (a checkpoint every round) stopped after ``stop``."""
    overrides = _overrides(smoke, name, smoke.device, backend, total)
    cfg = load_config(smoke.config, [*overrides, f"output.dir={out}", "output.checkpoint_every=1"])
    sim = Simulation(cfg, run_dir=output_path(cfg), quiet=True)
    with contextlib.suppress(_StopError):
        run_loop(sim, [*observers_for(sim), StopBefore(stop)])


def release(device: str) -> None:
    import gc

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def client_states(result: fedpart.api.Result) -> list[dict[str, torch.Tensor]]:
    sim = result.simulation
    assert sim is not None
    return [
        {k: v.detach().cpu() for k, v in sim.algorithm.eval_state(c).items()}
        for c in range(sim.data.num_clients)
    ]


def non_finite(result: fedpart.api.Result) -> list[str]:
    """What in a run is NaN or infinite: metric values (by round and key) and client models."""
    bad = []
    for row in result.metrics:
        for key, value in row.items():
            if isinstance(value, float) and not math.isfinite(value):
                bad.append(f"round {row.get('round')} {key}")
    for c, state in enumerate(client_states(result)):
        keys = [k for k, v in state.items() if v.is_floating_point() and not v.isfinite().all()]
        if keys:
            bad.append(f"client {c} model ({keys[0]}{', ...' if len(keys) > 1 else ''})")
    return bad


def final_accuracy(result: fedpart.api.Result) -> float | None:
    value = result.summary.get("accuracy", {}).get("final")
    return float(value) if isinstance(value, int | float) else None


def _pct(x: float | None) -> str:
    return "—" if x is None or math.isnan(x) else f"{100 * x:.2f}"


# ----------------------------------------------------------------------------- checks
def check_accuracy(smoke: Smoke, name: str) -> fedpart.api.Result | None:
    """The method on the device next to the CPU; returns the device run (the sequential
    reference of the batched check) or ``None`` when it failed."""
    try:
        dev = run_method(smoke, name, smoke.device)
    except Exception as exc:  # noqa: BLE001 - any failure of a method is this check's finding
        record(
            smoke,
            Outcome("accuracy", name, False, [name, "—", "—", "—", "—", "FAIL"], _error(exc)),
        )
        return None
    if smoke.determinism is None:
        smoke.determinism = dev.summary.get("determinism")
    cpu = dev
    if not smoke.on_cpu:
        try:
            cpu = run_method(smoke, name, "cpu")
        except Exception as exc:  # noqa: BLE001
            record(
                smoke,
                Outcome(
                    "accuracy",
                    name,
                    False,
                    [name, "—", "—", "—", "—", "FAIL"],
                    f"CPU run: {_error(exc)}",
                ),
            )
            return dev
    if cpu is not dev:
        smoke.floor[name] = state_gap(dev, cpu)[0]
    a, b = final_accuracy(dev), final_accuracy(cpu)
    bad = non_finite(dev) + ([] if cpu is dev else [f"CPU {x}" for x in non_finite(cpu)])
    diff = None if a is None or b is None else 100 * (a - b)
    problems = []
    if diff is None:
        problems.append("no final accuracy")
    elif abs(diff) > smoke.tolerance:
        problems.append(f"differs by {diff:+.2f} points (> {smoke.tolerance:g})")
    if bad:
        problems.append("not finite: " + ", ".join(bad[:3]) + (" ..." if len(bad) > 3 else ""))
    cells = [
        name,
        _pct(a),
        _pct(b) + (" (the device run)" if cpu is dev else ""),
        "—" if diff is None else f"{diff:+.2f}",
        "none" if not bad else f"{len(bad)}: {bad[0]}",
        "ok" if not problems else "FAIL",
    ]
    detail = f"device {_pct(a)} %, CPU {_pct(b)} %" if not problems else "; ".join(problems)
    record(smoke, Outcome("accuracy", name, not problems, cells, detail))
    del cpu
    return dev


def state_gap(one: fedpart.api.Result, other: fedpart.api.Result) -> tuple[float, bool]:
    """The largest |Δ| between the two runs' client models, and whether every tensor is within
    atol :data:`STATE_ATOL` + rtol :data:`STATE_RTOL` (integer tensors: equal)."""
    gap, close = 0.0, True
    for a, b in zip(client_states(one), client_states(other), strict=True):
        for key, x in a.items():
            y = b[key].to(x.device)
            if x.is_floating_point():
                gap = max(gap, float((x.double() - y.double()).abs().max()))
                close = close and torch.allclose(x, y, atol=STATE_ATOL, rtol=STATE_RTOL)
            elif not torch.equal(x, y):
                close = False
    return gap, close


def compare_backends(
    seq: fedpart.api.Result, bat: fedpart.api.Result, floor: float | None = None
) -> tuple[list[str], list[str]]:
    """(problems, cells) of the batched run against the sequential one; ``floor``: the gap
    between the device's and the CPU's sequential runs (:data:`NOISE_FACTOR`)."""
    problems = []
    state_diff, close = state_gap(seq, bat)
    if not close and not (floor and state_diff <= NOISE_FACTOR * floor):
        problems.append(
            f"client models differ by up to {state_diff:.2e}"
            + (f" (device vs CPU: {floor:.2e})" if floor is not None else "")
        )
    loss_diff = acc_diff = 0.0
    counters_equal = len(seq.metrics) == len(bat.metrics)
    for r1, r2 in zip(seq.metrics, bat.metrics, strict=False):
        l1, l2 = r1.get("train_loss"), r2.get("train_loss")
        if isinstance(l1, float) and isinstance(l2, float):
            loss_diff = max(loss_diff, abs(l1 - l2) / max(abs(l1), 1e-12))
        for key in ("accuracy", "accuracy_weighted"):
            v1, v2 = r1.get(key), r2.get(key)
            if isinstance(v1, float) and isinstance(v2, float):
                acc_diff = max(acc_diff, abs(v1 - v2))
        counters_equal = counters_equal and all(r1.get(k) == r2.get(k) for k in COUNTERS)
    if loss_diff > LOSS_RTOL:
        problems.append(f"train loss differs by {loss_diff:.2e} (relative)")
    if acc_diff > ACCURACY_ABS:
        problems.append(f"accuracy differs by {100 * acc_diff:.2f} points")
    if not counters_equal:
        problems.append("counters (bytes, multiply-adds, participants) differ")
    cells = [
        f"{state_diff:.1e}",
        "—" if floor is None else f"{floor:.1e}",
        f"{loss_diff:.1e}",
        f"{100 * acc_diff:.2f}",
        "yes" if counters_equal else "NO",
    ]
    return problems, cells


def check_batched(smoke: Smoke, name: str, seq: fedpart.api.Result | None) -> None:
    if "batched" not in ALGORITHMS[name].backends:
        record(
            smoke,
            Outcome("batched", name, None, [name, "sequential only", "—", "—", "—", "—", "—", "—"]),
        )
        return
    if seq is None:
        record(
            smoke,
            Outcome(
                "batched",
                name,
                False,
                [name, "—", "—", "—", "—", "—", "—", "FAIL"],
                "no sequential run to compare with",
            ),
        )
        return
    try:
        bat = run_method(smoke, name, smoke.device, backend="batched")
    except FedpartError as exc:
        if "batched is not possible" in str(exc):
            why = str(exc).split("batched is not possible here: ", 1)[-1]
            short = "BatchNorm" if "buffers" in why else why[:60]
            record(
                smoke,
                Outcome(
                    "batched", name, None, [name, f"n/a ({short})", "—", "—", "—", "—", "—", "—"]
                ),
            )
            return
        record(
            smoke,
            Outcome(
                "batched",
                name,
                False,
                [name, "error", "—", "—", "—", "—", "—", "FAIL"],
                _error(exc),
            ),
        )
        return
    except Exception as exc:  # noqa: BLE001
        record(
            smoke,
            Outcome(
                "batched",
                name,
                False,
                [name, "error", "—", "—", "—", "—", "—", "FAIL"],
                _error(exc),
            ),
        )
        return
    problems, cells = compare_backends(seq, bat, smoke.floor.get(name))
    backend = bat.simulation.backend if bat.simulation is not None else "batched"
    record(
        smoke,
        Outcome(
            "batched",
            name,
            not problems,
            [name, backend, *cells, "ok" if not problems else "FAIL"],
            "; ".join(problems)
            or f"max abs. Δ {cells[0]}"
            + (f" (device vs CPU {cells[1]})" if name in smoke.floor else ""),
        ),
    )


def read_run(path: Path) -> tuple[list[str], dict[str, Any], dict[str, torch.Tensor]]:
    """A run directory's metrics rows (as JSON text, wall times removed: NaN equals NaN), its
    summary (wall time removed) and its checkpoint tensors."""
    rows = []
    for line in (path / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        row.pop("wall_seconds", None)
        rows.append(json.dumps(row, sort_keys=True))
    summary = json.loads((path / "summary.json").read_text())
    summary.pop("wall_seconds", None)
    tensors = load_file(str(path / "checkpoint" / "state.safetensors"))
    return rows, summary, tensors


def same_runs(a: Path, b: Path) -> tuple[list[str], list[str]]:
    """(problems, cells) of run ``b`` against run ``a``: every metric, the summary and every
    checkpoint tensor, exactly."""
    rows_a, sum_a, ten_a = read_run(a)
    rows_b, sum_b, ten_b = read_run(b)
    problems = []
    rows_equal = rows_a == rows_b
    if not rows_equal:
        first = next(
            (i for i, (x, y) in enumerate(zip(rows_a, rows_b, strict=False)) if x != y),
            min(len(rows_a), len(rows_b)),
        )
        problems.append(
            f"metrics.jsonl differs from row {first} ({len(rows_a)} vs {len(rows_b)} rows)"
        )
    summary_equal = json.dumps(sum_a, sort_keys=True) == json.dumps(sum_b, sort_keys=True)
    if not summary_equal:
        keys = sorted(k for k in sum_a.keys() | sum_b.keys() if sum_a.get(k) != sum_b.get(k))
        problems.append("summary.json differs at " + ", ".join(keys[:4]))
    tensors_equal = ten_a.keys() == ten_b.keys() and all(
        torch.equal(ten_a[k], ten_b[k]) for k in ten_a
    )
    if not tensors_equal:
        problems.append("checkpoint tensors differ")
    cells = [
        f"{len(rows_a)} rows: " + ("equal" if rows_equal else "DIFFER"),
        "equal" if summary_equal else "DIFFER",
        f"{len(ten_a)} tensors: " + ("bit-identical" if tensors_equal else "DIFFER"),
    ]
    return problems, cells


def check_resume(smoke: Smoke, name: str) -> None:
    total = max(smoke.rounds, 2)
    stop = total // 2
    backends = ["sequential"]
    if "batched" in ALGORITHMS[name].backends:
        backends.append("batched")
    for backend in backends:
        subject = f"{name}, {backend}"
        where = smoke.work / "resume" / f"{name}-{backend}"
        try:
            run_method(smoke, name, smoke.device, backend, total, where / "straight")
            run_stopped(smoke, name, backend, total, stop, where / "stopped")
            fedpart.resume(where / "stopped")
            problems, cells = same_runs(where / "straight", where / "stopped")
        except FedpartError as exc:
            if backend == "batched" and "batched is not possible" in str(exc):
                continue  # the model cannot be batched (the batched check says why)
            problems, cells = [_error(exc)], ["—", "—", "—"]
        except Exception as exc:  # noqa: BLE001
            problems, cells = [_error(exc)], ["—", "—", "—"]
        record(
            smoke,
            Outcome(
                "resume",
                subject,
                not problems,
                [
                    name,
                    backend,
                    f"{total} / {stop} + {total - stop}",
                    *cells,
                    "ok" if not problems else "FAIL",
                ],
                "; ".join(problems),
            ),
        )
        release(smoke.device)


def _rows_written(path: Path) -> int:
    """Complete rows of a metrics.jsonl being written (a torn last line does not count)."""
    try:
        text = path.read_text()
    except OSError:
        return 0
    return text.count("\n")


def _checkpoint_round(run: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError, KeyError):
        return int(json.loads((run / "checkpoint" / "meta.json").read_text())["rounds_completed"])
    return None


def check_kill(smoke: Smoke) -> None:
    """``fedpart run`` killed with SIGKILL half-way, resumed with ``fedpart run --resume``."""
    name = smoke.kill_method or ("fedavg" if "fedavg" in smoke.methods else smoke.methods[0])
    total = smoke.kill_rounds
    kill_after = max(1, total // 2)
    where = smoke.work / "kill"
    killed = where / "killed"
    overrides = [
        *method_overrides(name),
        f"federation.rounds={total}",
        f"engine.device={smoke.device}",
        "engine.backend=sequential",
        "output.checkpoint_every=1",
    ]
    cli = [sys.executable, "-m", "fedpart.cli"]
    where.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    how = "—"
    try:
        say(f"kill {name}: uninterrupted run of {total} rounds ...")
        fedpart.run(smoke.config, [*overrides, f"output.dir={where / 'straight'}"])
        say(f"kill {name}: fedpart run in a subprocess, SIGKILL after {kill_after} rounds ...")
        with open(where / "run.log", "w") as log:
            proc = subprocess.Popen(
                [*cli, "run", str(smoke.config), *overrides, f"output.dir={killed}", "--quiet"],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            deadline = time.monotonic() + 600
            while proc.poll() is None:
                if _rows_written(killed / "metrics.jsonl") >= kill_after:
                    proc.send_signal(signal.SIGKILL)
                    break
                if time.monotonic() > deadline:
                    proc.kill()
                    break
                time.sleep(0.005)
            proc.wait()
        rows = _rows_written(killed / "metrics.jsonl")
        ckpt = _checkpoint_round(killed)
        how = f"after {rows} of {total} rounds logged, checkpoint of {ckpt} rounds"
        if proc.returncode != -signal.SIGKILL:
            tail = (where / "run.log").read_text().strip().splitlines()[-1:] or [""]
            raise RuntimeError(
                f"the run was not killed mid-run (exit code {proc.returncode}; {tail[0]}); "
                "raise --kill-rounds"
            )
        say(f"kill {name}: killed {how}; fedpart run --resume ...")
        res = subprocess.run(
            [*cli, "run", "--resume", str(killed), "--quiet"],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if res.returncode != 0:
            last = (res.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise RuntimeError(f"fedpart run --resume exited {res.returncode}: {last}")
        problems, cells = same_runs(where / "straight", killed)
    except Exception as exc:  # noqa: BLE001
        problems, cells = [_error(exc)], ["—", "—", "—"]
    record(
        smoke,
        Outcome(
            "kill",
            name,
            not problems,
            [name, f"{total}", how, *cells, "ok" if not problems else "FAIL"],
            "; ".join(problems),
        ),
    )


def check_timing(smoke: Smoke) -> None:
    """``fedpart bench --device DEVICE`` through the harness (its parser, runner and report)."""
    argv = ["--device", smoke.device]
    given = {a.split("=", 1)[0] for a in smoke.bench_args if a.startswith("--")}
    if smoke.on_cpu:  # what a GPU runs, so that the CPU self-check measures the same
        if "--variants" not in given:
            argv += ["--variants", ",".join(DEVICE_VARIANTS)]
        if "--workloads" not in given:
            argv += ["--workloads", ",".join(DEVICE_WORKLOADS)]
    argv += smoke.bench_args
    say(f"timing: fedpart bench {shlex.join(argv)} ...")
    try:
        opts = parse_bench_args(argv)
    except SystemExit:
        record(
            smoke,
            Outcome("timing", "fedpart bench", False, [], f"bad --bench-args: {shlex.join(argv)}"),
        )
        return
    t0 = time.perf_counter()
    try:
        results = run_bench(opts, lambda msg: say(f"timing: {msg}"))
    except Exception as exc:  # noqa: BLE001
        record(smoke, Outcome("timing", "fedpart bench", False, [], _error(exc)))
        return
    smoke.bench_results = results
    smoke.bench_report = format_bench_report(opts, results, time.perf_counter() - t0)
    smoke.targets = gpu_targets(results, smoke.device)
    skipped = [f"{r.workload.name}: {r.skipped}" for r in results if r.skipped]
    unmet = [t for t, _, met in smoke.targets if met == "no"]
    problems = list(skipped)
    if smoke.require_targets and unmet:
        problems += [f"target not met: {t}" for t in unmet]
    detail = "; ".join(problems) or ", ".join(f"{t}: {m} ({met})" for t, m, met in smoke.targets)
    record(smoke, Outcome("timing", "fedpart bench", not problems, [], detail))


# ----------------------------------------------------------------------------- report
def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    return out + ["| " + " | ".join(r) + " |" for r in rows]


def _section(smoke: Smoke, check: str) -> list[Outcome]:
    return [o for o in smoke.outcomes if o.check == check]


def _failures(outcomes: Sequence[Outcome]) -> list[str]:
    return [f"- {o.subject}: {o.detail}" for o in outcomes if o.ok is False]


def accuracy_target(smoke: Smoke) -> tuple[str, str, str]:
    target = f"every method's final accuracy on the device within {smoke.tolerance:g} point of its CPU run"
    rows = _section(smoke, "accuracy")
    if "accuracy" in smoke.skip or not rows:
        return target, "—", "not measured"
    diffs = [abs(float(o.cells[3])) for o in rows if o.cells[3] not in ("—", "")]
    off = [o.subject for o in rows if o.ok is False]
    measured = (
        f"{len(rows)} methods, largest Δ {max(diffs):.2f} points (absolute)" if diffs else "—"
    )
    if off:
        measured += f"; failed: {', '.join(off)}"
    if smoke.on_cpu:
        return target, measured, "trivially (the device is the CPU)"
    return target, measured, "yes" if not off else "no"


def format_report(smoke: Smoke) -> str:
    failed = [o for o in smoke.outcomes if o.ok is False]
    passed = [o for o in smoke.outcomes if o.ok is True]
    gpu = not smoke.on_cpu
    title = "GPU results: `fedpart bench --device` and the GPU smoke test"
    lines = [f"# {title}", ""]
    lines += [
        "The report of `benchmarks/gpu_smoke.py` (the command below). It runs every registered "
        "method of the quick start (`configs/quickstart.yaml`: the bundled digits, 20 clients, a "
        "quarter-width FedAvgCNN) on the device next to the same run on the CPU, the batched "
        "backend against the sequential one on the device, a bit-identical resume per method and "
        "backend, a run killed with SIGKILL and resumed, and the timings of "
        "`fedpart bench --device` (FedAvg, FedPer, FedRep and DFedPGP with 100 clients on MNIST: "
        "the sequential and batched backends and the central ceiling).",
        "",
    ]
    if not gpu:
        lines += [
            "**This run used the CPU as its device** (a self-check of the script on a machine "
            'without a GPU): the "CPU reference" of the accuracy check is the device run itself, '
            "so that comparison is trivially equal and was not run twice; the other checks are "
            "meaningful on the CPU too. It holds no GPU numbers.",
            "",
        ]
    lines += machine_info(torch.get_num_threads())[:1]
    lines += device_lines(smoke.device, smoke.deterministic)
    lines.append(f"- torch {torch.__version__}; Python {sys.version.split()[0]}")
    if smoke.determinism is not None:
        lines.append(
            f"- summary.json `determinism` of the device runs: `{json.dumps(smoke.determinism, sort_keys=True)}`"
        )
    lines.append(f"- command: `{shlex.join(['python', 'benchmarks/gpu_smoke.py', *smoke.argv])}`")
    lines.append(
        f"- date: {time.strftime('%Y-%m-%d')}; quick start for {smoke.rounds} round(s); "
        f"{len(smoke.methods)} method(s); checks skipped: {', '.join(sorted(smoke.skip)) or 'none'}"
    )
    lines.append(f"- wall time: {time.perf_counter() - smoke.started:.1f} s")
    verdict = "all checks passed" if not failed else f"{len(failed)} check(s) FAILED"
    lines.append(f"- result: **{verdict}** ({len(passed)} passed, {len(failed)} failed)")

    lines += ["", "## Targets", ""]
    targets = list(smoke.targets) if "timing" not in smoke.skip else []
    if not targets:
        targets = [
            ("FedPer: batched training throughput >= 5x sequential", "—", "not measured"),
            (
                "DFedPGP, 100 clients: one round (training + mixing) < 1 s, batched",
                "—",
                "not measured",
            ),
        ]
    lines += _table(
        ["target", "measured", "met?"], [list(t) for t in targets] + [list(accuracy_target(smoke))]
    )

    sections = [
        (
            "accuracy",
            "Device vs CPU",
            f"Final accuracy after {smoke.rounds} round(s), sequential backend, everything else "
            "equal (each device's default convolution layout: channels-last on the CPU, "
            f"contiguous on CUDA); Δ = device − CPU in points (fails above {smoke.tolerance:g}); *not finite* = "
            "NaN or infinite metric values and client models of the device run.",
            ["method", "device accuracy %", "CPU accuracy %", "Δ points", "not finite", "result"],
        ),
        (
            "batched",
            "Batched vs sequential on the device",
            "`engine.backend=batched` against the sequential run of the accuracy check. Equal up "
            f"to float rounding: every client's model within atol {STATE_ATOL:g} + rtol "
            f"{STATE_RTOL:g}, train loss within {LOSS_RTOL:g} (relative) and accuracies within "
            f"{100 * ACCURACY_ABS:g} point in every round, the counters exactly. A model gap "
            f"above that tolerance passes when it is at most {NOISE_FACTOR:g}x the gap between "
            "the device's and the CPU's sequential runs of the method (*device vs CPU*): the "
            "same rounding, grown by long training (fedseqlayer's 10 fine-tuning epochs).",
            [
                "method",
                "backend",
                "max abs. Δ model",
                "device vs CPU Δ model",
                "max rel. Δ train loss",
                "max Δ accuracy (points)",
                "counters equal",
                "result",
            ],
        ),
        (
            "resume",
            "Resume, bit for bit",
            f"N rounds straight against the same N-round run stopped after round N // 2 and "
            f"continued by `fedpart.resume` (a fresh Simulation from the run directory; "
            f"N = {max(smoke.rounds, 2)}), a checkpoint every "
            "round, the engine's deterministic settings: every metrics.jsonl row and summary.json "
            "(wall times aside) and every checkpoint tensor exactly.",
            ["method", "backend", "rounds", "metrics", "summary", "checkpoint", "result"],
        ),
        (
            "kill",
            "Kill and resume",
            "`fedpart run` in a subprocess, SIGKILL once half of its rounds are logged, then "
            "`fedpart run --resume`; compared exactly with the uninterrupted run.",
            ["method", "rounds", "killed", "metrics", "summary", "checkpoint", "result"],
        ),
    ]
    for check, heading, legend, header in sections:
        lines += ["", f"## {heading}", ""]
        if check in smoke.skip:
            lines.append("skipped (`--skip` / `--quick`).")
            continue
        rows = _section(smoke, check)
        lines += [legend, ""]
        lines += _table(header, [o.cells for o in rows])
        fails = _failures(rows)
        if fails:
            lines += ["", "Failures:", ""] + fails

    lines += ["", "## Timings: `fedpart bench`", ""]
    if "timing" in smoke.skip:
        lines.append("skipped (`--skip` / `--quick`).")
    else:
        lines += _failures(_section(smoke, "timing"))
        if smoke.bench_report:
            for line in smoke.bench_report.splitlines():
                lines.append("##" + line if line.startswith("#") else line)
    return "\n".join(lines).rstrip() + "\n"


# ----------------------------------------------------------------------------- command line
def _list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python benchmarks/gpu_smoke.py",
        description=(__doc__ or "").split("\n\n")[0],
    )
    p.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu (a self-check)")
    p.add_argument(
        "--rounds", type=int, default=3, help="rounds of each quick-start run (default 3)"
    )
    p.add_argument(
        "--out",
        default=None,
        help="markdown report (default gpu-smoke.md on a GPU, gpu-smoke-cpu.md on the CPU)",
    )
    p.add_argument(
        "--methods", type=_list, default=None, help="comma-separated (default: every method)"
    )
    p.add_argument("--config", default=str(QUICKSTART), help="the config (default the quick start)")
    p.add_argument(
        "--skip",
        type=_list,
        default=[],
        help=f"checks to leave out, comma-separated: {', '.join(CHECKS)}",
    )
    p.add_argument("--quick", action="store_true", help=f"leave out {' and '.join(QUICK_SKIP)}")
    p.add_argument(
        "--tolerance",
        type=float,
        default=1.0,
        help="largest accepted device - CPU final accuracy difference, points (default 1)",
    )
    p.add_argument(
        "--kill-rounds", type=int, default=20, help="rounds of the killed run (default 20)"
    )
    p.add_argument(
        "--kill-method",
        default=None,
        help="method of the killed run (default fedavg if selected, else the first)",
    )
    p.add_argument(
        "--bench-args",
        default="",
        help='more options of fedpart bench, e.g. --bench-args="--data-root ../shared/data '
        '--repeats 5"',
    )
    p.add_argument(
        "--require-targets",
        action="store_true",
        help="fail when a timing target is not met (default: reported only)",
    )
    p.add_argument(
        "--workdir", default=None, help="keep the run directories here (default: a temporary one)"
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    unknown = [c for c in args.skip if c not in CHECKS]
    if unknown or args.rounds < 1 or args.kill_rounds < 2:
        what = (
            f"--skip: unknown check(s) {', '.join(unknown)}"
            if unknown
            else "--rounds >= 1 and --kill-rounds >= 2"
        )
        print(f"error: {what}", file=sys.stderr)
        return 2
    try:
        device = check_device(args.device)
        base = load_config(args.config)
        methods = list(dict.fromkeys(args.methods or applicable_methods(base)))
        bad = [m for m in methods if m not in ALGORITHMS]
        if bad:
            raise FedpartError(
                f"--methods: unknown method(s) {', '.join(bad)}; valid: {', '.join(sorted(ALGORITHMS))}"
            )
        if args.kill_method and args.kill_method not in ALGORITHMS:
            raise FedpartError(f"--kill-method: unknown method {args.kill_method}")
    except FedpartError as exc:
        print(f"error: {_error(exc)}", file=sys.stderr)
        return 2
    name = str(device)
    out = (
        Path(args.out)
        if args.out
        else Path("gpu-smoke.md" if device.type == "cuda" else "gpu-smoke-cpu.md")
    )
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="gpu-smoke-"))
    if args.workdir and work.exists() and any(work.iterdir()):
        print(f"error: --workdir {work} is not empty", file=sys.stderr)
        return 2
    work.mkdir(parents=True, exist_ok=True)
    smoke = Smoke(
        device=name,
        rounds=args.rounds,
        methods=methods,
        config=Path(args.config),
        work=work,
        tolerance=args.tolerance,
        skip=set(args.skip) | (set(QUICK_SKIP) if args.quick else set()),
        kill_rounds=args.kill_rounds,
        kill_method=args.kill_method,
        bench_args=shlex.split(args.bench_args),
        require_targets=args.require_targets,
        argv=argv,
        deterministic=getattr(base.engine, "deterministic", None),
    )
    say(
        f"device {name}; {len(methods)} method(s), {args.rounds} round(s); run directories in {work}"
    )
    try:
        run_checks(smoke)
    finally:
        report = format_report(smoke)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(report)
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    failed = [o for o in smoke.outcomes if o.ok is False]
    say(
        f"report: {out}; "
        + ("all checks passed" if not failed else f"{len(failed)} check(s) FAILED")
    )
    return 1 if failed else 0


def run_checks(smoke: Smoke) -> None:
    steps: list[tuple[str, Callable[[], None]]] = []
    per_method = [c for c in ("accuracy", "batched", "resume") if c not in smoke.skip]
    for name in smoke.methods:

        def one(name: str = name) -> None:
            seq = None
            if "accuracy" in per_method or "batched" in per_method:
                seq = (
                    check_accuracy(smoke, name)
                    if "accuracy" in per_method
                    else _reference(smoke, name)
                )
            if "batched" in per_method:
                check_batched(smoke, name, seq)
            del seq
            release(smoke.device)
            if "resume" in per_method:
                check_resume(smoke, name)

        steps.append((name, one))
    if "kill" not in smoke.skip:
        steps.append(("kill", lambda: check_kill(smoke)))
    if "timing" not in smoke.skip:
        steps.append(("timing", lambda: check_timing(smoke)))
    for _, step in steps:
        step()


def _reference(smoke: Smoke, name: str) -> fedpart.api.Result | None:
    """The sequential run on the device, when the accuracy check (which makes it) is skipped."""
    try:
        return run_method(smoke, name, smoke.device)
    except Exception as exc:  # noqa: BLE001
        say(f"batched {name}: the sequential reference failed: {_error(exc)}")
        return None


if __name__ == "__main__":
    raise SystemExit(main())
