"""Reproduce the MNIST column of Table 2 of the sequential-layer-expansion paper.

    python benchmarks/fedseqlayer/reproduce.py --rounds 100 --seeds 0 --jobs 2

Runs the eight methods of the table on the paper's MNIST protocol (configs/centralized/*.yaml;
data from ../shared/data), two at a time, one torch thread each, and prints a markdown table of
our accuracies next to the paper's, plus the Table 4 computation proxy from our own accounting.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from runner import DATA_ROOT, ROOT, Job, pct, run_jobs  # noqa: E402

from fedpart.algorithms.fedseqlayer import unfrozen_blocks
from fedpart.engine.cost import paper_cost_proxy, trainable_parameters
from fedpart.models import build_model

# name -> (config, overrides, paper MNIST accuracy at T=100/200/300)
METHODS = {
    "FedAvg": ("fedavg", [], {100: 91.48, 200: 96.32, 300: 97.48}),
    "FedPer": ("fedper", [], {100: 98.30}),
    "LG-FedAvg": ("lgfedavg", [], {100: 97.95}),
    "FedRep": ("fedrep", [], {100: 98.56}),
    "FedRoD": ("fedrod", [], {100: 98.61}),
    "FedBABU": ("fedbabu", [], {100: 98.19}),
    "Vanilla": ("fedseqlayer", ["algorithm.mode=vanilla"], {100: 98.21}),
    "Anti": ("fedseqlayer", ["algorithm.mode=anti"], {100: 98.34}),
    # not in the paper's Table 2; run on the same protocol for reference
    "FedProx": ("fedprox", [], {}),
    "Ditto": ("ditto", [], {}),
}


def job(label: str, seed: int, rounds: int, out: Path, data_root: str) -> Job:
    config, overrides, _ = METHODS[label]
    return Job(
        f"{label} seed {seed}",
        ROOT / "configs/centralized" / f"{config}.yaml",
        out / f"T{rounds}" / f"{label}-seed{seed}",
        (*overrides, f"seed={seed}", f"federation.rounds={rounds}", f"dataset.root={data_root}"),
    )


def cost_table() -> str:
    model = build_model("fedavgcnn", num_classes=10, input_shape=(1, 28, 28))
    base = list(model.body_names())
    rows = ["| method | our proxy (×10⁹) | paper Table 4 (×10⁹) |", "| --- | --- | --- |"]
    paper = {"FedAvg": 873.04, "FedBABU": 865.34, "Vanilla": 314.91, "Anti": 838.88}
    for label, mode in (
        ("FedAvg", None),
        ("FedBABU", "all"),
        ("Vanilla", "vanilla"),
        ("Anti", "anti"),
    ):
        per_round = [
            trainable_parameters(
                model,
                model.block_names
                if mode is None
                else unfrozen_blocks(t, mode, base, [0, 100, 200]),
            )
            for t in range(300)
        ]
        ours = paper_cost_proxy(per_round, batches_per_epoch=50, clients=100) / 1e9
        rows.append(f"| {label} | {ours:.3f} | {paper[label]:.2f} |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--seeds", default="0", help="comma-separated seeds")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--data-root", default=DATA_ROOT)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/fedseqlayer/runs"))
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    labels = args.methods.split(",")
    out = Path(args.out)
    t0 = time.time()
    jobs = [(label, seed) for label in labels for seed in seeds]
    results = run_jobs(
        [job(lb, sd, args.rounds, out, args.data_root) for lb, sd in jobs], args.jobs
    )
    by_label: dict[str, list[dict]] = {}
    for (label, _), summary in zip(jobs, results, strict=True):
        by_label.setdefault(label, []).append(summary)

    print(
        f"MNIST, T = {args.rounds}, seeds {seeds}; accuracies in % (weighted = Σ correct / Σ test samples)\n"
    )
    print(
        "| method | paper | ours weighted, final | ours weighted, best | ours mean over clients, final | wall s |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for label in labels:
        runs = by_label[label]
        paper = METHODS[label][2].get(args.rounds)
        wf = pct([r["accuracy_weighted"]["final"] for r in runs])
        wb = pct([r["accuracy_weighted"]["best"] for r in runs])
        mf = pct([r["accuracy"]["final"] for r in runs])
        wall = statistics.mean(r["wall_seconds"] for r in runs)
        print(
            f"| {label} | {paper if paper is not None else '-'} | {wf} | {wb} | {mf} | {wall:.0f} |"
        )
    print(f"\ntotal wall time: {time.time() - t0:.0f} s ({args.jobs} jobs in parallel)\n")
    print(cost_table())


if __name__ == "__main__":
    main()
