"""``fedpart run CONFIG [key=value ...]`` (or ``--resume DIR``): one experiment, its result line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from fedpart.errors import FedpartError


def split_args(config: str | None, rest: list[str]) -> tuple[str | None, list[str]]:
    """``CONFIG [key=value ...]`` or only overrides: a first argument holding ``=`` that names no
    file is the first override."""
    if config is not None and "=" in config and not Path(config).exists():
        return None, [config, *rest]
    return config, rest


def cmd_run(args: argparse.Namespace) -> int:
    from fedpart.api import output_path, resume
    from fedpart.config import load_config
    from fedpart.engine.simulation import Simulation

    config, overrides = split_args(args.config, args.overrides)
    if args.resume:
        if config is not None:
            raise FedpartError("give either CONFIG or --resume DIR, not both")
        result = resume(args.resume, overrides, quiet=args.quiet)
    else:
        if config is None:
            raise FedpartError(
                "missing CONFIG: fedpart run CONFIG [key=value ...] (or --resume DIR)"
            )
        cfg = load_config(config, overrides)
        out = output_path(cfg)
        sim = Simulation(cfg, run_dir=out, quiet=args.quiet)
        if not args.quiet:
            print(f"run directory: {out}", file=sys.stderr)
            print(f"backend: {sim.backend_description()}", file=sys.stderr)
        result = sim.run()
    s = result.summary
    acc = s["accuracy"]
    # in % with two decimals, the unit of the compare, sweep and report tables
    line = (
        f"{s['algorithm']} on {s['dataset']}: accuracy final {_pct(acc['final'])}, "
        f"best {_pct(acc['best'])} (round {_num(acc['best_round'])}), "
        f"weighted {_pct(s['accuracy_weighted']['final'])}"
    )
    if "global_accuracy" in s:
        line += f", global {_pct(s['global_accuracy']['final'])}"
    print(line)
    print(f"results in {result.run_dir}")
    return 0


def _pct(value: object) -> str:
    """An accuracy (a fraction) as a percentage for the result line; ``-`` where there is none."""
    return f"{100 * value:.2f}%" if isinstance(value, int | float) else "-"


def _num(value: object) -> str:
    """A summary number for the result line; ``-`` where there is none (e.g. zero rounds)."""
    if value is None:
        return "-"
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def add_parser(sub: Any) -> None:
    """``fedpart run``'s parser."""
    p = sub.add_parser("run", help="run one experiment")
    p.add_argument("config", nargs="?", help="YAML config")
    p.add_argument("overrides", nargs="*", help="dotted key=value overrides")
    p.add_argument(
        "--resume", metavar="DIR", help="continue the run in DIR from its last checkpoint"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_run)
