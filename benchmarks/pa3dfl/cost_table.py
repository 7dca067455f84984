"""Pa3dFL Table 2 reproduced: one client's FLOPs, peak training memory and model size by width.

For the CIFAR-100 CNN at capacity ratios r ∈ {1/256, 1/64, 1/4, 1} (widths p = √r) and batch size
128: the full model (FedAvg), its width-p slice (p-width: HeteroFL, Fjord, FedRolex, TailorFL),
FLANC and Pa3dFL (``fedpart.engine.width_cost``). Each cell prints ours / the paper's value.
FLOPs are forward multiply-adds of one batch (×10⁷), model size the body's parameters in units
of 10⁻¹ MiB, peak memory (MiB) the live tensors of one training step on this machine (the paper
measured on a GPU; see ``docs/capacity.md``). ``--table8`` adds the FLOPs of Table 8 (batch sizes
16, 64, 128, 512); ``--no-memory`` skips the training steps.

    python benchmarks/pa3dfl/cost_table.py --threads 1
"""

from __future__ import annotations

import argparse
import math

import torch

from fedpart.engine.width_cost import PAPER_TABLE2, PAPER_TABLE8, TABLE2_RATIOS, client_cost

#: Pa3dFL Table 8 FLOPs (×10⁷) per method and batch size, at r = 1/256, 1/64, 1/4, 1 (pFedGate,
#: an estimate, is printed by ``fedpart cost``)
PAPER_TABLE8_FLOPS: dict[str, dict[int, tuple[float, ...]]] = {
    method: {batch: tuple(float(flops) for flops, _ in row) for batch, row in rows.items()}
    for method, rows in PAPER_TABLE8.items()
    if method != "pfedgate"
}

_RATIO_NAMES = {1 / 256: "1/256", 1 / 64: "1/64", 1 / 4: "1/4", 1.0: "1"}


def table2(memory: bool) -> list[str]:
    metrics = [("FLOPs ×10⁷", 0), ("peak training memory, MiB", 1), ("model size ×10⁻¹ MiB", 2)]
    if not memory:
        metrics.pop(1)
    costs = {
        method: {r: client_cost(method, math.sqrt(r), 128, memory=memory) for r in paper}
        for method, paper in PAPER_TABLE2.items()
    }
    lines: list[str] = []
    for title, column in metrics:
        header = [title] + [f"r = {_RATIO_NAMES[r]}" for r in TABLE2_RATIOS]
        lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for method, paper in PAPER_TABLE2.items():
            cells = []
            for r in TABLE2_RATIOS:
                if r not in paper:
                    cells.append("–")
                    continue
                c = costs[method][r]
                ours = (c.forward_macs / 1e7, c.peak_mib or 0.0, c.size_mib * 10)[column]
                digits = 3 if ours < 1 else 2 if ours < 10 else 1
                cells.append(f"{ours:.{digits}f} / {paper[r][column]}")
            lines.append("| " + " | ".join([method, *cells]) + " |")
    return lines


def table8() -> list[str]:
    header = ["method", "B"] + [f"r={_RATIO_NAMES[r]}" for r in TABLE2_RATIOS]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for method, rows in PAPER_TABLE8_FLOPS.items():
        for batch, paper in rows.items():
            cells = []
            for r, value in zip(TABLE2_RATIOS, paper, strict=True):
                ours = client_cost(method, math.sqrt(r), batch, memory=False).forward_macs / 1e7
                cells.append(f"{ours:.2f} / {value} ({100 * (ours / value - 1):+.1f}%)")
            lines.append("| " + " | ".join([method, str(batch), *cells]) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--no-memory", action="store_true", help="skip peak-memory measurement")
    parser.add_argument("--table8", action="store_true", help="also print Table 8's FLOPs")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print("Table 2, CIFAR-100 CNN, batch 128: ours / paper")
    print("\n".join(table2(memory=not args.no_memory)))
    if args.table8:
        print("\nTable 8, forward FLOPs ×10⁷ by batch size: ours / paper (difference)\n")
        print("\n".join(table8()))


if __name__ == "__main__":
    main()
