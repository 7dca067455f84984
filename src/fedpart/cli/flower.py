"""``fedpart flower status RUN_DIR``: how a Flower run ended (``flwr run`` returns 0 also for a
failed run)."""

from __future__ import annotations

import argparse
from typing import Any


def cmd_status(args: argparse.Namespace) -> int:
    from fedpart.flower.progress import status

    code, line = status(args.run_dir)
    print(line)
    return code


def add_parser(sub: Any) -> None:
    """``fedpart flower``'s parser and its ``status`` subcommand."""
    p = sub.add_parser("flower", help="Flower deployments: how a run ended (fedpart flower status)")
    actions = p.add_subparsers(dest="action", required=True)
    s = actions.add_parser(
        "status",
        help="one line on how the Flower run in RUN_DIR ended; exit code 0 completed or "
        "running, 1 failed or stopped, 2 not a run",
    )
    s.add_argument("run_dir", metavar="RUN_DIR", help="the run's output-dir")
    s.set_defaults(func=cmd_status)
