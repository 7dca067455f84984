"""Choose the CPU-scale setting of a decentralized study by one criterion fixed in advance.

    python benchmarks/decentralized/choose_setting.py uapdfl      # the UA-PDFL study's pool size
    python benchmarks/decentralized/choose_setting.py dfedpgp     # the DFedPGP study's
    python benchmarks/decentralized/choose_setting.py uapdfl --report

The criterion (written down before any comparison run of the new studies): at the study's strong
skew (UA-PDFL: Dirichlet β = 0.5; DFedPGP: Dir(0.3)), **Local must end at least 5 points below
both FedAvg-then-fine-tune and the best personalized baseline** (FedPer). The knob is the number
of samples the clients share (``partition.pool_size``; the number of clients, the model and
everything else stay the study's): among the candidate pool sizes, the largest that meets the
criterion is chosen — the most data per client that still leaves room for collaboration to pay.
When every candidate is piloted and none meets it, the candidate with the largest margin is taken
and the results page says so (the fallback, added when the UA-PDFL study's candidates all fell
short).

Each candidate is a pilot of the study's own protocol (its base config, seed 0, ``ROUNDS``
rounds): Local, FedAvg and FedPer (peer to peer in the UA-PDFL study, as its paper runs them;
with a server and 10 of 100 clients per round in the DFedPGP study). "FedAvg-then-fine-tune" is
FedAvg's final model trained one more local epoch by every client on its own training split
(the engine's ``finetune_all``, at the step size of the round after the last) and tested on the
client's test split. Metric: the mean over clients of each client's test accuracy.

Each pilot leaves a record in ``benchmarks/decentralized/results/pilot-<study>-<pool>-<method>.json``
(finished pilots are not rerun), and the script prints the table and the chosen pool size.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from runner import DATA_ROOT, ROOT  # noqa: E402

import fedpart  # noqa: E402

HERE = Path(__file__).resolve().parent
RECORDS = HERE / "results"
CONFIGS = ROOT / "configs" / "decentralized"
MARGIN = 5.0  # points
ROUNDS = 30

#: study -> base config, the strong skew, candidate pool sizes (0: the whole pool, largest
#: first), the FedAvg and FedPer of the study, and what the study sets beyond its base config
STUDIES = {
    "uapdfl": {
        "base": "dfedavg.yaml",
        "skew": ("partition.alpha=0.5",),
        # halving from 18,000 (the last two added when the first four left Local within
        # 2.1 points of the others)
        "pools": (0, 18000, 9000, 4500, 2250, 1125),
        "fedavg": "dfedavg",
        "personalized": "dfedper",
        "extra": (),
    },
    "dfedpgp": {
        "base": "dfedavgm.yaml",
        "skew": ("partition.kind=dirichlet", "partition.alpha=0.3"),
        # a decentralized run of this study trains all 100 clients K_u + 1 = 6 epochs a round
        # for 100 rounds, so its cost grows with the pool: the candidates start at 10,000
        # images (75 training images a client, 3 steps an epoch at batch 32 — the paper's
        # CIFAR-10 clients take about 4 at batch 128)
        "pools": (10000, 5000),
        "fedavg": "fedavg",
        "personalized": "fedper",
        # the study's local compute and step (the paper's K_u = 5, its lr per sample)
        "extra": ("federation.local_epochs=5", "federation.lr=0.025"),
    },
}


def record_path(study: str, pool: int, method: str) -> Path:
    return RECORDS / f"pilot-{study}-{pool or 'all'}-{method}.json"


def finetuned_accuracy(sim: object) -> float:
    """Mean client test accuracy after every client fine-tunes the final model one epoch."""
    states = sim.finetune_all(1)  # type: ignore[attr-defined]
    clients = sorted(states)
    index = [sim.data.clients[c].test for c in clients]  # type: ignore[attr-defined]
    outcomes = sim.evaluate_states(clients, [states[c] for c in clients], index)  # type: ignore[attr-defined]
    accs = [float(ok.float().mean()) for ok, _ in outcomes if ok.numel()]
    return statistics.mean(accs)


def pilot(study: str, pool: int, method: str, data_root: str) -> dict:
    """Run one pilot (or read its record)."""
    path = record_path(study, pool, method)
    if path.is_file():
        return json.loads(path.read_text())
    spec = STUDIES[study]
    overrides = [
        f"dataset.root={data_root}",
        *spec["skew"],
        *spec["extra"],
        f"partition.pool_size={pool}",
        f"algorithm.name={method}",
        f"federation.rounds={ROUNDS}",
        "seed=0",
        "engine.threads=1",
    ]
    t0 = time.time()
    res = fedpart.run(CONFIGS / spec["base"], overrides, write=False)
    out = {
        "study": study,
        "pool_size": pool,
        "method": method,
        "overrides": overrides,
        "accuracy": res.summary["accuracy"]["final"],
        "samples_per_client": statistics.mean(
            int(c.train.numel() + c.val.numel() + c.test.numel())
            for c in res.simulation.data.clients
        ),
    }
    if method == spec["fedavg"]:
        out["finetuned_accuracy"] = finetuned_accuracy(res.simulation)
    out["wall_seconds"] = round(time.time() - t0, 1)
    RECORDS.mkdir(exist_ok=True)
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"  {path.name}: {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    return out


def margins(study: str) -> dict[int, float | None]:
    """Pool size -> Local's margin (points below the lower of FedAvg-then-fine-tune and FedPer),
    None where a pilot is not recorded."""
    spec = STUDIES[study]
    out: dict[int, float | None] = {}
    for pool in spec["pools"]:
        paths = [
            record_path(study, pool, m) for m in ("local", spec["fedavg"], spec["personalized"])
        ]
        if not all(p.is_file() for p in paths):
            out[pool] = None
            continue
        local, fedavg, per = (json.loads(p.read_text()) for p in paths)
        out[pool] = 100 * (min(fedavg["finetuned_accuracy"], per["accuracy"]) - local["accuracy"])
    return out


def chosen_pool(study: str) -> int:
    """The pool size the criterion chose: the largest candidate whose margin is ≥ MARGIN; when
    every candidate is piloted and none is, the one with the largest margin (the fallback)."""
    found = margins(study)
    for pool, margin in found.items():
        if margin is None:
            break
        if margin >= MARGIN:
            return pool
    else:
        return max(found, key=lambda pool: found[pool])  # type: ignore[arg-type, return-value]
    raise SystemExit(
        f"no pool size of the {study} study is chosen yet: run "
        f"python benchmarks/decentralized/choose_setting.py {study}"
    )


def table(study: str, data_root: str, run: bool) -> str:
    spec = STUDIES[study]
    methods = ("local", spec["fedavg"], spec["personalized"])
    lines = [
        f"| pool size | samples per client | Local | FedAvg | FedAvg-then-fine-tune | FedPer | "
        f"Local's margin | meets (≥ {MARGIN:g}) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    met = False
    for pool in spec["pools"]:
        if met:  # a larger candidate meets the criterion: the smaller ones are not needed
            lines.append(f"| {pool or 'all'} | — | — | — | — | — | — | not needed |")
            continue
        recs = {}
        for m in methods:
            if run:
                recs[m] = pilot(study, pool, m, data_root)
            elif record_path(study, pool, m).is_file():
                recs[m] = json.loads(record_path(study, pool, m).read_text())
        if len(recs) < len(methods):
            lines.append(f"| {pool or 'all'} | — | — | — | — | — | — | not run |")
            continue
        local = 100 * recs["local"]["accuracy"]
        fedavg = 100 * recs[spec["fedavg"]]["accuracy"]
        ft = 100 * recs[spec["fedavg"]]["finetuned_accuracy"]
        per = 100 * recs[spec["personalized"]]["accuracy"]
        margin = min(ft, per) - local
        meets = margin >= MARGIN
        met = met or meets
        n = recs["local"]["samples_per_client"]
        lines.append(
            f"| {pool or 'all'} | {n:.0f} | {local:.2f} | {fedavg:.2f} | {ft:.2f} | {per:.2f} | "
            f"{margin:+.2f} | {'yes' if meets else 'no'} |"
        )
    try:
        pool = chosen_pool(study)
        pick = f"{pool or 'the whole pool'}"
        if (margins(study)[pool] or 0.0) < MARGIN:
            pick += " (no candidate meets the criterion: the largest margin, the fallback)"
    except SystemExit:
        pick = "not decided yet (pilots missing)"
    lines.append(f"\nChosen pool size: {pick}.")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("study", choices=sorted(STUDIES))
    ap.add_argument("--report", action="store_true", help="the table from the records only")
    ap.add_argument("--data-root", default=DATA_ROOT)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(table(args.study, args.data_root, not args.report))


if __name__ == "__main__":
    main()
