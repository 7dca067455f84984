"""Reproduce the MNIST column of Table 2 of the sequential-layer-expansion paper, recorded run by run.

    python benchmarks/fedseqlayer/reproduce.py --only table2 --jobs 2   # the page's runs
    python benchmarks/fedseqlayer/reproduce.py --report                 # tables from the records

Runs the table's eight methods (and FedProx and Ditto for reference) on the paper's MNIST protocol
(configs/centralized/*.yaml; data from ../shared/data), two at a time, one torch thread each.
Each finished run leaves a record (its ``summary.json`` and every round's metrics) in
``benchmarks/fedseqlayer/results/<run>.json``; the tables are printed from the records, so runs
can be spread over sessions (finished runs are skipped, interrupted ones resume). Experiments:
``table2`` (T = 100, seed 0), ``table2-seeds`` (seeds 1 and 2), ``fedavg-longer`` (FedAvg at
T = 200 and 300, the paper's other two columns for it). The Table 4 computation proxy comes from
the model's parameter counts and the methods' schedules.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from runner import (  # noqa: E402
    ROOT,
    Job,
    load_record,
    metric_rows,
    pct,
    reproduce,
    save_record,
)

from fedpart.algorithms.fedseqlayer import unfrozen_blocks
from fedpart.engine.cost import paper_cost_proxy, trainable_parameters
from fedpart.models import build_model

HERE = Path(__file__).resolve().parent
RECORDS = HERE / "results"

# stem -> (label, config, overrides, paper MNIST accuracy at T=100/200/300)
METHODS = {
    "fedavg": ("FedAvg", "fedavg", (), {100: 91.48, 200: 96.32, 300: 97.48}),
    "fedper": ("FedPer", "fedper", (), {100: 98.30}),
    "lgfedavg": ("LG-FedAvg", "lgfedavg", (), {100: 97.95}),
    "fedrep": ("FedRep", "fedrep", (), {100: 98.56}),
    "fedrod": ("FedRoD", "fedrod", (), {100: 98.61}),
    "fedbabu": ("FedBABU", "fedbabu", (), {100: 98.19}),
    "vanilla": ("Vanilla", "fedseqlayer", ("algorithm.mode=vanilla",), {100: 98.21}),
    "anti": ("Anti", "fedseqlayer", ("algorithm.mode=anti",), {100: 98.34}),
    # not in the paper's Table 2; run on the same protocol for reference
    "fedprox": ("FedProx (μ = 0.01)", "fedprox", (), {}),
    "ditto": ("Ditto (λ = 0.1)", "ditto", (), {}),
}


def run_name(stem: str, rounds: int, seed: int) -> str:
    return f"T{rounds}-{stem}-seed{seed}"


def _runs(stems: list[str], rounds: int, seeds: tuple[int, ...]) -> list[tuple[str, str, tuple]]:
    return [
        (
            run_name(stem, rounds, seed),
            METHODS[stem][1],
            (*METHODS[stem][2], f"seed={seed}", f"federation.rounds={rounds}"),
        )
        for seed in seeds
        for stem in stems
    ]


def experiments() -> dict[str, list[tuple[str, str, tuple]]]:
    """Experiment -> its runs: (run name, config under configs/centralized/, overrides)."""
    return {
        "table2": _runs(list(METHODS), 100, (0,)),
        "table2-seeds": _runs(list(METHODS), 100, (1, 2)),
        "fedavg-longer": _runs(["fedavg"], 200, (0,)) + _runs(["fedavg"], 300, (0,)),
    }


def record(name: str, summary: dict, run_dir: Path) -> None:
    """Keep the run's summary and every round's metrics (the run directory itself is not kept)."""
    save_record(RECORDS, name, summary, metric_rows(run_dir))


def load(name: str) -> dict | None:
    return load_record(RECORDS, name)


def accuracy_table(rounds: int) -> str:
    """Table 2's column at ``rounds`` from the records (all seeds recorded; methods without a
    record are listed as such)."""
    lines = [
        f"MNIST, T = {rounds}; accuracies in % (weighted = Σ correct / Σ test samples)\n",
        "| method | paper | ours weighted, final | ours weighted, best round "
        "| ours mean over clients, final | seeds | wall s |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for stem, (label, _, _, paper) in METHODS.items():
        recs = [r for seed in range(3) if (r := load(run_name(stem, rounds, seed)))]
        ours = [r["summary"] for r in recs]
        ref = f"{paper[rounds]:.2f}" if rounds in paper else "—" if paper else "not in Table 2"
        if not ours:
            if rounds == 100 or paper.get(rounds):
                lines.append(f"| {label} | {ref} | not recorded | | | 0 | |")
            continue
        wf = pct([s["accuracy_weighted"]["final"] for s in ours])
        wb = pct([s["accuracy_weighted"]["best"] for s in ours])
        mf = pct([s["accuracy"]["final"] for s in ours])
        wall = statistics.mean(s["wall_seconds"] for s in ours)
        lines.append(f"| {label} | {ref} | {wf} | {wb} | {mf} | {len(ours)} | {wall:.0f} |")
    return "\n".join(lines)


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


def report() -> str:
    return "\n\n".join(
        [accuracy_table(100), accuracy_table(200), accuracy_table(300), cost_table()]
    )


def job(name: str, entry: tuple, args: argparse.Namespace) -> Job:
    config, overrides = entry
    return Job(
        name,
        ROOT / "configs/centralized" / f"{config}.yaml",
        Path(args.out) / name,
        (*overrides, f"dataset.root={args.data_root}"),
    )


def main() -> None:
    reproduce(__doc__, experiments(), job, load, record, report, HERE / "runs")


if __name__ == "__main__":
    main()
