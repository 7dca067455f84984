"""Calibrate UA-PDFL's th_I and μ for the model and data of the UA-PDFL study, by a fixed rule.

    python benchmarks/decentralized/calibrate_uapdfl.py            # run (or read) and print
    python benchmarks/decentralized/calibrate_uapdfl.py --report   # from the records only

The paper gives neither value. The defaults (th_I = 0.03, μ = 0.01, docs/methods/uapdfl.md) were
set on the full-width CNN and the whole Fashion-MNIST pool; on another model they mean something
else (issue 26: on the quarter-width CNN th_I = 0.03 makes nearly every client copy a neighbour
at β = 0.5). The rule, fixed before the study's comparison runs:

- **μ** keeps the weight of Eq. (12)'s term per feature dimension: μ = 0.01 · 1024 / D, with D the
  dimension of I^Aux = g(X_unit) on the study's model (1,024 on the full-width CNN).
- **th_I** is the 10th percentile of Div(i, j) between a client and the peers in its queue at
  the strong skew (β = 0.5), on the study's model and pool (seed 0), once the paper's early phase
  is over: the mean over rounds 30–49 of each round's 10th percentile (``div_p10`` in
  metrics.jsonl), in a UA-PDFL run with th_I = 0 — no client-wise dropout and no classifier
  shared, i.e. g gossiped and h personal, the divergence personalized models settle at. Read:
  a peer counts as similar when it is as close as the closest tenth of peers at strong skew, so
  at β = 0.5 a client shares its classifier with about one peer in ten and copies a neighbour only
  when all N_com = 5 of its queue are that close; the same run at β = 5 shows where weak skew's
  divergences sit against that threshold.

Records: ``benchmarks/decentralized/results/calib-uapdfl-beta<β>.json`` (per-round Div
percentiles, D, μ); the study reads th_I and μ from them (``reproduce.py``). ``--pool 0`` applies
the same rule on the whole pool (``calib-uapdfl-poolall-beta<β>.json``), for the mechanism check
of ``reproduce.py --only uapdfl-mechanism``: whether the rule separates β = 0.5 from β = 5 where
a client takes ~35 local steps a round (the paper's ~30), not 2.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from choose_setting import CONFIGS, RECORDS, chosen_pool  # noqa: E402
from runner import DATA_ROOT  # noqa: E402

import fedpart  # noqa: E402
from fedpart.config import load_config  # noqa: E402
from fedpart.engine.simulation import Simulation  # noqa: E402

BASE = CONFIGS / "dfedavg.yaml"  # the study's base config (the quarter-width CNN)
REFERENCE_DIM, REFERENCE_MU = 1024, 0.01
QUANTILE = "div_p10"
ROUNDS = 50
WINDOW = range(30, 50)
BETAS = (0.5, 5.0)
#: pools calibrated besides the study's, for the mechanism check (0: the whole pool)
OTHER_POOLS = (0,)


def overrides(beta: float, data_root: str, pool: int | None = None) -> list[str]:
    """The study's UA-PDFL protocol at ``beta`` (its base config: the quarter-width CNN), on the
    study's pool or on ``pool`` images (0: the whole pool)."""
    return [
        f"dataset.root={data_root}",
        "algorithm.name=uapdfl",
        f"partition.alpha={beta:g}",
        f"partition.pool_size={chosen_pool('uapdfl') if pool is None else pool}",
        "seed=0",
        "engine.threads=1",
    ]


def aux_dim(data_root: str) -> int:
    """D = dim I^Aux on the study's model."""
    cfg = load_config(BASE, [*overrides(0.5, data_root), "federation.rounds=1"])
    return int(Simulation(cfg).algorithm.aux.shape[1])


def record_path(beta: float, pool: int | None = None) -> Path:
    """The study's calibration record, or the one on another pool (``pool``; 0: the whole)."""
    where = "" if pool is None else f"pool{pool or 'all'}-"
    return RECORDS / f"calib-uapdfl-{where}beta{beta:g}.json"


def calibrate_run(beta: float, mu: float, dim: int, data_root: str, pool: int | None) -> dict:
    path = record_path(beta, pool)
    if path.is_file():
        return json.loads(path.read_text())
    over = [
        *overrides(beta, data_root, pool),
        "algorithm.threshold=0",
        f"algorithm.mu={mu!r}",
        f"federation.rounds={ROUNDS}",
    ]
    t0 = time.time()
    res = fedpart.run(BASE, over, write=False)
    keep = ("round", "accuracy", "dropout_clients", "similar_neighbors_mean", "div_p10")
    keep += ("div_p50", "div_p90")
    out = {
        "beta": beta,
        "overrides": over,
        "aux_dim": dim,
        "mu": mu,
        "rounds": [{k: r[k] for k in keep if k in r} for r in res.metrics],
        "wall_seconds": round(time.time() - t0, 1),
    }
    RECORDS.mkdir(exist_ok=True)
    path.write_text(json.dumps(out, indent=1) + "\n")
    return out


def window_mean(rec: dict, key: str) -> float:
    return statistics.mean(r[key] for r in rec["rounds"] if r["round"] in WINDOW)


def calibrated(pool: int | None = None) -> dict[str, float]:
    """th_I and μ from the β = 0.5 record of the study's pool (or of ``pool``) (KeyError-free:
    a clear message when it is missing)."""
    path = record_path(0.5, pool)
    if not path.is_file():
        where = "" if pool is None else f" --pool {pool}"
        raise SystemExit(
            f"{path} is missing: run python benchmarks/decentralized/calibrate_uapdfl.py{where} first"
        )
    rec = json.loads(path.read_text())
    return {"threshold": round(window_mean(rec, QUANTILE), 5), "mu": rec["mu"]}


def report() -> str:
    """The calibration table: the study's pool, then any other pool calibrated (``--pool``)."""
    lines = [
        f"Div between a client and its queue, rounds {WINDOW.start}–{WINDOW.stop - 1} "
        "(mean of each round's percentile), th_I = 0 (no dropout, h personal), seed 0:\n",
        "| pool | β | D = dim I^Aux | μ | Div 10th pct | Div median | Div 90th pct "
        "| accuracy (round 49) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    pools: list[int | None] = [None, *OTHER_POOLS]
    for pool in pools:
        name = "the study's" if pool is None else f"{pool:,}" if pool else "whole"
        for beta in BETAS:
            if not record_path(beta, pool).is_file():
                if pool is None:
                    lines.append(f"| {name} | {beta:g} | — | — | — | — | — | — |")
                continue
            rec = json.loads(record_path(beta, pool).read_text())
            cells = [f"{window_mean(rec, k):.4f}" for k in ("div_p10", "div_p50", "div_p90")]
            acc = 100 * rec["rounds"][-1]["accuracy"]
            lines.append(
                f"| {name} | {beta:g} | {rec['aux_dim']} | {rec['mu']:.4g} | {' | '.join(cells)} "
                f"| {acc:.2f} |"
            )
    for pool in pools:
        if record_path(0.5, pool).is_file():
            c = calibrated(pool)
            where = "the study's pool" if pool is None else f"pool {pool or 'whole'}"
            lines.append(f"\nCalibrated on {where}: th_I = {c['threshold']}, μ = {c['mu']:.4g}.")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--report", action="store_true", help="the table from the records only")
    ap.add_argument("--data-root", default=DATA_ROOT)
    ap.add_argument(
        "--pool",
        type=int,
        default=None,
        help=f"calibrate on this pool size instead of the study's (0: whole; one of {OTHER_POOLS})",
    )
    ap.add_argument("--betas", default="0.5,5", help="comma-separated β (default: 0.5,5)")
    args = ap.parse_args()
    if args.pool is not None and args.pool not in OTHER_POOLS:
        ap.error(f"--pool must be one of {OTHER_POOLS}, got {args.pool}")
    torch.set_num_threads(1)
    if not args.report:
        dim = aux_dim(args.data_root)
        mu = REFERENCE_MU * REFERENCE_DIM / dim
        for beta in (float(b) for b in args.betas.split(",")):
            calibrate_run(beta, mu, dim, args.data_root, args.pool)
    print(report())


if __name__ == "__main__":
    main()
