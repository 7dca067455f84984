"""Running a sweep's jobs: one run each, finished ones skipped, interrupted ones resumed, in
spawned worker processes or as Ray tasks (:func:`execute`), with one progress line
(:class:`Progress`). ``fedpart compare`` runs its methods through the same two."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedpart.errors import FedpartError


@dataclass
class Job:
    """One run of a sweep: its cell, seed, overrides (fixed, swept, seed) and directory (the
    run's ``output.dir``, set on its config as it is: see :func:`fedpart.api.run_into`)."""

    cell: str
    seed: int
    run_dir: Path
    overrides: list[str]
    rounds: int

    def state(self) -> str:
        """``finished`` (summary.json), ``interrupted`` (started, not finished) or ``pending``."""
        if (self.run_dir / "summary.json").is_file():
            return "finished"
        if (self.run_dir / "config.yaml").is_file():
            return "interrupted"
        return "pending"


def run_job(config: str, overrides: list[str], run_dir: str, quiet: bool = True) -> dict[str, Any]:
    """Run, resume or skip one run; its outcome as ``{"state": ..., "error": ...}``.

    A top-level function so worker processes and Ray tasks can call it. Errors of the run
    (a diverged run, a bad override, a directory in use) are returned, not raised, so one
    failed run does not stop the sweep.
    """
    import torch

    torch.set_num_threads(1)  # engine.threads, when set, overrides this in Simulation
    rd = Path(run_dir)
    try:
        if (rd / "summary.json").is_file():
            return {"state": "finished"}
        if (rd / "config.yaml").is_file():
            from fedpart.api import resume

            resume(rd, quiet=quiet)
        else:
            from fedpart.api import run_into

            run_into(config, overrides, rd, quiet=quiet)
    except FedpartError as exc:
        return {"state": "failed", "error": str(exc)}
    except Exception as exc:  # noqa: BLE001 - any failure of one run is that run's result
        return {"state": "failed", "error": f"{type(exc).__name__}: {exc}"}
    return {"state": "finished"}


def _rounds_done(run_dir: Path) -> int:
    """Rounds logged in ``metrics.jsonl`` (the progress of a running run; 0 if none)."""
    try:
        data = (run_dir / "metrics.jsonl").read_bytes()
    except OSError:
        return 0
    return data.count(b"\n") - data.count(b'"stage": "final"')


class Progress:
    """One overall progress line with an ETA on stderr, from the rounds the runs have logged.

    A background thread polls the run directories every ``interval`` seconds; tqdm draws the
    line (on a terminal in place, elsewhere at most once every 15 seconds, and whenever a run
    ends), a failed run is reported on a line of its own. The ETA extrapolates the rounds
    completed since the sweep (re)started.
    """

    def __init__(
        self, jobs: Sequence[Job], *, enabled: bool = True, interval: float = 1.0, label: str = ""
    ) -> None:
        from tqdm import tqdm

        self.jobs = list(jobs)
        self.interval = interval
        self.label = label or "sweep"
        self.total = sum(j.rounds for j in self.jobs)
        self.start_rounds = self._done()
        self.t0 = time.monotonic()
        self.runs_done = sum(j.state() == "finished" for j in self.jobs)
        self.bar = tqdm(
            file=sys.stderr,
            disable=not (enabled and self.jobs),
            bar_format="{desc}",  # the line below, cut to the terminal's width
            mininterval=interval if sys.stderr.isatty() else 15,
            miniters=0,
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _done(self) -> int:
        return sum(
            j.rounds if j.state() == "finished" else min(_rounds_done(j.run_dir), j.rounds)
            for j in self.jobs
        )

    def line(self) -> str:
        """The progress line: runs and rounds done, elapsed time and the ETA."""
        done = self._done()
        elapsed = time.monotonic() - self.t0
        gained = done - self.start_rounds
        if gained > 0 and done < self.total:
            eta = _duration(elapsed * (self.total - done) / gained)
        else:
            eta = "0s" if done >= self.total else "?"
        pct = 100 * done / self.total if self.total else 100.0
        return (
            f"[{self.label}] {self.runs_done}/{len(self.jobs)} runs, {done}/{self.total} rounds "
            f"({pct:.0f}%), elapsed {_duration(elapsed)}, ETA {eta}"
        )

    def show(self, force: bool = False) -> None:
        """Hand tqdm the line: drawn now when forced, else once its interval has passed."""
        self.bar.set_description_str(self.line(), refresh=False)
        if force:
            self.bar.refresh()
        else:
            self.bar.update(0)

    def run_ended(self, job: Job, outcome: dict[str, Any]) -> None:
        """Count a run that ended and report a failure on its own line."""
        self.runs_done += outcome.get("state") == "finished"
        if outcome.get("state") == "failed" and not self.bar.disable:
            error = f"{job.cell} seed {job.seed}: failed: {outcome.get('error')}"
            self.bar.write(error, file=sys.stderr)
        self.show(force=True)

    def __enter__(self) -> Progress:
        if not self.bar.disable:
            self.show(force=True)
            self._thread = threading.Thread(target=self._poll, daemon=True)
            self._thread.start()
        return self

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            self.show()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.bar.close()


def _duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


Runner = Callable[[str, list[str], str], dict[str, Any]]


def execute(
    jobs: Sequence[Job],
    config: str,
    *,
    workers: int = 1,
    ray_address: str | None = None,
    on_done: Callable[[Job, dict[str, Any]], None] | None = None,
    runner: Runner = run_job,
    skip_finished: bool = True,
) -> dict[Path, dict[str, Any]]:
    """Run the jobs that are not finished; each job's outcome by run directory.

    Finished jobs are not dispatched at all (a finished sweep reruns in the time it takes to
    read the summaries); ``skip_finished=False`` dispatches every job (``fedpart compare`` with
    ``output.overwrite=true`` runs again). ``workers`` > 1 runs that many spawned processes; ``ray_address``
    (``auto``, ``ray://host:10001``, or ``local`` for a Ray started here) sends each run to a
    Ray cluster as a one-CPU task instead — the run directories must then be on a file system
    every node sees.
    """
    outcomes: dict[Path, dict[str, Any]] = {}
    todo = []
    for job in jobs:
        if skip_finished and job.state() == "finished":
            outcomes[job.run_dir] = {"state": "finished"}
        else:
            todo.append(job)

    def done(job: Job, outcome: dict[str, Any]) -> None:
        outcomes[job.run_dir] = outcome
        if on_done is not None:
            on_done(job, outcome)

    if not todo:
        return outcomes
    if ray_address:
        _execute_ray(todo, config, ray_address, done, runner)
    elif workers > 1 and len(todo) > 1:
        import multiprocessing
        from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(
            min(workers, len(todo)), mp_context=ctx, initializer=_one_process_per_run
        ) as pool:
            pending = {pool.submit(runner, config, j.overrides, str(j.run_dir)): j for j in todo}
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in finished:
                    done(pending.pop(fut), fut.result())
    else:
        for job in todo:
            done(job, runner(config, job.overrides, str(job.run_dir)))
    return outcomes


def _one_process_per_run() -> None:
    """Runs of a parallel sweep already fill the cores: ``engine.backend=auto`` keeps each in
    its own process (``backends.resolve_backend``)."""
    os.environ["FEDPART_AUTO_WORKERS"] = "0"


def _run_alone(runner: Runner, config: str, overrides: list[str], run_dir: str) -> dict[str, Any]:
    """``runner`` in a one-CPU Ray task, ``engine.backend=auto`` kept in its process."""
    _one_process_per_run()
    return runner(config, overrides, run_dir)


def _execute_ray(
    todo: Sequence[Job],
    config: str,
    address: str,
    done: Callable[[Job, dict[str, Any]], None],
    runner: Runner,
) -> None:
    """Each job as a one-CPU Ray task on the cluster at ``address``; outcomes as they end."""
    try:
        import ray
    except ImportError as exc:
        raise FedpartError(
            "--ray-address needs Ray: pip install 'fedpart[ray]' (or ray>=2.9)"
        ) from exc
    if not ray.is_initialized():
        try:
            from fedpart.engine.ray_backend import ray_init_options

            # as the Ray backend starts it: no dashboard
            ray.init(
                ignore_reinit_error=True,
                **ray_init_options(None if address == "local" else address),
            )
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise FedpartError(f"--ray-address {address}: cannot connect to Ray ({exc})") from exc
    task = ray.remote(num_cpus=1)(_run_alone)
    refs = {task.remote(runner, config, j.overrides, str(j.run_dir)): j for j in todo}
    while refs:
        ready, _ = ray.wait(list(refs), num_returns=1)
        for ref in ready:
            done(refs.pop(ref), ray.get(ref))
