"""``fedpart list [WHAT]``: the registered methods, datasets, models, partitions and topologies."""

from __future__ import annotations

import argparse
from typing import Any


def cmd_list(args: argparse.Namespace) -> int:
    from fedpart.data.partition import PARTITIONS
    from fedpart.data.registry import DATASETS
    from fedpart.models import MODELS
    from fedpart.registry import methods

    ALGORITHMS = methods()  # the built-in methods and every plugin's

    what = args.what
    if what in (None, "algorithms"):
        print("algorithms:")
        for name, cls in sorted(ALGORITHMS.items()):
            opts = ", ".join(cls.option_docs()) or "-"
            print(
                f"  {name:<12} [{cls.setting}; backends: {', '.join(cls.backends)}] {cls.summary}"
                f" options: {opts}"
            )
    if what in (None, "datasets"):
        print("datasets:")
        for name, info in sorted(DATASETS.items()):
            offline = " (offline)" if info.offline else ""
            print(f"  {name:<12} {info.description}{offline}")
    if what in (None, "models"):
        print("models:")
        for name, info in sorted(MODELS.items()):
            opts = ", ".join(info.options) or "-"
            print(f"  {name:<12} {info.description} options: {opts}")
    if what in (None, "partitions"):
        print("partitions:")
        for name, doc in sorted(PARTITIONS.items()):
            print(f"  {name:<16} {doc}")
    if what in (None, "topologies"):
        from fedpart.topology import TOPOLOGIES, WEIGHTS

        print("topologies (decentralized methods; topology.name):")
        print(f"  {'auto':<12} the method's default graph (a server for centralized methods)")
        for name, info in TOPOLOGIES.items():
            print(f"  {name:<12} {info.doc}")
        print("mixing weights (topology.weights):")
        for name, doc in WEIGHTS.items():
            print(f"  {name:<12} {doc}")
    return 0


def add_parser(sub: Any) -> None:
    """``fedpart list``'s parser."""
    p = sub.add_parser("list", help="list algorithms, datasets, models, partitions, topologies")
    p.add_argument(
        "what",
        nargs="?",
        choices=["algorithms", "datasets", "models", "partitions", "topologies"],
    )
    p.set_defaults(func=cmd_list)
