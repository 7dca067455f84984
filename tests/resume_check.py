"""The shared resume check: a run stopped part-way and resumed equals a straight run.

:func:`same_runs` compares two run directories exactly (every ``metrics.jsonl`` row, the
summary, every checkpoint tensor; wall times aside). The CPU tests use it through
:func:`assert_resume_bit_identical`; the device checks (``tests/device_checks.py``, run by
``python -m pytest --device DEVICE``) through their resume and kill-and-resume checks."""

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

import fedpart


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


def same_runs(a: Path, b: Path, *, metrics: bool = True) -> tuple[list[str], list[str]]:
    """(problems, cells) of run ``b`` against run ``a``: every metric (unless ``metrics`` is
    false), the summary and every checkpoint tensor, exactly. ``problems`` is empty when they
    are equal; ``cells`` are the three report cells (metrics, summary, checkpoint)."""
    rows_a, sum_a, ten_a = read_run(a)
    rows_b, sum_b, ten_b = read_run(b)
    problems = []
    rows_equal = rows_a == rows_b or not metrics
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
        f"{len(rows_a)} rows: "
        + ("not compared" if not metrics else "equal" if rows_equal else "DIFFER"),
        "equal" if summary_equal else "DIFFER",
        f"{len(ten_a)} tensors: " + ("bit-identical" if tensors_equal else "DIFFER"),
    ]
    return problems, cells


def assert_resume_bit_identical(base: dict, tmp_path: Path) -> dict[str, torch.Tensor]:
    """Run ``base`` for 4 rounds straight and stopped at 2 then resumed (checkpoints every 2);
    assert equal metrics rows and summaries and bit-identical checkpoints (:func:`same_runs`);
    return the checkpoint's tensors."""
    rounds_4 = {**base, "federation": {**base["federation"], "rounds": 4}}
    rounds_2 = {**base, "federation": {**base["federation"], "rounds": 2}}
    fedpart.run({**rounds_4, "output": {"dir": str(tmp_path / "straight"), "checkpoint_every": 2}})
    fedpart.run({**rounds_2, "output": {"dir": str(tmp_path / "stopped"), "checkpoint_every": 2}})
    fedpart.resume(tmp_path / "stopped", ["federation.rounds=4"])
    problems, _ = same_runs(tmp_path / "straight", tmp_path / "stopped")
    assert not problems, "; ".join(problems)
    return load_file(str(tmp_path / "straight" / "checkpoint" / "state.safetensors"))


def assert_same_run(a: fedpart.api.Result, b: fedpart.api.Result) -> None:
    """Two runs of one config (e.g. on two backends) gave the same numbers: every client's
    model bit for bit and the same summary (wall time and the backend's name aside)."""
    for c in range(a.simulation.data.num_clients):
        x, y = a.simulation.algorithm.eval_state(c), b.simulation.algorithm.eval_state(c)
        assert all(torch.equal(x[k], y[k]) for k in x)
    s1, s2 = dict(a.summary), dict(b.summary)
    s1.pop("wall_seconds"), s2.pop("wall_seconds")
    s1.pop("backend"), s2.pop("backend")
    assert s1 == s2


QUICKSTART = Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml"


def run_quickstart_uniform(algorithm: str, run_dir: Path) -> object:
    """``fedpart run configs/quickstart.yaml algorithm.name=X federation.capacity=uniform
    federation.rounds=2`` into ``run_dir`` through the CLI; returns its exit code."""
    from fedpart.cli import main

    return main(
        [
            "run",
            str(QUICKSTART),
            f"algorithm.name={algorithm}",
            "federation.capacity=uniform",
            "federation.rounds=2",
            f"output.dir={run_dir}",
            "--quiet",
        ]
    )
