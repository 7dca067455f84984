"""The first rounds of one FedCMD cell under several readings of the vote, rerun with today's
code, against the records: whether a difference between two records of a cell comes from the
reading (it would show between the reruns) or from elsewhere (the reruns agree with each other,
not with a record).

    python benchmarks/fedcmd/reading_rerun.py --dataset fmnist --seed 44 --rounds 4 \
        --records fedcmd-fmnist-s44 fedcmd-minmax-fmnist-a01-s44

Each reading runs the paper's protocol (configs/fedcmd/fedcmd.yaml, the overrides of
``reproduce.py``'s runs: sequential backend, contiguous layout, one thread) for ``--rounds``
rounds with K_p = 20, so the rounds shown are selection rounds, whose training is the same under
every reading.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]
import vote_readings  # noqa: E402
from reproduce import ROOT, load  # noqa: E402

import fedpart  # noqa: E402

KEYS = ("participants_accuracy_before", "participants_accuracy_after")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", choices=("mnist", "fmnist"), required=True)
    ap.add_argument("--alpha", type=float, default=0.1)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--readings", nargs="+", default=["argued", "minmax"])
    ap.add_argument("--records", nargs="*", default=[], help="record names to compare with")
    ap.add_argument("--data-root", default=str(ROOT.parent / "shared" / "data"))
    args = ap.parse_args()
    rows: dict[str, list[tuple[float, float]]] = {}
    for reading in args.readings:
        overrides = [
            f"dataset.name={args.dataset}",
            f"dataset.root={args.data_root}",
            "engine.backend=sequential",
            "engine.conv_layout=contiguous",
            "engine.threads=1",
            f"partition.alpha={args.alpha}",
            f"seed={args.seed}",
            f"federation.rounds={args.rounds}",
            "algorithm.selection_rounds=20",
            *vote_readings.READINGS[reading][0],
        ]
        result = fedpart.run(ROOT / "configs/fedcmd/fedcmd.yaml", overrides, write=False)
        rows[f"rerun: {reading}"] = [tuple(m.get(k) for k in KEYS) for m in result.metrics]
    for name in args.records:
        rec = load(name)
        if rec is None:
            sys.exit(f"error: no record {name}")
        rows[f"record: {name}"] = [
            tuple(r.get(k) for k in KEYS) for r in rec["rounds"][: args.rounds]
        ]
    print("| run | " + " | ".join(f"round {r} before / after" for r in range(args.rounds)) + " |")
    print("| --- |" + " --- |" * args.rounds)
    for name, values in rows.items():
        cells = [f"{100 * b:.4f} / {100 * a:.4f}" for b, a in values]
        print(f"| {name} | " + " | ".join(cells) + " |")
    first = next(iter(rows.values()))
    for name, values in rows.items():
        print(f"{name}: {'equal to' if values == first else 'differs from'} {next(iter(rows))}")


if __name__ == "__main__":
    main()
