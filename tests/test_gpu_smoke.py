"""``benchmarks/gpu_smoke.py`` checks itself on the CPU: it runs the device checks
(``tests/test_device_checks.py`` with ``--device cpu``), they pass, fail when they should, and
its report is written. The device checks themselves are skipped in the CPU suite (no
``--device``); these tests keep them working."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

import device_checks
from interpreter import interpreter_env
from markdown_tables import tables as read_tables

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_smoke.py"


def _load() -> ModuleType:
    if "gpu_smoke" not in sys.modules:
        spec = importlib.util.spec_from_file_location("gpu_smoke", SCRIPT)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["gpu_smoke"] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules["gpu_smoke"]


def test_quick_self_check_on_the_cpu(tmp_path):
    """The brief's command: two methods, one round, the quick checks; every check passes and
    the report holds every section, the environment and the CPU caveat."""
    out = tmp_path / "gpu.md"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--rounds", "1"]
        + ["--methods", "fedavg,fedper", "--out", str(out), "--quick"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # progress lines, one per check as it goes
    for line in (
        "[smoke] accuracy fedavg: ok",
        "[smoke] batched fedper: ok",
        "[smoke] captured fedper: ok",
        "[smoke] resume fedper, batched: ok",
        "all checks passed",
    ):
        assert line in proc.stderr, proc.stderr
    report = out.read_text()
    assert "all checks passed" in report and "0 failed" in report
    assert "This run used the CPU as its device" in report and "trivially" in report
    assert f"torch {torch.__version__}" in report and "cuDNN" in report
    assert "engine.deterministic: true" in report and '"deterministic": true' in report
    tables = read_tables(report)
    assert [r["method"] for r in tables["Device vs CPU"]] == ["fedavg", "fedper"]
    assert all(r["result"] == "ok" and r["Δ points"] == "+0.00" for r in tables["Device vs CPU"])
    assert all(r["not finite"] == "none" for r in tables["Device vs CPU"])
    batched = tables["Batched vs sequential on the device"]
    assert [(r["method"], r["backend"], r["result"]) for r in batched] == [
        ("fedavg", "batched", "ok"),
        ("fedper", "batched", "ok"),
    ]
    captured = tables["Captured vs sequential on the device"]
    assert [(r["method"], r["backend"], r["result"]) for r in captured] == [
        ("fedavg", "batched, captured", "ok"),
        ("fedper", "batched, captured", "ok"),
    ]
    resume = tables["Resume, bit for bit"]
    assert [(r["method"], r["backend"]) for r in resume] == [
        ("fedavg", "sequential"),
        ("fedavg", "batched"),
        ("fedper", "sequential"),
        ("fedper", "batched"),
    ]
    for row in resume:
        assert row["result"] == "ok" and row["rounds"] == "2 / 1 + 1"
        assert row["metrics"] == "2 rows: equal" and row["summary"] == "equal"
        assert row["checkpoint"].endswith("bit-identical")
    targets = {r["target"]: r for r in tables["Targets"]}
    assert len(targets) == 4  # the bench's three, not measured here, and the accuracy
    assert any(r["met?"].startswith("trivially") for r in targets.values())
    assert "## Kill and resume\n\nskipped" in report
    assert "## Timings: `fedpart bench`\n\nskipped" in report


def test_kill_and_resume_on_the_cpu(tmp_path, capsys):
    """``fedpart run`` killed with SIGKILL half-way and resumed equals the uninterrupted run."""
    smoke = _load()
    out = tmp_path / "kill.md"
    argv = ["--device", "cpu", "--methods", "fedavg", "--kill-rounds", "6", "--out", str(out)]
    assert smoke.main([*argv, "--skip", "accuracy,batched,resume,timing"]) == 0
    (row,) = read_tables(out.read_text())["Kill and resume"]
    assert row["method"] == "fedavg" and row["rounds"] == "6" and row["result"] == "ok"
    assert row["killed"].startswith("after 3 of 6 rounds logged")
    assert row["metrics"] == "6 rows: equal" and row["checkpoint"].endswith("bit-identical")
    assert "kill fedavg: ok" in capsys.readouterr().err


def test_a_failed_check_fails_the_script(tmp_path, capsys):
    """A check that fails (here an impossible accuracy tolerance) is reported and exits 1."""
    smoke = _load()
    out = tmp_path / "fail.md"
    argv = ["--device", "cpu", "--rounds", "1", "--methods", "fedavg", "--out", str(out)]
    assert smoke.main([*argv, "--quick", "--skip", "batched,resume", "--tolerance", "-1"]) == 1
    report = out.read_text()
    assert "1 check(s) FAILED" in report
    (row,) = read_tables(report)["Device vs CPU"]
    assert row["result"] == "FAIL"
    assert "Failures:" in report and "differs by +0.00 points" in report
    assert "accuracy fedavg: FAIL" in capsys.readouterr().err


def test_unknown_method_and_device_are_one_line(tmp_path, capsys, monkeypatch):
    smoke = _load()
    out = tmp_path / "x.md"
    assert smoke.main(["--device", "cpu", "--methods", "nope", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown method(s) nope" in err
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert smoke.main(["--device", "cuda", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("error: --device cuda: CUDA was requested but no GPU is available")
    assert not out.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_without_a_gpu_the_default_device_stops_with_one_line(tmp_path):
    """``--device cuda`` is the default: without a GPU, one line and exit code 2, nothing written."""
    out = tmp_path / "gpu.md"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 2 and not out.exists()
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "no GPU is available" in proc.stderr and proc.stdout == ""


def test_resume_keeps_a_schedule_that_depends_on_the_rounds(tmp_path):
    """pFedSim's warm-up is the first int(ρ · federation.rounds) rounds: the stopped run of the
    resume check runs the same configured rounds (it once ran N // 2 and failed on every
    device)."""
    smoke = _load()
    out = tmp_path / "resume.md"
    argv = ["--device", "cpu", "--rounds", "3", "--methods", "pfedsim", "--out", str(out)]
    assert smoke.main([*argv, "--skip", "accuracy,batched,kill,timing"]) == 0
    rows = read_tables(out.read_text())["Resume, bit for bit"]
    assert [(r["backend"], r["result"]) for r in rows] == [("sequential", "ok"), ("batched", "ok")]


def test_a_batched_gap_within_the_device_rounding_passes(monkeypatch):
    """A model gap above the tolerance passes only within NOISE_FACTOR x the device-vs-CPU gap."""
    from types import SimpleNamespace

    seq = SimpleNamespace(metrics=[{"train_loss": 1.0, "accuracy": 0.5}])
    bat = SimpleNamespace(metrics=[{"train_loss": 1.0, "accuracy": 0.5}])
    states = {id(seq): [{"w": torch.zeros(3)}], id(bat): [{"w": torch.tensor([0.0, 5e-3, 0.0])}]}
    monkeypatch.setattr(device_checks, "client_states", lambda r: states[id(r)])
    assert device_checks.compare_backends(seq, bat)[0] == ["client models differ by up to 5.00e-03"]
    assert device_checks.compare_backends(seq, bat, floor=1e-3)[0] == []
    problems, cells = device_checks.compare_backends(seq, bat, floor=1e-4)
    assert problems == ["client models differ by up to 5.00e-03 (device vs CPU: 1.00e-04)"]
    assert cells[:2] == ["5.0e-03", "1.0e-04"]


def _script(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / name), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )


def test_round_profile_and_batched_gap_on_the_cpu():
    """The two diagnostic scripts of docs/results/gpu.md run on a machine without a GPU."""
    prof = _script("gpu_round_profile.py", "--device", "cpu", "--dataset", "digits")
    assert prof.returncode == 0, prof.stderr[-2000:]
    assert "== fedper, batched backend on cpu: round " in prof.stdout
    assert "== dfedpgp, batched backend on cpu: round " in prof.stdout
    assert "aten::convolution_backward" in prof.stdout
    gap = _script("gpu_batched_gap.py", "--device", "cpu", "--cases", "fedavg:1")
    assert gap.returncode == 0, gap.stderr[-2000:]
    (line,) = [x for x in gap.stdout.splitlines() if x.startswith("fedavg 1 round(s)")]
    # the same device and backend twice: the same numbers; batched: rounding only
    assert "cpu seq vs cpu seq 0.00e+00;" in line
    assert float(line.split("cpu batched vs cpu seq ")[1].split()[0]) < 1e-5
    for name in ("gpu_round_profile.py", "gpu_batched_gap.py"):
        bad = _script(name, "--device", "cuda:7" if not torch.cuda.is_available() else "tpu")
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="a real GPU: the script would run")
def test_gpu_checks_without_a_gpu_is_one_line(tmp_path):
    """benchmarks/gpu_checks.sh stops at once, exit 2, one line, on a machine without a GPU."""
    script = str(ROOT / "benchmarks" / "gpu_checks.sh")
    for args in ([str(tmp_path / "out")], []):
        proc = subprocess.run(
            ["bash", script, *args],
            capture_output=True,
            text=True,
            timeout=120,
            env=interpreter_env(),
        )
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert proc.stdout == ""
