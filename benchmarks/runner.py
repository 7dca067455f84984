"""Shared machinery of the reproduction scripts: run many configs as subprocesses, resumably.

A job is one ``fedpart run`` of a config with overrides into its own run directory. Finished
jobs (a ``summary.json`` exists) are skipped, interrupted ones resume from their checkpoint, so
a reproduction can be stopped and restarted at will.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA_ROOT = str(ROOT.parent / "shared" / "data")


@dataclass(frozen=True)
class Job:
    """One run: ``fedpart run CONFIG OVERRIDES`` into ``run_dir``."""

    label: str
    config: Path
    run_dir: Path
    overrides: tuple[str, ...] = field(default_factory=tuple)


def run_job(job: Job) -> dict:
    """Run (or resume, or skip) one job; returns its ``summary.json``."""
    summary = job.run_dir / "summary.json"
    if summary.is_file():
        return json.loads(summary.read_text())
    if (job.run_dir / "checkpoint").is_dir():
        cmd = [sys.executable, "-m", "fedpart.cli", "run", "--resume", str(job.run_dir), "--quiet"]
    else:
        cmd = [
            sys.executable,
            "-m",
            "fedpart.cli",
            "run",
            str(job.config),
            "engine.backend=sequential",  # the reference backend, as the recorded numbers
            *job.overrides,
            "engine.threads=1",
            f"output.dir={job.run_dir}",
            "output.overwrite=true",
            "--quiet",
        ]
    t0 = time.time()
    subprocess.run(cmd, check=True, cwd=ROOT)
    print(f"  {job.label}: {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    return json.loads(summary.read_text())


def run_jobs(jobs: Sequence[Job], parallel: int) -> list[dict]:
    """Run ``jobs``, ``parallel`` at a time (one torch thread each); summaries in job order."""
    with ThreadPoolExecutor(max(1, parallel)) as pool:
        return list(pool.map(run_job, jobs))


def pct(values: Sequence[float]) -> str:
    """Accuracy values as a percentage, with the std when there are several seeds."""
    if len(values) == 1:
        return f"{100 * values[0]:.2f}"
    return f"{100 * statistics.mean(values):.2f} ± {100 * statistics.stdev(values):.2f}"
