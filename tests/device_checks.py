"""The device checks of ``tests/test_device_checks.py``: every method on a device (a GPU, or the
CPU as a self-check) next to its CPU run, the batched backend against the sequential one,
bit-identical resume and kill-and-resume.

Each check returns an :class:`Outcome` (it never raises): ``ok`` True, False or None (not
applicable) and the cells of its row in the report that ``benchmarks/gpu_smoke.py`` writes
(:data:`HEADERS`). The tests record the outcome on the test item (``user_properties``); with
``--device-outcomes FILE`` :class:`OutcomeWriter` appends each to ``FILE`` as a JSON line, which
the wrapper turns into its report.

The options (``tests/conftest.py``): ``--device`` (none: the checks are skipped),
``--device-rounds``, ``--device-methods``, ``--device-tolerance``, ``--device-kill-rounds``,
``--device-kill-method``, ``--device-config``, ``--device-outcomes``.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

import fedpart
from fedpart.algorithms import ALGORITHMS
from fedpart.api import output_path
from fedpart.config import Config, load_config
from fedpart.engine.loop import Observer, observers_for, run_loop
from fedpart.engine.simulation import Simulation
from fedpart.errors import FedpartError
from resume_check import QUICKSTART, same_runs

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
#: the report's columns of each check, in the order of an outcome's cells
HEADERS = {
    "accuracy": [
        "method",
        "device accuracy %",
        "CPU accuracy %",
        "Δ points",
        "not finite",
        "result",
    ],
    "batched": [
        "method",
        "backend",
        "max abs. Δ model",
        "device vs CPU Δ model",
        "max rel. Δ train loss",
        "max Δ accuracy (points)",
        "counters equal",
        "result",
    ],
    "resume": ["method", "backend", "rounds", "metrics", "summary", "checkpoint", "result"],
    "kill": ["method", "rounds", "killed", "metrics", "summary", "checkpoint", "result"],
}
HEADERS["captured"] = HEADERS["batched"]
#: the test function of each check (``-k`` of the wrapper's ``--skip``)
TESTS = {
    "accuracy": "test_accuracy",
    "batched": "test_batched",
    "captured": "test_captured",
    "resume": "test_resume",
    "kill": "test_kill_and_resume",
}


# ----------------------------------------------------------------------------- options
@dataclass
class Options:
    """What the checks run: the device, the config (the quick start), its rounds and methods."""

    device: str
    rounds: int = 3
    methods: list[str] = field(default_factory=list)
    config: Path = QUICKSTART
    tolerance: float = 1.0
    kill_rounds: int = 20
    kill_method: str = "fedavg"

    @property
    def on_cpu(self) -> bool:
        return self.device == "cpu"


def applicable_methods(base: Config) -> list[str]:
    """Every registered method that can run ``base``: the methods ``fedpart compare`` runs when
    given no ``--algorithms`` (``cls.supports``)."""
    return [n for n, cls in ALGORITHMS.items() if cls.supports(base)]


def options(config: pytest.Config) -> Options:
    """The :class:`Options` of a pytest session (``--device`` none: ``cpu``, for collection)."""
    path = Path(config.getoption("--device-config"))
    given = config.getoption("--device-methods")
    methods = _list(given) if given else applicable_methods(load_config(path))
    bad = [m for m in methods if m not in ALGORITHMS]
    if bad:
        raise pytest.UsageError(
            f"--device-methods: unknown method(s) {', '.join(bad)}; valid: {', '.join(sorted(ALGORITHMS))}"
        )
    kill = config.getoption("--device-kill-method")
    return Options(
        device=config.getoption("--device") or "cpu",
        rounds=config.getoption("--device-rounds"),
        methods=methods,
        config=path,
        tolerance=config.getoption("--device-tolerance"),
        kill_rounds=config.getoption("--device-kill-rounds"),
        kill_method=kill or ("fedavg" if "fedavg" in methods else methods[0]),
    )


def _list(text: str) -> list[str]:
    return list(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))


def skip_reason(device: str | None) -> str | None:
    """Why the device checks do not run with ``--device device`` (``None``: they run)."""
    if device is None:
        return "device checks: run with --device cuda (or --device cpu)"
    if device.startswith("cuda") and not torch.cuda.is_available():
        return "no cuda device"
    from fedpart.bench.devices import check_device

    try:
        check_device(device)
    except FedpartError as exc:
        return str(exc)
    return None


# ----------------------------------------------------------------------------- outcomes
@dataclass
class Outcome:
    """One row of a check: ``ok`` is True (passed), False (failed) or None (not applicable);
    ``extra``: what else the report shows (the device run's ``determinism`` record)."""

    check: str
    subject: str
    ok: bool | None
    cells: list[str]
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        """The progress line: ``accuracy fedavg: ok (device 15.27 %, CPU 15.27 %)``."""
        status = {True: "ok", False: "FAIL", None: "n/a"}[self.ok]
        return f"{self.check} {self.subject}: {status}" + (
            f" ({self.detail})" if self.detail else ""
        )


class OutcomeWriter:
    """The pytest plugin of ``--device-outcomes FILE``: each test's outcome (or, for a test that
    failed without one, a ``pytest`` outcome naming it) as a JSON line, written as the test
    ends, and its progress line (``[smoke] ...``) on the terminal."""

    def __init__(self, path: Path, config: pytest.Config) -> None:
        self.path = path
        self.config = config
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")

    @pytest.hookimpl(trylast=True)  # after the terminal's own word for the test
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        found = [v for k, v in report.user_properties if k == "device_outcome"]
        if report.when == "call" and found:
            outcome = Outcome(**found[-1])
        elif report.failed and not found:
            text = str(report.longrepr).strip().splitlines()
            detail = f"{report.when}: {text[-1] if text else 'failed'}"
            outcome = Outcome("pytest", report.nodeid, False, [], detail)
        else:
            return
        with self.path.open("a") as f:
            f.write(json.dumps(asdict(outcome)) + "\n")
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        if terminal is not None:
            terminal.write_line(f"[smoke] {outcome.line()}")


def read_outcomes(path: Path) -> list[Outcome]:
    if not path.exists():
        return []
    return [Outcome(**json.loads(line)) for line in path.read_text().splitlines() if line]


def say(msg: str) -> None:
    print(f"[smoke] {msg}", file=sys.stderr, flush=True)


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


def _overrides(
    opts: Options, name: str, device: str, backend: str, rounds: int | None
) -> list[str]:
    return [
        *method_overrides(name),
        f"federation.rounds={rounds or opts.rounds}",
        f"engine.device={device}",
        f"engine.backend={backend}",
    ]


#: the engine settings each kind of batched check runs with: the eager batched backend, and its
#: training captured as a few programs kept across rounds (``engine.cuda_graphs``)
BATCHED_KINDS = {"batched": (), "captured": ("engine.cuda_graphs=true",)}


def run_method(
    opts: Options,
    name: str,
    device: str,
    backend: str = "sequential",
    rounds: int | None = None,
    out: Path | None = None,
    extra: tuple[str, ...] = (),
) -> fedpart.api.Result:
    """One run of the quick start for ``name`` on ``device`` (``out``: its run directory, with a
    checkpoint every round; none: nothing written; ``extra``: further overrides)."""
    overrides = [*_overrides(opts, name, device, backend, rounds), *extra]
    if out is None:
        return fedpart.run(opts.config, overrides, write=False)
    return fedpart.run(opts.config, [*overrides, f"output.dir={out}", "output.checkpoint_every=1"])


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


def run_stopped(opts: Options, name: str, backend: str, total: int, stop: int, out: Path) -> None:
    """``name``'s run of ``total`` rounds (a checkpoint every round) stopped after ``stop``."""
    overrides = _overrides(opts, name, opts.device, backend, total)
    cfg = load_config(opts.config, [*overrides, f"output.dir={out}", "output.checkpoint_every=1"])
    sim = Simulation(cfg, run_dir=output_path(cfg), quiet=True)
    with contextlib.suppress(_StopError):
        run_loop(sim, [*observers_for(sim), StopBefore(stop)])


def release(device: str) -> None:
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


class MethodRuns:
    """One method's sequential runs that the accuracy and batched checks share, made once when
    first asked for: on the device and on the CPU (the device run itself with ``--device
    cpu``); ``floor``: the largest |Δ| of a client model between the two (set by the accuracy
    check, the device's own rounding grown by training)."""

    def __init__(self, opts: Options, name: str) -> None:
        self.opts, self.name = opts, name
        self.floor: float | None = None
        self._runs: dict[str, fedpart.api.Result | BaseException] = {}

    def _get(self, device: str) -> fedpart.api.Result:
        if device not in self._runs:
            try:
                self._runs[device] = run_method(self.opts, self.name, device)
            except Exception as exc:  # noqa: BLE001 - kept: each check that needs it fails
                self._runs[device] = exc
        got = self._runs[device]
        if isinstance(got, BaseException):
            raise got
        return got

    def device(self) -> fedpart.api.Result:
        return self._get(self.opts.device)

    def cpu(self) -> fedpart.api.Result:
        return self.device() if self.opts.on_cpu else self._get("cpu")

    def clear(self) -> None:
        self._runs.clear()
        release(self.opts.device)


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
def check_accuracy(runs: MethodRuns) -> Outcome:
    """The method on the device next to the CPU: final accuracies within the tolerance, every
    metric and client model finite."""
    opts, name = runs.opts, runs.name
    fail = [name, "—", "—", "—", "—", "FAIL"]
    try:
        dev = runs.device()
    except Exception as exc:  # noqa: BLE001 - any failure of a method is this check's finding
        return Outcome("accuracy", name, False, fail, _error(exc))
    extra = {"determinism": dev.summary.get("determinism")}
    try:
        cpu = runs.cpu()
    except Exception as exc:  # noqa: BLE001
        return Outcome("accuracy", name, False, fail, f"CPU run: {_error(exc)}", extra)
    if cpu is not dev:
        runs.floor = state_gap(dev, cpu)[0]
    a, b = final_accuracy(dev), final_accuracy(cpu)
    bad = non_finite(dev) + ([] if cpu is dev else [f"CPU {x}" for x in non_finite(cpu)])
    diff = None if a is None or b is None else 100 * (a - b)
    problems = []
    if diff is None:
        problems.append("no final accuracy")
    elif abs(diff) > opts.tolerance:
        problems.append(f"differs by {diff:+.2f} points (> {opts.tolerance:g})")
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
    return Outcome("accuracy", name, not problems, cells, detail, extra)


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


def check_batched(runs: MethodRuns, kind: str = "batched") -> Outcome:
    """``engine.backend=batched`` on the device against the sequential run: equal up to float
    rounding, the counters exactly; not applicable where the method or model has no batched
    backend. ``kind`` ``captured``: the same with the training captured
    (:data:`BATCHED_KINDS`)."""
    name = runs.name
    if "batched" not in ALGORITHMS[name].backends:
        return Outcome(kind, name, None, [name, "sequential only", *["—"] * 6])
    failed = [name, "error", "—", "—", "—", "—", "—", "FAIL"]
    try:
        seq = runs.device()
    except Exception:  # noqa: BLE001 - the accuracy check says why
        failed[1] = "—"
        return Outcome(kind, name, False, failed, "no sequential run to compare with")
    try:
        bat = run_method(
            runs.opts, name, runs.opts.device, backend="batched", extra=BATCHED_KINDS[kind]
        )
    except FedpartError as exc:
        if "batched is not possible" in str(exc):
            why = str(exc).split("batched is not possible here: ", 1)[-1]
            short = "BatchNorm" if "buffers" in why else why[:60]
            return Outcome(kind, name, None, [name, f"n/a ({short})", *["—"] * 6])
        return Outcome(kind, name, False, failed, _error(exc))
    except Exception as exc:  # noqa: BLE001
        return Outcome(kind, name, False, failed, _error(exc))
    problems, cells = compare_backends(seq, bat, runs.floor)
    backend = bat.simulation.backend if bat.simulation is not None else "batched"
    backend += ", captured" if kind == "captured" else ""
    detail = "; ".join(problems) or f"max abs. Δ {cells[0]}" + (
        f" (device vs CPU {cells[1]})" if runs.floor is not None else ""
    )
    cells = [name, backend, *cells, "ok" if not problems else "FAIL"]
    return Outcome(kind, name, not problems, cells, detail)


def check_resume(opts: Options, name: str, backend: str, where: Path) -> Outcome | None:
    """N rounds straight against the same N-round run stopped after round N // 2 and continued
    by a fresh ``fedpart.resume`` (N = max(rounds, 2)), compared by :func:`same_runs`; ``None``
    when the model cannot be batched (the batched check says why)."""
    total = max(opts.rounds, 2)
    stop = total // 2
    try:
        run_method(opts, name, opts.device, backend, total, where / "straight")
        run_stopped(opts, name, backend, total, stop, where / "stopped")
        fedpart.resume(where / "stopped")
        problems, cells = same_runs(where / "straight", where / "stopped")
    except FedpartError as exc:
        if backend == "batched" and "batched is not possible" in str(exc):
            return None
        problems, cells = [_error(exc)], ["—", "—", "—"]
    except Exception as exc:  # noqa: BLE001
        problems, cells = [_error(exc)], ["—", "—", "—"]
    finally:
        release(opts.device)
    cells = [name, backend, f"{total} / {stop} + {total - stop}", *cells]
    cells.append("ok" if not problems else "FAIL")
    return Outcome("resume", f"{name}, {backend}", not problems, cells, "; ".join(problems))


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


def check_kill(opts: Options, where: Path) -> Outcome:
    """``fedpart run`` killed with SIGKILL half-way, resumed with ``fedpart run --resume``:
    equal to the uninterrupted run (:func:`same_runs`)."""
    name, total = opts.kill_method, opts.kill_rounds
    kill_after = max(1, total // 2)
    killed = where / "killed"
    overrides = [
        *method_overrides(name),
        f"federation.rounds={total}",
        f"engine.device={opts.device}",
        "engine.backend=sequential",
        "output.checkpoint_every=1",
    ]
    cli = [sys.executable, "-m", "fedpart.cli"]
    where.mkdir(parents=True, exist_ok=True)
    how = "—"
    try:
        say(f"kill {name}: uninterrupted run of {total} rounds ...")
        fedpart.run(opts.config, [*overrides, f"output.dir={where / 'straight'}"])
        say(f"kill {name}: fedpart run in a subprocess, SIGKILL after {kill_after} rounds ...")
        with open(where / "run.log", "w") as log:
            proc = subprocess.Popen(
                [*cli, "run", str(opts.config), *overrides, f"output.dir={killed}", "--quiet"],
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
        how = f"after {rows} of {total} rounds logged, checkpoint of {_checkpoint_round(killed)} rounds"
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
    cells = [name, f"{total}", how, *cells, "ok" if not problems else "FAIL"]
    return Outcome("kill", name, not problems, cells, "; ".join(problems))
