"""``fedpart sweep CONFIG key=v1,v2 ... --seeds S``: a grid of overrides × seeds, run by
:mod:`fedpart.sweep`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from fedpart.errors import FedpartError


def cmd_sweep(args: argparse.Namespace) -> int:
    from fedpart.sweep import parse_seeds, run_sweep

    if args.jobs < 1:
        raise FedpartError(f"sweep: --jobs must be >= 1, got {args.jobs}")
    seeds = parse_seeds(args.seeds)
    sweep, table = run_sweep(
        args.config,
        args.overrides,
        seeds,
        out=args.out,
        jobs=args.jobs,
        ray_address=args.ray_address,
        quiet=args.quiet,
    )
    print(table)
    print(
        f"sweep folder: {sweep.path} (sweep.json, table.md, table.csv); "
        f"rerun the same command to resume",
        file=sys.stderr,
    )
    return 0


def add_parser(sub: Any) -> None:
    """``fedpart sweep``'s parser."""
    p = sub.add_parser(
        "sweep",
        help="a grid of overrides x seeds, in parallel and resumable: mean ± std table",
    )
    p.add_argument("config")
    p.add_argument(
        "overrides",
        nargs="*",
        help="key=v1,v2,... (one grid axis per key; one value: a fixed override)",
    )
    p.add_argument("--seeds", default="0", help="seeds, e.g. 0,1,2 or 0-4 (default 0)")
    p.add_argument(
        "--jobs", type=int, default=2, help="runs in parallel, one process each (default 2)"
    )
    p.add_argument(
        "--out", help="sweep folder (default: runs/sweep-<config>-<digest of config and fixed>)"
    )
    p.add_argument(
        "--ray-address",
        help="run each run as a Ray task on this cluster (auto, ray://host:10001; local: a Ray "
        "started here); default engine.ray_address",
    )
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.set_defaults(func=cmd_sweep)
