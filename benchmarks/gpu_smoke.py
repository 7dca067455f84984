"""The GPU smoke test's report: the device checks of ``tests/test_device_checks.py`` run by
pytest on a device, then the timings of ``fedpart bench --device``, written as one markdown
report.

    python benchmarks/gpu_smoke.py [--device cuda] [--rounds 3] [--out gpu-smoke.md]
                                   [--methods a,b] [--quick] [--skip kill,timing]

The checks are pytest tests, selected by ``--device`` (``tests/conftest.py``); this script runs

    python -m pytest tests/test_device_checks.py --device DEVICE --device-rounds ROUNDS
        [--device-methods ...] [--device-tolerance ...] [--device-kill-rounds ...]
        [--device-kill-method ...] [-k "not test_kill_and_resume" ...]
        --device-outcomes FILE

in a subprocess (its output, a progress line per check included, on stderr), reads each
check's outcome from ``FILE``, runs the timings in this process and writes the report. The
checks, on the quick start (``configs/quickstart.yaml``: the bundled digits, 20 clients, a
quarter-width FedAvgCNN; the methods chosen as ``fedpart compare`` chooses them, the
capacity-aware ones with ``federation.capacity=uniform``), are described in
``tests/device_checks.py``:

``accuracy`` (``test_accuracy``)
    every method for ``--rounds`` rounds on the device and on the CPU (sequential backend, the
    same config otherwise): the final accuracies must lie within ``--tolerance`` points (1) and
    every metric and every client's final model must be finite.
``batched`` (``test_batched``)
    every method whose backends include ``batched`` again with ``engine.backend=batched`` on the
    device: every client's model, train loss and accuracies equal to the sequential run's up to
    float rounding, the counters (bytes, multiply-adds, participants) exactly.
``resume`` (``test_resume``)
    per method and backend, a run of N rounds with a checkpoint every round against the same
    run stopped before round N // 2 + 1 and continued by a fresh ``fedpart.resume`` (N =
    max(rounds, 2)): every row of ``metrics.jsonl``, ``summary.json`` (wall times aside) and
    every checkpoint tensor bit for bit (``tests/resume_check.py``'s ``same_runs``).
``kill`` (``test_kill_and_resume``)
    ``fedpart run`` in a subprocess, killed with SIGKILL half-way through ``--kill-rounds``
    rounds, then ``fedpart run --resume``: equal, bit for bit, to the uninterrupted run.
``timing`` (this script, not a test: a benchmark)
    ``fedpart bench --device DEVICE`` (the harness's own code, :mod:`fedpart.bench`): the
    FedAvgCNN workloads with 100 clients on MNIST, sequential vs batched vs the ceiling, and the
    GPU targets.

``--skip`` and ``--quick`` (which skips ``kill`` and ``timing``) deselect the checks' tests with
``-k``; ``--workdir`` keeps the run directories (pytest's ``--basetemp`` is ``WORKDIR/runs``).
With ``--device cpu`` the script checks itself on a machine without a GPU: the device is the
CPU, so the "CPU reference" is the device run itself (said so in the report). The markdown
report goes to ``--out`` (default ``gpu-smoke.md`` on a GPU, ``gpu-smoke-cpu.md`` on the CPU);
the exit code is 1 when a check failed, 2 when the device cannot run (one line).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

import fedpart
from fedpart.algorithms import ALGORITHMS
from fedpart.bench.cli import parse_args as parse_bench_args
from fedpart.bench.devices import check_device
from fedpart.bench.ratios import gpu_targets
from fedpart.bench.report import device_lines, machine_info
from fedpart.bench.report import format_report as format_bench_report
from fedpart.bench.running import run_bench
from fedpart.bench.workloads import DEVICE_VARIANTS, DEVICE_WORKLOADS
from fedpart.config import load_config
from fedpart.errors import FedpartError

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from device_checks import (  # noqa: E402 - the checks live with the tests
    ACCURACY_ABS,
    HEADERS,
    LOSS_RTOL,
    NOISE_FACTOR,
    QUICKSTART,
    STATE_ATOL,
    STATE_RTOL,
    TESTS,
    Outcome,
    applicable_methods,
    read_outcomes,
)

TEST_FILE = ROOT / "tests" / "test_device_checks.py"
CHECKS = ("accuracy", "batched", "captured", "resume", "kill", "timing")
#: what ``--quick`` leaves out: the subprocess runs and the MNIST timings
QUICK_SKIP = ("kill", "timing")
#: a line per test (the progress line of its check under it) and the failures' summary
PYTEST_OPTIONS = ["-p", "no:cacheprovider", "-o", "addopts=", "-v", "-rfE"]


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
    interrupted: bool = False
    started: float = field(default_factory=time.perf_counter)

    @property
    def on_cpu(self) -> bool:
        return self.device == "cpu"


def say(msg: str) -> None:
    print(f"[smoke] {msg}", file=sys.stderr, flush=True)


def record(smoke: Smoke, outcome: Outcome) -> None:
    smoke.outcomes.append(outcome)
    say(outcome.line())


def _error(exc: BaseException) -> str:
    text = str(exc).replace("\n", " ")
    return text if isinstance(exc, FedpartError) else f"{type(exc).__name__}: {text}"


# ----------------------------------------------------------------------------- the checks
def pytest_command(smoke: Smoke, outcomes: Path) -> list[str] | None:
    """The pytest command of the checks not skipped (``None``: every one is skipped)."""
    skipped = [test for check, test in TESTS.items() if check in smoke.skip]
    if len(skipped) == len(TESTS):
        return None
    cmd = [sys.executable, "-m", "pytest", str(TEST_FILE), *PYTEST_OPTIONS]
    cmd += [
        f"--device={smoke.device}",
        f"--device-rounds={smoke.rounds}",
        f"--device-methods={','.join(smoke.methods)}",
        f"--device-tolerance={smoke.tolerance!r}",
        f"--device-kill-rounds={smoke.kill_rounds}",
        f"--device-config={smoke.config}",
        f"--device-outcomes={outcomes}",
        f"--basetemp={smoke.work / 'runs'}",
    ]
    if smoke.kill_method:
        cmd.append(f"--device-kill-method={smoke.kill_method}")
    if skipped:
        cmd += ["-k", " and ".join(f"not {test}" for test in skipped)]
    return cmd


def run_device_tests(smoke: Smoke) -> None:
    """The checks' tests in a subprocess, their output relayed to stderr, their outcomes read
    back (also when interrupted: pytest ends its session on SIGINT)."""
    outcomes = smoke.work / "outcomes.jsonl"
    cmd = pytest_command(smoke, outcomes)
    if cmd is None:
        return
    src = str(Path(fedpart.__file__).resolve().parents[1])  # the fedpart this process runs
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, *_pythonpath()])}
    say(f"python -m pytest {shlex.join(cmd[3:])}")
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    code = None
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stderr.write(line)
            sys.stderr.flush()
        code = proc.wait()
    finally:
        if proc.poll() is None:  # interrupted here: pytest (signalled too) ends its session
            _finish(proc)
        smoke.outcomes += read_outcomes(outcomes)
    if code not in (0, 1, 5):  # 5: no test selected
        detail = f"pytest exited with code {code} (interrupted, a usage or collection error)"
        smoke.outcomes.append(Outcome("pytest", TEST_FILE.name, False, [], detail))
    smoke.determinism = next(
        (o.extra["determinism"] for o in smoke.outcomes if o.extra.get("determinism")), None
    )


def _finish(proc: subprocess.Popen[str]) -> None:
    """Let an interrupted pytest end its session, its last output relayed; SIGINT it if it goes
    on, then kill it."""
    for stop in (None, signal.SIGINT, signal.SIGKILL):
        if stop is not None:
            proc.send_signal(stop)
        try:
            rest, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            continue
        sys.stderr.write(rest or "")
        return


def _pythonpath() -> list[str]:
    return [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]


# ----------------------------------------------------------------------------- timing
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
        "The report of `benchmarks/gpu_smoke.py` (the command below): the device checks of "
        "`tests/test_device_checks.py` (`python -m pytest --device DEVICE`) and the timings. It "
        "runs every registered method of the quick start (`configs/quickstart.yaml`: the bundled digits, 20 clients, a "
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
    if smoke.interrupted:
        verdict = "interrupted (SIGINT) before the end" + ("" if not failed else f"; {verdict}")
    lines.append(f"- result: **{verdict}** ({len(passed)} passed, {len(failed)} failed)")

    lines += ["", "## Targets", ""]
    targets = list(smoke.targets) if "timing" not in smoke.skip else []
    if not targets:  # the bench's target rows, none measured
        targets = [(target, "—", "not measured") for target, _, _ in gpu_targets([], "cuda")]
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
        ),
        (
            "captured",
            "Captured vs sequential on the device",
            "`engine.backend=batched engine.cuda_graphs=true` (the training as a few programs "
            "kept across rounds, replayed as CUDA graphs on a GPU) against the same sequential "
            "run, with the batched check's tolerances.",
        ),
        (
            "resume",
            "Resume, bit for bit",
            f"N rounds straight against the same N-round run stopped after round N // 2 and "
            f"continued by `fedpart.resume` (a fresh Simulation from the run directory; "
            f"N = {max(smoke.rounds, 2)}), a checkpoint every "
            "round, the engine's deterministic settings: every metrics.jsonl row and summary.json "
            "(wall times aside) and every checkpoint tensor exactly.",
        ),
        (
            "kill",
            "Kill and resume",
            "`fedpart run` in a subprocess, SIGKILL once half of its rounds are logged, then "
            "`fedpart run --resume`; compared exactly with the uninterrupted run.",
        ),
    ]
    for check, heading, legend in sections:
        lines += ["", f"## {heading}", ""]
        if check in smoke.skip:
            lines.append("skipped (`--skip` / `--quick`).")
            continue
        rows = _section(smoke, check)
        lines += [legend, ""]
        lines += _table(HEADERS[check], [o.cells for o in rows])
        fails = _failures(rows)
        if fails:
            lines += ["", "Failures:", ""] + fails

    others = _failures(_section(smoke, "pytest"))
    if others:
        lines += ["", "## Other failures", "", "Tests that failed outside their check:", ""]
        lines += others

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
        config=Path(args.config).resolve(),
        work=work.resolve(),
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
        run_device_tests(smoke)
        if "timing" not in smoke.skip:
            check_timing(smoke)
    except KeyboardInterrupt:
        smoke.interrupted = True
        raise
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


if __name__ == "__main__":
    raise SystemExit(main())
