"""``fedpart cost [CONFIG]``: one client's FLOPs, model size and peak training memory by method
and width."""

from __future__ import annotations

import argparse
from typing import Any

from fedpart.cli.run import split_args
from fedpart.errors import FedpartError


def cmd_cost(args: argparse.Namespace) -> int:
    from fedpart.cost_report import cost_lines, request_from

    config, overrides = split_args(args.config, args.overrides)
    cfg = None
    if config is not None:
        from fedpart.config import load_config

        cfg = load_config(config, overrides)
    elif overrides:
        raise FedpartError("cost: key=value overrides need a CONFIG")
    if args.threads < 1:
        raise FedpartError(f"cost: --threads must be >= 1, got {args.threads}")
    import torch

    torch.set_num_threads(args.threads)
    req = request_from(
        config=cfg,
        method=args.method,
        width=args.width,
        ratio=args.ratio,
        batch=args.batch,
        variant=args.variant,
        memory=not args.no_memory,
    )
    print("\n".join(cost_lines(req)))
    return 0


def add_parser(sub: Any) -> None:
    """``fedpart cost``'s parser."""
    p = sub.add_parser(
        "cost",
        help="one client's forward FLOPs, model size and peak training memory by method and "
        "width (Pa3dFL Tables 2 and 8)",
    )
    p.add_argument("config", nargs="?", help="YAML config (method, batch size, widths)")
    p.add_argument("overrides", nargs="*", help="dotted key=value overrides")
    p.add_argument(
        "--method",
        help="fedavg, p-width, heterofl, fedrolex, fjord, tailorfl, "
        "flanc, pa3dfl, pfedgate or all (default: the config's, else all)",
    )
    p.add_argument("--width", type=float, help="width p, a multiple of 1/16")
    p.add_argument("--ratio", type=float, help="capacity ratio r (width max(1/16, ⌊16√r⌋/16))")
    p.add_argument("--batch", type=int, help="batch size (default: the config's, else 128)")
    p.add_argument("--variant", help="cifar100 or fmnist (default: the config's, else cifar100)")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory training step")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.set_defaults(func=cmd_cost)
