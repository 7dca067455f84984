"""The command line: ``fedpart run | compare | sweep | list | partition | report | cost | bench``."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from fedpart.cli import compare, cost, flower, listing, partition, report, run, sweep
from fedpart.errors import FedpartError, OneLineParser
from fedpart.errors import one_line as _one_line


def _report(exc: BaseException) -> int:
    """Print a user-caused error as one line on stderr; its exit code."""
    if isinstance(exc, FedpartError):
        print(f"error: {_one_line(str(exc))}", file=sys.stderr)
        return exc.exit_code
    assert isinstance(exc, OSError)
    # the file system refused (a full disk, a read-only or missing directory): name it
    where = f": {exc.filename}" if exc.filename else ""
    print(f"error: {_one_line(exc.strerror or str(exc))}{where}", file=sys.stderr)
    return 2


PLUGIN_HELP = (
    "a module (or .py file) registering your own datasets, models or methods, imported first "
    "and recorded in the run's config.yaml (repeatable; docs/extending.md)"
)


def _take_plugins(argv: list[str]) -> tuple[list[str], list[str]]:
    """``--plugin MODULE`` / ``--plugin=MODULE`` anywhere before ``--``: (plugins, the rest)."""
    plugins, rest, i = [], [], 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            rest += argv[i:]
            break
        if arg == "--plugin":
            if i + 1 >= len(argv):
                raise FedpartError("--plugin: expected a module name or a .py file")
            plugins.append(argv[i + 1])
            i += 2
            continue
        if arg.startswith("--plugin="):
            plugins.append(arg.split("=", 1)[1])
        else:
            rest.append(arg)
        i += 1
    return plugins, rest


def _add_bench(sub: Any) -> None:
    """``fedpart bench`` in the list of subcommands; :func:`main` hands its arguments to
    :func:`fedpart.bench.cli.main`, which parses its own options."""
    sub.add_parser(
        "bench",
        help="performance harness: naive loop vs sequential vs batched vs a centralized "
        "ceiling; --device cuda: sequential vs batched vs ceiling on a GPU (fedpart bench --help)",
        add_help=False,
    )


#: every subcommand's ``add_parser(sub)``, in the order ``fedpart --help`` lists them: a module
#: of this package per subcommand adds its parser, whose ``func`` runs it; a new subcommand is a
#: new module and one entry here
COMMANDS = (
    run.add_parser,
    compare.add_parser,
    sweep.add_parser,
    _add_bench,
    listing.add_parser,
    partition.add_parser,
    report.add_parser,
    cost.add_parser,
    flower.add_parser,
)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="fedpart", description=__doc__)
    parser.add_argument("--plugin", metavar="MODULE", action="append", help=PLUGIN_HELP)
    sub = parser.add_subparsers(dest="command", required=True)
    for add_parser in COMMANDS:
        add_parser(sub)
    for name, command in sub.choices.items():
        if name != "bench":  # the harness lists its own options (fedpart bench --help)
            command.add_argument("--plugin", metavar="MODULE", action="append", help=PLUGIN_HELP)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``fedpart`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # the command line's main module is import-safe for spawned worker processes: here
    # ``engine.backend=auto`` may run them (``backends.resolve_backend``)
    os.environ.setdefault("FEDPART_AUTO_WORKERS", "1")
    try:
        # on every subcommand: imported before anything is resolved (fedpart.plugins)
        plugins, argv = _take_plugins(argv)
        if plugins:
            from fedpart.plugins import use

            use(plugins)
    except FedpartError as exc:
        return _report(exc)
    if argv[:1] == ["bench"]:  # the harness parses its own options
        from fedpart.bench.cli import main as bench_main

        try:
            return bench_main(argv[1:])
        except (FedpartError, OSError) as exc:
            return _report(exc)
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error, already printed as one line (2)
        return int(exc.code or 0)
    try:
        return args.func(args)
    except (FedpartError, OSError) as exc:
        return _report(exc)
    except KeyboardInterrupt:
        if args.command == "sweep":  # its runs resume from their checkpoints when run again
            print("\ninterrupted; run the same command again to resume the sweep", file=sys.stderr)
            return 130
        print(
            "interrupted; continue with 'fedpart run --resume DIR' from the last checkpoint",
            file=sys.stderr,
        )
        return 130
