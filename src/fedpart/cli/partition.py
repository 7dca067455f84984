"""``fedpart partition CONFIG``: a config's partition described, its client × label matrix
plotted."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def cmd_partition(args: argparse.Namespace) -> int:
    from fedpart.config import load_config
    from fedpart.data.partition import describe_partition, plot_label_matrix
    from fedpart.data.registry import load_dataset
    from fedpart.engine.data import build_federated_data

    cfg = load_config(args.config, args.overrides)
    bundle = load_dataset(
        cfg.dataset.name, cfg.dataset.root, download=cfg.dataset.download, **cfg.dataset.options
    )
    data = build_federated_data(cfg, bundle)
    for split in ("train", "test"):
        matrix = data.label_matrix(split)
        print(f"== {split} split ==")
        print(describe_partition(matrix))
    png = (
        Path(args.out)
        if args.out
        else _runs_root(cfg.output.dir) / f"partition-{cfg.dataset.name}-{cfg.partition.kind}.png"
    )
    png.parent.mkdir(parents=True, exist_ok=True)
    plot_label_matrix(
        data.label_matrix("train"),
        png,
        title=f"{cfg.dataset.name}, {cfg.partition.kind}, {cfg.partition.num_clients} clients",
    )
    print(f"label matrix plot: {png}")
    return 0


def _runs_root(output_dir: str) -> Path:
    """The fixed part of ``output.dir`` before its first placeholder (``runs`` for
    ``runs/quickstart-{time}/{algorithm}``): where a config's runs go, and its partition plot."""
    parts = []
    for part in Path(output_dir).parts:
        if "{" in part:
            break
        parts.append(part)
    return Path(*parts) if parts else Path("runs")


def add_parser(sub: Any) -> None:
    """``fedpart partition``'s parser."""
    p = sub.add_parser(
        "partition", help="show a config's partition and plot its client x label matrix"
    )
    p.add_argument("config")
    p.add_argument("overrides", nargs="*")
    p.add_argument(
        "--out",
        help="PNG path (default: partition-<dataset>-<kind>.png in the fixed part of output.dir, "
        "e.g. runs/)",
    )
    p.set_defaults(func=cmd_partition)
