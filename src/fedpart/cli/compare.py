"""``fedpart compare CONFIG``: one config run for several methods, in parallel, and their table."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from fedpart.cli.report import print_shared
from fedpart.errors import FedpartError


def _compare_job(config: str, overrides: list[str], run_dir: str) -> dict[str, object]:
    """One run of ``fedpart compare``, always from round 0 (a top-level function, so worker
    processes can run it); its outcome as :func:`fedpart.sweep.run_job` reports one."""
    from fedpart.api import run_into

    try:
        run_into(config, overrides, run_dir, quiet=True)
    except FedpartError as exc:
        return {"state": "failed", "error": str(exc)}
    return {"state": "finished"}


def _uses_field(template: str, field: str) -> bool:
    """Whether the ``output.dir`` template fills in ``{field}`` (``{{field}}`` is a literal
    ``{field}``); False for a template that does not parse (``output_path`` names the error)."""
    import string

    try:
        return any(
            name is not None and name.split(".")[0].split("[")[0] == field
            for _, name, _, _ in string.Formatter().parse(template)
        )
    except ValueError:
        return False


def default_jobs(threads: int) -> int:
    """Runs at a time when ``--jobs`` is not given: the CPU cores this process may use, divided
    by each run's ``engine.threads`` (a run of ``threads`` 0 uses one: the runs set one torch
    thread unless the config asks for more). On a GPU host the runs are launch-bound host work
    too, so it is the host's cores that bound them."""
    from fedpart.engine.parallel import default_workers

    return max(1, default_workers() // max(1, threads))


def cmd_compare(args: argparse.Namespace) -> int:
    from fedpart.api import output_path
    from fedpart.config import load_config
    from fedpart.registry import methods
    from fedpart.report import write_report
    from fedpart.tracking.run_dir import RunDir

    base = load_config(args.config, args.overrides)
    ALGORITHMS = methods()
    names = (
        args.algorithms.split(",")
        if args.algorithms
        else [n for n, cls in ALGORITHMS.items() if cls.supports(base)]
    )
    unknown = [n for n in names if n not in ALGORITHMS]
    if unknown:
        raise FedpartError(
            f"--algorithms: unknown algorithm '{unknown[0]}'; valid choices: {', '.join(sorted(ALGORITHMS))}"
        )
    output_path(base, stamp=args.stamp)  # a bad placeholder: named in the template as given
    out_template = (
        base.output.dir
        if _uses_field(base.output.dir, "algorithm")
        else base.output.dir + "/{algorithm}"
    )
    jobs = []
    for name in names:
        out = output_path(base, out_template, algorithm=name, stamp=args.stamp)
        # the run goes into ``out`` as it is (its braces filled in once, here): set, not parsed
        cfg = base.with_overrides([f"algorithm.name={name}"])
        if not cfg.output.overwrite:
            RunDir(out).prepare(False)  # an occupied directory fails before any run starts
        jobs.append((name, cfg, out))
    from fedpart.sweep import Job, Progress, execute

    if args.jobs < 0:
        raise FedpartError(f"compare: --jobs must be >= 0, got {args.jobs}")
    workers = args.jobs or default_jobs(base.engine.threads)
    runs = [
        Job(
            name,
            cfg.seed,
            out,
            [*args.overrides, f"algorithm.name={name}"],
            cfg.federation.rounds,
        )
        for name, cfg, out in jobs
    ]
    if not args.quiet:
        where = os.path.commonpath([str(out.resolve()) for _, _, out in jobs])
        print(f"{len(runs)} runs into {where}", file=sys.stderr)
    with Progress(runs, enabled=not args.quiet, label="compare") as progress:
        outcomes = execute(
            runs,
            args.config,
            workers=workers,
            on_done=progress.run_ended,
            runner=_compare_job,
            skip_finished=False,
        )
    done = [out for _, _, out in jobs if outcomes[out].get("state") == "finished"]
    if done:
        # the table and the plots, as ``fedpart report`` makes them, in the runs' common folder
        where = Path(os.path.commonpath([str(d.resolve()) for d in done]))
        table, written = write_report(done, where if len(done) > 1 else where.parent)
        print_shared(done)
        print(table)
        print(f"runs: {where}", file=sys.stderr)
        print("plots: " + ", ".join(str(p) for p in written), file=sys.stderr)
        print(f"again: fedpart report {where}", file=sys.stderr)
    failed = [(name, outcomes[out]) for name, _, out in jobs if out not in done]
    if failed:
        name, outcome = failed[0]
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        raise FedpartError(f"compare: {name} failed{more}: {outcome.get('error')}")
    return 0


def add_parser(sub: Any) -> None:
    """``fedpart compare``'s parser."""
    import time

    p = sub.add_parser("compare", help="run one config for several algorithms and print a table")
    p.add_argument("config")
    p.add_argument("overrides", nargs="*")
    p.add_argument("--algorithms", help="comma-separated names (default: every applicable method)")
    p.add_argument(
        "--jobs",
        type=int,
        default=0,
        help="runs in parallel, one process each (default 0: one per usable CPU core, divided "
        "by engine.threads when set)",
    )
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_compare, stamp=time.strftime("%Y%m%d-%H%M%S"))
