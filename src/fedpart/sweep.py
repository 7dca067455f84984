"""Seeded sweeps: the cartesian grid of config overrides × seeds, run in parallel and resumably.

``fedpart sweep CONFIG key=v1,v2 ... --seeds 0,1,2 --jobs N`` expands every ``key=v1,v2,...``
into one axis of the grid (a ``key=value`` with a single value is a fixed override), runs every
cell once per seed into ``SWEEP/<cell>/seed<s>/`` and writes ``SWEEP/sweep.json`` (the manifest),
``SWEEP/table.md`` and ``SWEEP/table.csv`` (mean ± std over seeds per cell).

A run whose ``summary.json`` exists is not run again; one that was interrupted (its
``config.yaml`` exists) is continued with :func:`fedpart.api.resume`, so killing a sweep and
starting the same command again loses at most the rounds after each run's last checkpoint.
Runs execute in spawned worker processes (one torch thread each unless the config sets
``engine.threads``), or as Ray tasks on an existing cluster with ``--ray-address``.
"""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import json
import math
import os
import re
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedpart.errors import FedpartError
from fedpart.report.tables import FINAL_STAGE_NOTE, has_final_stage

MANIFEST = "sweep.json"
#: the accuracy-like blocks of ``summary.json`` a sweep table aggregates, in column order
METRIC_BLOCKS = (
    "accuracy",
    "accuracy_weighted",
    "global_accuracy",
    "participants_accuracy_before",
    "participants_accuracy_after",
)

#: their column names in the table
BLOCK_LABELS = {
    "accuracy": "acc",
    "accuracy_weighted": "weighted",
    "global_accuracy": "global",
    "participants_accuracy_before": "participants before",
    "participants_accuracy_after": "participants after",
}


# ------------------------------------------------------------------------------- the grid
def split_values(text: str) -> list[str]:
    """``v1,v2,...`` split at the commas that are not inside brackets or quotes, each value
    stripped; a text without such a comma is one value, taken as written (as ``fedpart run``
    takes it: a path keeps its spaces).

    ``partition.split=[0.75,0,0.25]`` therefore stays one value.
    """
    values, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == "," and depth == 0:
            values.append(text[start:i])
            start = i + 1
    values.append(text[start:])
    return [v.strip() for v in values] if len(values) > 1 else [text]


def parse_grid(specs: Sequence[str]) -> list[tuple[str, list[str]]]:
    """The axes of a sweep from ``key=v1,v2,...`` arguments, in the order given.

    Raises:
        FedpartError: an argument is not ``key=values``, a value is empty, or a key repeats.
    """
    axes: list[tuple[str, list[str]]] = []
    for spec in specs:
        key, sep, text = spec.partition("=")
        key = key.strip()
        if not sep or not key:
            raise FedpartError(f"sweep: expected key=value[,value...], got {spec!r}")
        values = split_values(text)
        if any(v == "" for v in values):
            raise FedpartError(f"sweep: {key}: empty value in {text!r}")
        if key in (k for k, _ in axes):
            raise FedpartError(f"sweep: {key} is given twice; list its values once: {key}=a,b")
        if key == "seed":
            raise FedpartError("sweep: give the seeds with --seeds 0,1,2, not seed=...")
        if key == "output.dir":
            raise FedpartError(
                "sweep: the runs go into <--out>/<cell>/seed<s>; give the folder with --out DIR, "
                "not output.dir=..."
            )
        axes.append((key, values))
    return axes


def parse_seeds(text: str) -> list[int]:
    """``0,1,2`` or a range ``0-4`` (inclusive) as a list of distinct seeds.

    Raises:
        FedpartError: not a list of non-negative integers.
    """
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d{1,9})(?:-(\d{1,9}))?", part)
        if not m:
            raise FedpartError(f"--seeds: expected integers like 0,1,2 or 0-4, got {text!r}")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise FedpartError(f"--seeds: empty range {part!r}")
        seeds.extend(s for s in range(lo, hi + 1) if s not in seeds)
    return seeds


def _slug(text: str) -> str:
    """A directory-name-safe form of an override value."""
    slug = re.sub(r"[^A-Za-z0-9._+-]+", "-", text).strip("-.")
    return slug[:40] or "x"


@dataclass
class Cell:
    """One point of the grid: its overrides (the swept keys only) and its directory name."""

    name: str
    overrides: list[str]


def cells_of(axes: Sequence[tuple[str, list[str]]]) -> list[Cell]:
    """The cartesian product of the axes with more than one value (single values are fixed).

    A cell is named by its values (``fedavg`` or ``fedavg_lr-0.1``); the key is added where two
    axes would otherwise give the same name.
    """
    swept = [(k, vs) for k, vs in axes if len(vs) > 1]
    cells = []
    for combo in itertools.product(*(vs for _, vs in swept)):
        pairs = list(zip((k for k, _ in swept), combo, strict=True))
        name = "_".join(_slug(v) for _, v in pairs) or "all"
        cells.append(Cell(name, [f"{k}={v}" for k, v in pairs]))
    names = [c.name for c in cells]
    if len(set(names)) < len(names):  # e.g. two axes with the value 1: name the keys too
        for c in cells:
            c.name = "_".join(_slug(o.replace("=", "-")) for o in c.overrides)
    return cells


# ------------------------------------------------------------------------------- jobs
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

    A background thread polls the run directories every ``interval`` seconds; on a terminal the
    line is rewritten in place, elsewhere it is printed when a run ends and at most once every
    15 seconds. The ETA extrapolates the rounds completed since the sweep (re)started.
    """

    def __init__(
        self, jobs: Sequence[Job], *, enabled: bool = True, interval: float = 1.0, label: str = ""
    ) -> None:
        self.jobs = list(jobs)
        self.enabled = enabled and bool(self.jobs)
        self.interval = interval
        self.label = label or "sweep"
        self.total = sum(j.rounds for j in self.jobs)
        self.start_rounds = self._done()
        self.t0 = time.monotonic()
        self.runs_done = sum(j.state() == "finished" for j in self.jobs)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._tty = sys.stderr.isatty()
        self._last_print = 0.0

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
        """Print the line (on a terminal in place; elsewhere when forced or every 15 s)."""
        if not self.enabled:
            return
        now = time.monotonic()
        if self._tty:
            print("\r" + self.line() + "\x1b[K", end="", file=sys.stderr, flush=True)
        elif force or now - self._last_print >= 15:
            print(self.line(), file=sys.stderr, flush=True)
            self._last_print = now

    def run_ended(self, job: Job, outcome: dict[str, Any]) -> None:
        """Count a run that ended and report a failure on its own line."""
        self.runs_done += outcome.get("state") == "finished"
        if outcome.get("state") == "failed" and self.enabled:
            end = "\n" if self._tty else ""
            print(
                f"{end}{job.cell} seed {job.seed}: failed: {outcome.get('error')}",
                file=sys.stderr,
            )
        self.show(force=True)

    def __enter__(self) -> Progress:
        if self.enabled:
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
        if self.enabled and self._tty:
            print(file=sys.stderr)


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


# ------------------------------------------------------------------------------- the sweep
@dataclass
class Sweep:
    """A sweep's folder, grid, seeds and jobs (see :func:`plan`)."""

    path: Path
    config: str
    fixed: list[str]
    axes: list[tuple[str, list[str]]]
    seeds: list[int]
    cells: list[Cell]
    jobs: list[Job] = field(default_factory=list)
    digest: str = ""

    def manifest(self, outcomes: dict[Path, dict[str, Any]] | None = None) -> dict[str, Any]:
        """The JSON manifest: the grid, and each cell's run directories and states."""
        outcomes = outcomes or {}
        cells = []
        for cell in self.cells:
            runs = []
            for job in (j for j in self.jobs if j.cell == cell.name):
                entry: dict[str, Any] = {
                    "seed": job.seed,
                    "dir": str(job.run_dir.relative_to(self.path)),
                    "state": job.state(),
                }
                error = outcomes.get(job.run_dir, {}).get("error")
                if error and entry["state"] != "finished":
                    entry["state"], entry["error"] = "failed", error
                runs.append(entry)
            cells.append({"name": cell.name, "overrides": cell.overrides, "runs": runs})
        return {
            "config": self.config,
            "fixed": self.fixed,
            "grid": {k: vs for k, vs in self.axes if len(vs) > 1},
            "seeds": self.seeds,
            "config_digest": self.digest,
            "cells": cells,
        }

    def write_manifest(self, outcomes: dict[Path, dict[str, Any]] | None = None) -> None:
        """Replace ``sweep.json`` atomically."""
        from fedpart.tracking.run_dir import RunDir

        RunDir(self.path).write_json(MANIFEST, self.manifest(outcomes))


def _config_digest(base: Any) -> str:
    """A digest of the resolved base config without its output section (the sweep sets it)."""
    data = base.to_dict()
    data.pop("output", None)
    data.pop("seed", None)
    text = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:10]


def plan(
    config: str,
    specs: Sequence[str],
    seeds: Sequence[int],
    out: str | os.PathLike | None = None,
) -> Sweep:
    """Expand a sweep: check every cell's config, choose the folder, list the jobs.

    The default folder ``runs/sweep-<config name>-<digest>`` depends only on the config and the
    fixed overrides, so the same command finds its earlier runs again.

    Raises:
        FedpartError: a bad override in any cell (named with the cell), or a folder that holds
            a sweep of another config.
    """
    from fedpart.config import load_config

    axes = parse_grid(specs)
    fixed = [f"{k}={vs[0]}" for k, vs in axes if len(vs) == 1]
    base = load_config(config, fixed)
    digest = _config_digest(base)
    cells = cells_of(axes)
    path = Path(out) if out else Path("runs") / f"sweep-{Path(config).stem}-{digest}"
    path = path.resolve()  # workers and Ray tasks may run in another directory
    sweep = Sweep(path, str(Path(config).resolve()), fixed, axes, list(seeds), cells, [], digest)
    old = path / MANIFEST
    if old.is_file():
        try:
            previous = json.loads(old.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise FedpartError(f"{old}: cannot read ({exc})") from exc
        if previous.get("config_digest") != digest:
            raise FedpartError(
                f"{path} holds a sweep of another config or fixed overrides; choose another --out"
            )
    for cell in cells:
        for seed in seeds:
            run_dir = path / cell.name / f"seed{seed}"
            overrides = [*fixed, *cell.overrides, f"seed={seed}"]
            try:
                cfg = base.with_overrides([*cell.overrides, f"seed={seed}"])
            except FedpartError as exc:
                raise FedpartError(f"sweep cell {cell.name}: {exc}") from exc
            sweep.jobs.append(Job(cell.name, seed, run_dir, overrides, cfg.federation.rounds))
    return sweep


# ------------------------------------------------------------------------------- the table
def _mean_std(values: Sequence[float]) -> tuple[float, float | None]:
    mean = statistics.fmean(values)
    return mean, (statistics.stdev(values) if len(values) > 1 else None)


def _fmt(values: Sequence[float], scale: float = 100.0, digits: int = 2) -> str:
    if not values:
        return "-"
    mean, std = _mean_std(values)
    text = f"{scale * mean:.{digits}f}"
    return text if std is None else f"{text} ± {scale * std:.{digits}f}"


def _value(summary: dict[str, Any], block: str, stat: str) -> float | None:
    entry = summary.get(block)
    value = entry.get(stat) if isinstance(entry, dict) else None
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


@dataclass
class CellResult:
    """The finished runs of one cell: summaries and whether the method has a final stage."""

    name: str
    overrides: list[str]
    summaries: list[dict[str, Any]]
    final_stage: bool = False
    missing: int = 0


def collect(sweep: Sweep) -> list[CellResult]:
    """Read the summaries of every finished run, cell by cell."""
    from fedpart.report import load_run

    results = []
    for cell in sweep.cells:
        res = CellResult(cell.name, cell.overrides, [])
        for job in (j for j in sweep.jobs if j.cell == cell.name):
            if job.state() != "finished":
                res.missing += 1
                continue
            run = load_run(job.run_dir)
            res.summaries.append(run.summary)
            res.final_stage |= has_final_stage(run.metrics)
        results.append(res)
    return results


def table_rows(results: Sequence[CellResult], last_k: int = 10) -> tuple[list[str], list[list]]:
    """Header and rows of the aggregated table: per cell the number of seeds and, per metric,
    the list of per-seed values (fractions for accuracies, MB, seconds).

    Columns: final / best / last-k of every accuracy block any run has, up/down MB, wall s.
    """
    header = ["cell", "seeds"]
    getters: list[tuple[str, Callable[[dict[str, Any]], float | None]]] = []
    for block in METRIC_BLOCKS:
        if not any(_value(s, block, "final") is not None for r in results for s in r.summaries):
            continue
        stats = ("final", "best", "last10_mean") if block != "accuracy_weighted" else ("final",)
        for stat in stats:
            title = {"final": "final", "best": "best", "last10_mean": f"last-{last_k}"}[stat]
            label = BLOCK_LABELS[block]
            getters.append((f"{label} {title} %", lambda s, b=block, t=stat: _value(s, b, t)))

    def comm(key: str) -> Callable[[dict[str, Any]], float | None]:
        def get(s: dict[str, Any]) -> float | None:
            value = (s.get("communication") or {}).get(key)
            return float(value) / 1e6 if isinstance(value, int | float) else None

        return get

    getters += [("up MB", comm("up_bytes")), ("down MB", comm("down_bytes"))]
    getters.append(
        ("wall s", lambda s: float(s["wall_seconds"]) if _is_num(s.get("wall_seconds")) else None)
    )
    header += [g[0] for g in getters]
    rows = []
    for r in results:
        row: list[Any] = [r.name, len(r.summaries)]
        for _, get in getters:
            row.append([v for s in r.summaries if (v := get(s)) is not None])
        rows.append(row)
    return header, rows


def _is_num(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _last_k(results: Sequence[CellResult]) -> int:
    for r in results:
        for s in r.summaries:
            for key in s.get("accuracy") or {}:
                m = re.fullmatch(r"last(\d+)_mean", key)
                if m and key != "last10_mean":
                    return int(m.group(1))
    return 10


def markdown_table(results: Sequence[CellResult]) -> str:
    """The sweep table in markdown: mean ± std over seeds (sample std), accuracies in %."""
    header, rows = table_rows(results, _last_k(results))
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    marked = False
    for r, row in zip(results, rows, strict=True):
        cells = [row[0].replace("|", "\\|"), str(row[1])]
        if r.missing:
            cells[1] += f" ({r.missing} unfinished)"
        for title, values in zip(header[2:], row[2:], strict=True):
            if title.endswith("%"):
                text = _fmt(values)
                if r.final_stage and title.endswith(" final %") and values:
                    text += " †"
                    marked = True
            elif title == "wall s":
                text = _fmt(values, 1.0, 1)
            else:
                text = _fmt(values, 1.0, 2)
            cells.append(text)
        lines.append("| " + " | ".join(cells) + " |")
    if marked:
        lines += ["", FINAL_STAGE_NOTE]
    return "\n".join(lines)


def csv_table(results: Sequence[CellResult]) -> str:
    """The sweep table as CSV: per metric a ``_mean`` and a ``_std`` column, in the summaries'
    units (accuracies as fractions), and ``final_stage`` (1 where final is after fine-tuning)."""
    header, rows = table_rows(results, _last_k(results))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    cols = ["cell", "seeds", "unfinished", "final_stage"]
    for title in header[2:]:
        key = re.sub(r"[^a-z0-9]+", "_", title.replace("%", "").lower()).strip("_")
        cols += [f"{key}_mean", f"{key}_std"]
    writer.writerow(cols)
    for r, row in zip(results, rows, strict=True):
        line: list[Any] = [row[0], row[1], r.missing, int(r.final_stage)]
        for values in row[2:]:
            if values:
                mean, std = _mean_std(values)
                line += [repr(mean), "" if std is None else repr(std)]
            else:
                line += ["", ""]
        writer.writerow(line)
    return out.getvalue()


def write_tables(sweep: Sweep, results: Sequence[CellResult]) -> str:
    """Write ``table.md`` and ``table.csv`` into the sweep folder; return the markdown."""
    from fedpart.tracking.run_dir import RunDir

    text = markdown_table(results)
    rd = RunDir(sweep.path)
    rd.write_text("table.md", text + "\n")
    rd.write_text("table.csv", csv_table(results))
    return text


def run_sweep(
    config: str,
    specs: Sequence[str],
    seeds: Sequence[int],
    *,
    out: str | os.PathLike | None = None,
    jobs: int = 2,
    ray_address: str | None = None,
    quiet: bool = False,
    runner: Runner = run_job,
) -> tuple[Sweep, str]:
    """Plan, run (skipping finished runs, resuming interrupted ones) and tabulate a sweep.

    Returns the sweep and its markdown table. The manifest is written before the first run and
    after every run that ends, so it always says which runs are finished.
    """
    sweep = plan(config, specs, seeds, out)
    sweep.path.mkdir(parents=True, exist_ok=True)
    outcomes: dict[Path, dict[str, Any]] = {}
    sweep.write_manifest(outcomes)
    if ray_address is None:
        from fedpart.config import load_config

        ray_address = load_config(config, sweep.fixed).engine.ray_address or None
    with Progress(sweep.jobs, enabled=not quiet, label=f"sweep {sweep.path.name}") as progress:

        def on_done(job: Job, outcome: dict[str, Any]) -> None:
            outcomes[job.run_dir] = outcome
            sweep.write_manifest(outcomes)
            progress.run_ended(job, outcome)

        outcomes.update(
            execute(
                sweep.jobs,
                config,
                workers=jobs,
                ray_address=ray_address,
                on_done=on_done,
                runner=runner,
            )
        )
    sweep.write_manifest(outcomes)
    return sweep, write_tables(sweep, collect(sweep))
