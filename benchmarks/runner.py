"""Shared machinery of the reproduction scripts: run many configs as subprocesses, resumably.

A job is one ``fedpart run`` of a config with overrides into its own run directory. Finished
jobs (a ``summary.json`` exists) are skipped, interrupted ones resume from their checkpoint, so
a reproduction can be stopped and restarted at will.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA_ROOT = str(ROOT.parent / "shared" / "data")


@dataclass(frozen=True)
class Job:
    """One run: ``fedpart run CONFIG OVERRIDES`` into ``run_dir``.

    With ``extends`` (the directory of a finished run), the job is that run continued: its
    directory is copied to ``run_dir`` and resumed with ``overrides`` (e.g. more rounds), which
    ends where a run started with them would (resume is bit-identical)."""

    label: str
    config: Path
    run_dir: Path
    overrides: tuple[str, ...] = field(default_factory=tuple)
    extends: Path | None = None
    #: overrides after everything else a new run is given (``--set``: e.g. a GPU's
    #: ``engine.device=cuda engine.backend=auto``); recorded in the run's config.yaml
    settings: tuple[str, ...] = field(default_factory=tuple)


def diverged(reason: str) -> bool:
    """Whether a failed run's one-line reason is a training divergence (a result worth recording;
    any other failure is worth retrying)."""
    return "diverged" in reason


def run_job(job: Job) -> dict:
    """Run (or resume, or skip) one job; returns its ``summary.json``."""
    summary = job.run_dir / "summary.json"
    if summary.is_file():
        return json.loads(summary.read_text())
    marker = job.run_dir / "FAILED"
    if marker.is_file():  # a run that diverged before: report it again, delete to retry
        return {"failed": marker.read_text().strip()}
    if job.extends is not None and not job.run_dir.exists():
        if not (job.extends / "summary.json").is_file():
            return {"failed": f"{job.extends} has not finished: the run it extends comes first"}
        partial = job.run_dir.with_name(job.run_dir.name + ".copying")
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(job.extends, partial)
        (partial / "summary.json").unlink()  # not finished any more
        partial.rename(job.run_dir)  # a kill while copying leaves no half-copied run
    # a kill between the two renames of a checkpoint rotation leaves only the previous one
    if any((job.run_dir / name).is_dir() for name in ("checkpoint", "checkpoint.prev")):
        cmd = [sys.executable, "-m", "fedpart.cli", "run", "--resume", str(job.run_dir), "--quiet"]
        if job.extends is not None:
            cmd += list(job.overrides)
    else:
        cmd = [
            sys.executable,
            "-m",
            "fedpart.cli",
            "run",
            str(job.config),
            "engine.backend=sequential",  # the reference backend, as the recorded numbers
            "engine.conv_layout=contiguous",  # the layout the recorded numbers were computed in
            "engine.cache_features=false",  # per-batch body passes, as the recorded numbers
            *job.overrides,
            "engine.threads=1",
            *job.settings,
            f"output.dir={job.run_dir}",
            "output.overwrite=true",
            "--quiet",
        ]
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        # A diverged or failed run is a result to report, not a reason to stop the others.
        lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
        reason = lines[-1] if lines else f"exit code {proc.returncode}"
        print(f"  {job.label}: FAILED: {reason}", file=sys.stderr, flush=True)
        if diverged(reason):  # a result; anything else (environment, data) is retried
            job.run_dir.mkdir(parents=True, exist_ok=True)
            marker.write_text(reason + "\n")
        return {"failed": reason}
    print(f"  {job.label}: {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    return json.loads(summary.read_text())


def reproduction_parser(doc: str, experiments: Sequence[str]) -> argparse.ArgumentParser:
    """The command line every reproduction script shares (``--only``, ``--jobs``, ``--data-root``,
    ``--out``, ``--configs``, ``--report``); a script adds its own options."""
    ap = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--only", default="", help="comma-separated experiments: " + ", ".join(experiments)
    )
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--data-root", default=DATA_ROOT)
    ap.add_argument("--configs", default="", help="only runs of these configs (comma-separated)")
    ap.add_argument("--runs", default="", help="only these runs, by record name (comma-separated)")
    ap.add_argument("--report", action="store_true", help="print the tables from the records only")
    ap.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="overrides of every new run, after the script's own (on a GPU: engine.device=cuda "
        "engine.backend=auto output.checkpoint_every=5)",
    )
    return ap


def selected_runs(
    ap: argparse.ArgumentParser, args: argparse.Namespace, experiments: dict[str, list[tuple]]
) -> dict[str, tuple]:
    """Run name -> the rest of its entry (config first) for ``--only``, ``--configs`` and
    ``--runs``; an unknown experiment or run name is a usage error."""
    chosen = args.only.split(",") if args.only else list(experiments)
    unknown = [e for e in chosen if e not in experiments]
    if unknown:
        ap.error(f"unknown experiment(s) {unknown}; valid: {', '.join(experiments)}")
    runs: dict[str, tuple] = {}
    for e in chosen:
        for name, *rest in experiments[e]:
            runs.setdefault(name, tuple(rest))
    if args.configs:
        keep = set(args.configs.split(","))
        runs = {n: r for n, r in runs.items() if r[0] in keep}
    if getattr(args, "runs", ""):
        names = args.runs.split(",")
        missing = [n for n in names if n not in runs]
        if missing:
            ap.error(f"unknown run(s) {missing} in the selected experiments")
        runs = {n: runs[n] for n in names}
    return runs


def run_missing(
    jobs: Sequence[Job],
    load: Callable[[str], dict | None],
    record: Callable[[str, dict, Path], None],
    parallel: int,
    record_failure: Callable[[str, str], None] | None = None,
    settings: Sequence[str] = (),
) -> None:
    """Run (or resume) the jobs whose record ``load(label)`` does not find, ``parallel`` at a
    time, calling ``record(label, summary, run_dir)`` as each finishes. A failed run (e.g.
    diverged) is reported by :func:`run_job`; ``record_failure(label, reason)``, when given,
    records it, so the tables can say so; any other failure (a broken environment, a missing
    dataset) is only reported, so the next invocation tries the run again. ``settings`` (the
    command line's ``--set``) are given to every new run after its own overrides."""
    todo = [
        dataclasses.replace(job, settings=tuple(settings))
        for job in jobs
        if load(job.label) is None
    ]
    print(
        f"{len(jobs) - len(todo)} of {len(jobs)} runs recorded; running {len(todo)}",
        file=sys.stderr,
    )
    t0 = time.time()

    def one(job: Job) -> None:
        summary = run_job(job)
        if "failed" not in summary:
            record(job.label, summary, job.run_dir)
        elif record_failure is not None and diverged(summary["failed"]):
            record_failure(job.label, summary["failed"])

    with ThreadPoolExecutor(max(1, parallel)) as pool:
        list(pool.map(one, todo))
    print(f"wall time {time.time() - t0:.0f} s", file=sys.stderr)


def metric_rows(run_dir: Path) -> list[dict]:
    """Every row of a finished run's ``metrics.jsonl``."""
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def save_record(records: Path, name: str, summary: dict, rounds: list[dict]) -> None:
    """Write run ``name``'s record (its summary and the per-round values kept) to ``records``."""
    records.mkdir(exist_ok=True)
    text = json.dumps({"run": name, "summary": summary, "rounds": rounds}, indent=1)
    (records / f"{name}.json").write_text(text + "\n")


def load_record(records: Path, name: str) -> dict | None:
    """Run ``name``'s record in ``records``, or None when it has none yet."""
    path = records / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def reproduce(
    doc: str,
    experiments: dict[str, list[tuple]],
    job: Callable[[str, tuple, argparse.Namespace], Job],
    load: Callable[[str], dict | None],
    record: Callable[[str, dict, Path], None],
    report: Callable[[], str],
    out: Path,
) -> None:
    """A reproduction script's ``main``: the shared command line, then the selected runs whose
    record is missing run (or resume), then the tables from the records. ``job(name, entry,
    args)`` makes one run's :class:`Job` from its experiment entry (config first)."""
    ap = reproduction_parser(doc, list(experiments))
    ap.add_argument("--out", default=str(out))
    args = ap.parse_args()
    if not args.report:
        runs = selected_runs(ap, args, experiments)
        run_missing(
            [job(name, entry, args) for name, entry in runs.items()],
            load,
            record,
            args.jobs,
            settings=args.set,
        )
    print(report())


def run_jobs(jobs: Sequence[Job], parallel: int) -> list[dict]:
    """Run ``jobs``, ``parallel`` at a time (one torch thread each); summaries in job order."""
    with ThreadPoolExecutor(max(1, parallel)) as pool:
        return list(pool.map(run_job, jobs))


def failed(runs: Sequence[dict]) -> str | None:
    """A short cell for runs that did not finish (e.g. training diverged), else None."""
    bad = [r["failed"] for r in runs if "failed" in r]
    if not bad:
        return None
    return "diverged" if diverged(bad[0]) else "failed"


def pct(values: Sequence[float]) -> str:
    """Accuracy values as a percentage, with the std when there are several seeds."""
    if len(values) == 1:
        return f"{100 * values[0]:.2f}"
    return f"{100 * statistics.mean(values):.2f} ± {100 * statistics.stdev(values):.2f}"


def mean_std(values: Sequence[float], digits: int = 3) -> str:
    """``mean ± std`` of the recorded seeds (std over ≥ 2 seeds), and how many there are."""
    if not values:
        return "—"
    if len(values) == 1:
        return f"{values[0]:.{digits}f} (1 seed)"
    mean, std = statistics.mean(values), statistics.stdev(values)
    return f"{mean:.{digits}f} ± {std:.{digits}f} ({len(values)} seeds)"


def verdict(a: Sequence[float], b: Sequence[float]) -> tuple[float, str]:
    """Mean difference a − b (seeds of two runs) and whether it holds beyond the seed spread:
    *holds* above std a + std b, *reversed* below minus that, else *within the seed spread*."""
    diff = statistics.mean(a) - statistics.mean(b)
    spread = statistics.stdev(a) + statistics.stdev(b)
    if diff > spread:
        return diff, "holds"
    if diff < -spread:
        return diff, "reversed"
    return diff, "within the seed spread"


# ---------------------------------------------------------------- the results page
def _report_sections(report: str) -> list[tuple[str, list[str]]]:
    """A report's ``### `` sections: (heading line, its lines, heading first, up to its last
    table line)."""
    sections: list[tuple[str, list[str]]] = []
    for line in report.splitlines():
        if line.startswith("### "):
            sections.append((line, [line]))
        elif sections:
            sections[-1][1].append(line)
    out = []
    for heading, lines in sections:
        tables = [i for i, line in enumerate(lines) if line.startswith("|")]
        last = tables[-1] if tables else max(i for i, line in enumerate(lines) if line.strip())
        out.append((heading, lines[: last + 1]))
    return out


def _tables(lines: Sequence[str]) -> int:
    """How many tables (runs of ``|`` lines) ``lines`` hold; minus its line count if none."""
    count = sum(
        1
        for i, line in enumerate(lines)
        if line.startswith("|") and (i == 0 or not lines[i - 1].startswith("|"))
    )
    return count or -len(lines)


def _page_span(page: list[str], heading: str, tables: int) -> tuple[int, int]:
    """Where a report section stands on the page: from its heading through the end of its
    ``tables``-th table (or up to the next heading, if the page has fewer); a section without
    a table (``tables`` < 0: minus its line count) spans as many lines."""
    if heading not in page:
        raise ValueError(f"the page has no section {heading!r}")
    start = page.index(heading)
    if tables < 0:
        return start, start - tables
    seen = 0
    for i in range(start + 1, len(page)):
        line = page[i]
        if line.startswith(("## ", "### ")):
            return start, i
        table = line.startswith("|")
        if table and not page[i - 1].startswith("|"):
            seen += 1
        if table and seen == tables and (i + 1 == len(page) or not page[i + 1].startswith("|")):
            return start, i + 1
    return start, len(page)


def sync_page(page: str, report: str) -> str:
    """``page`` (a results page) with every ``### `` section of ``report`` (a reproduction
    script's ``--report``) in place of the page's part under the same heading: the heading
    through as many tables as the report's section has. The page's own text after them stays."""
    lines = page.splitlines()
    for heading, section in _report_sections(report):
        start, end = _page_span(lines, heading, _tables(section))
        heading_next = end < len(lines) and lines[end].startswith("#")
        lines[start:end] = [*section, ""] if heading_next else section
    return "\n".join(lines) + ("\n" if page.endswith("\n") else "")


def stale_sections(page: str, report: str) -> list[str]:
    """The headings of ``report`` whose part of ``page`` differs from the report's."""
    lines = page.splitlines()
    stale = []
    for heading, section in _report_sections(report):
        try:
            start, end = _page_span(lines, heading, _tables(section))
        except ValueError:
            stale.append(heading)
            continue
        while end > start and not lines[end - 1].strip():
            end -= 1
        if lines[start:end] != section:
            stale.append(heading)
    return stale
