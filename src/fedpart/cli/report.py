"""``fedpart report DIR ...``: finished runs compared in a markdown table and PNG plots."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def print_shared(paths: list) -> None:
    """Above a comparison table: what every run shares (what differs is in the table)."""
    from fedpart.report.compare import shared_setup

    shared = shared_setup(paths)
    if shared:
        print(f"{shared}\n")


def cmd_report(args: argparse.Namespace) -> int:
    from fedpart.report import write_report

    table, written = write_report(args.dirs, args.out)
    print_shared(args.dirs)
    print(table)
    print("plots: " + ", ".join(str(p) for p in written), file=sys.stderr)
    return 0


def add_parser(sub: Any) -> None:
    """``fedpart report``'s parser."""
    p = sub.add_parser("report", help="compare finished runs: markdown table and PNG plots")
    p.add_argument(
        "dirs",
        nargs="+",
        help="run directories, or folders holding runs (a sweep or compare folder)",
    )
    p.add_argument("--out", help="directory for the plots (default: the runs' common parent)")
    p.set_defaults(func=cmd_report)
