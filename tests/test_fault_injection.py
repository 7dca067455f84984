"""Fault injection: a run killed with SIGKILL at random instants, resumed each time, ends with
the same summary, metrics and parameters as the run that was never interrupted.

Kills land at the crash points of ``fedpart.tracking.faults`` (inside checkpoint writes, half-way
through a metrics append, between the renames of a checkpoint rotation, during a resume...) and
at random times. ``FEDPART_FAULT_KILLS`` (default 24) sets how many kills, ``FEDPART_FAULT_SEED``
the random choices; see docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

import crash_harness
from fedpart.cli import main
from fedpart.tracking.faults import POINTS

KILLS = int(os.environ.get("FEDPART_FAULT_KILLS", "24"))
SEED = int(os.environ.get("FEDPART_FAULT_SEED", "0"))
SIGKILLED = -signal.SIGKILL

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")


def _outputs(run_dir: Path) -> dict:
    """What must not change: everything but the wall-clock fields."""
    summary = json.loads((run_dir / "summary.json").read_text())
    summary.pop("wall_seconds")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        row.pop("wall_seconds", None)
    return {
        "summary": summary,
        "metrics": rows,
        "clients": (run_dir / "clients.json").read_text(),
        "config": (run_dir / "config.yaml").read_text().replace(str(run_dir), "RUN_DIR"),
        "params": load_file(str(run_dir / "checkpoint" / "state.safetensors")),
    }


def _assert_same(got: dict, want: dict, where: str) -> None:
    for key in ("summary", "metrics", "clients", "config"):
        assert got[key] == want[key], f"{where}: {key} differs"
    assert got["params"].keys() == want["params"].keys(), where
    for k, v in want["params"].items():
        assert torch.equal(got["params"][k], v), f"{where}: {k} differs"


class Harness:
    def __init__(self, base: Path) -> None:
        self.ctx = crash_harness.context()
        self.base = base
        trace = base / "trace.txt"
        assert self.start("run", base / "reference", trace=str(trace)) == 0
        t0 = time.perf_counter()  # a second run times a child once the fork server is warm
        assert self.start("run", base / "timing") == 0
        self.duration = time.perf_counter() - t0
        self.reference = _outputs(base / "reference")
        #: every instant of an uninterrupted run, as "point@n"
        self.instants = trace.read_text().split()

    def start(
        self,
        mode: str,
        run_dir: Path,
        crash_at: str | None = None,
        after: float | None = None,
        trace: str | None = None,
    ) -> int | None:
        """Run a child to its end, or kill it at ``crash_at`` or after ``after`` seconds."""
        p = self.ctx.Process(
            target=crash_harness.child, args=(mode, str(run_dir), crash_at, trace, None)
        )
        p.start()
        p.join(after if after is not None else 300)
        if p.is_alive():
            with contextlib.suppress(ProcessLookupError):  # it may end in between
                os.kill(p.pid, signal.SIGKILL)
            p.join()
        return p.exitcode


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    return Harness(tmp_path_factory.mktemp("faults"))


def test_sigkill_at_random_instants_resumes_to_the_same_run(harness):
    rng = random.Random(SEED)
    by_point: dict[str, list[str]] = {}
    for instant in harness.instants:
        by_point.setdefault(instant.split("@")[0], []).append(instant)
    points = sorted(by_point)
    kills: Counter[str] = Counter()
    trial = 0
    while sum(kills.values()) < KILLS:
        run_dir = harness.base / f"trial{trial}"
        # the first trials visit every crash point once; then random instants and random times
        if trial < len(points):
            plan: tuple[str | None, float | None] = (rng.choice(by_point[points[trial]]), None)
        elif trial % 3 == 0:
            plan = (None, rng.uniform(0.0, harness.duration))
        else:
            plan = (rng.choice(harness.instants), None)
        for attempt in range(20):
            mode = "resume" if (run_dir / "config.yaml").is_file() else "run"
            crash_at, after = plan
            code = harness.start(mode, run_dir, crash_at, after)
            if code == SIGKILLED:
                kills[(crash_at or "timed").split("@")[0]] += 1
            else:
                assert code == 0, f"trial {trial}: the {mode} after {attempt} kills failed"
                break
            # a resume may be killed again: at a random point's first or second pass
            plan = (f"{rng.choice(POINTS)}@{rng.randint(1, 2)}", None)
            if rng.random() < 0.5:
                plan = (None, None)
        _assert_same(_outputs(run_dir), harness.reference, f"trial {trial}")
        assert not (run_dir / ".checkpoint.tmp").exists()
        assert (run_dir / "checkpoint.prev" / "meta.json").is_file()  # two generations kept
        trial += 1
    print(f"fault injection: {sum(kills.values())} kills in {trial} runs: {dict(kills)}")
    assert sum(kills.values()) >= KILLS
    assert kills["metrics.torn"] and any(p.startswith("checkpoint.") for p in kills)


def test_two_processes_on_one_directory(harness, tmp_path, capsys):
    """Started at the same instant, one run proceeds and the other stops with one line."""
    run_dir = tmp_path / "shared"
    procs = [
        harness.ctx.Process(
            target=crash_harness.child, args=("run", str(run_dir), None, None, None)
        )
        for _ in range(2)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    assert sorted(p.exitcode for p in procs) == [0, 1]
    _assert_same(_outputs(run_dir), harness.reference, "two processes")

    held, release = harness.ctx.Event(), harness.ctx.Event()
    holder = harness.ctx.Process(target=crash_harness.hold_lock, args=(str(run_dir), held, release))
    holder.start()
    assert held.wait(60)
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(crash_harness.CONFIG))
    try:
        code = main(["run", "--resume", str(run_dir), "--quiet"])
    finally:
        release.set()
        holder.join(60)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert f"in use by another fedpart process (pid {holder.pid})" in err[0]
