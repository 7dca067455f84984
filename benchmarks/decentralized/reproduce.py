"""The two decentralized seed papers' comparisons at CPU scale, three seeds, recorded run by run.

    python benchmarks/decentralized/choose_setting.py uapdfl          # 1. the pool size (criterion)
    python benchmarks/decentralized/calibrate_uapdfl.py               # 2. UA-PDFL's th_I and μ
    python benchmarks/decentralized/reproduce.py --only uapdfl,uapdfl-ablation --jobs 2
    python benchmarks/decentralized/reproduce.py --only uapdfl-sweep,uapdfl-rule --jobs 2
    python benchmarks/decentralized/reproduce.py --only uapdfl-scale --jobs 2
    python benchmarks/decentralized/reproduce.py --only uapdfl-edge --jobs 2
    python benchmarks/decentralized/calibrate_uapdfl.py --pool 0 --betas 0.5
    python benchmarks/decentralized/reproduce.py --only uapdfl-mechanism --jobs 2
    python benchmarks/decentralized/choose_setting.py dfedpgp
    python benchmarks/decentralized/reproduce.py --only dfedpgp --jobs 2
    python benchmarks/decentralized/reproduce.py --report             # every table, from records
    python benchmarks/decentralized/reproduce.py --report --docs      # ... into the results pages
    python benchmarks/decentralized/reproduce.py --rerecord   # records again from run dirs here

``uapdfl`` (docs/results/uapdfl.md): UA-PDFL's Tables 1–2 methods that fedpart provides on
Fashion-MNIST, 30 clients, Dirichlet β = 0.5 and 5, the quarter-width 2-conv/2-FC CNN
(``configs/decentralized/dfedavg.yaml`` is the base), the pool size chosen by
``choose_setting.py``, the paper's 150 rounds with its step decay (×0.95 a round), N_com = 5;
DFedAvgM with twice the local epochs and half the rounds, as in the paper; UA-PDFL with th_I and
μ from ``calibrate_uapdfl.py``'s old calibration (the first study). ``uapdfl-ablation``: the
paper's Fig. 13 (without layer-wise personalization, without client-wise dropout, without both)
at both β, same th_I. ``uapdfl-sweep`` (issue 42): UA-PDFL at every th_I of the threshold rule's
grid, both β, seeds 0–2, runs ``uapdfl-th<th_I>-<β>-uapdfl-seed<s>``. ``uapdfl-rule``: UA-PDFL
and Fig. 13's variants at the th_I the threshold rule chose (its UA-PDFL runs are the sweep's).
``uapdfl-scale``: UA-PDFL with ``SCALE_EPOCHS`` local epochs (~30 steps a round, the paper's) on
the study's pool, at the old and at the rule's th_I, both β, seed 0, with Local and FedPer at the
same local compute. ``uapdfl-edge`` (post hoc): Fig. 13's variants at th_I = 3e-3, the sweep's
one th_I with rare dropout at β = 0.5 and common at β = 5 on every study seed.
``uapdfl-mechanism``
(after ``calibrate_uapdfl.py --pool 0 --betas 0.5``): UA-PDFL on the whole pool, where a client
takes ~35 local steps a round, with th_I calibrated there by the same rule, seed 0, 60 rounds —
whether the rule gives rare dropouts at β = 0.5 and common ones at β = 5 where local training
separates copied models within a round.

``dfedpgp`` (docs/results/dfedpgp.md): DFedPGP's Table 1 methods that fedpart provides and its
Table 4 ablation (DFedAvgM, DFedAvgM-P, OSGP, DFedPGP) on Fashion-MNIST, 100 clients, Dir(0.3)
and pathological 2 classes per client, the quarter-width FedAvg CNN
(``configs/decentralized/dfedavgm.yaml`` is the base), the pool size chosen by
``choose_setting.py``, 100 rounds with the paper's decay (×0.99), the paper's local compute
(K_u = 5 epochs for every method; DFedPGP and DFedAvgM-P add their K_v = 1 head epoch) and its
step per sample (lr 0.1 at batch 128 → 0.025 at batch 32); OSGP also on the one-peer
exponential graph it was published with. Centralized baselines sample 10 of 100 clients a round.

Seeds 0, 1, 2 (seed 0 of every run first). Runs are resumable (``benchmarks/runner.py``; two at a
time, one torch thread each) and each finished run leaves a record in
``benchmarks/decentralized/results/<run>.json`` (summary and per-round metrics), committed, so
the tables are rebuilt from the records by ``--report``; a run that diverges leaves a record
saying so.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from choose_setting import CONFIGS, RECORDS, chosen_pool  # noqa: E402
from runner import (  # noqa: E402
    Job,
    mean_std,
    reproduction_parser,
    run_missing,
    selected_runs,
    verdict,
)

HERE = Path(__file__).resolve().parent
SEEDS = (0, 1, 2)
#: the engine's fastest exact configuration on this CPU (new runs)
FAST = ("engine.conv_layout=auto", "engine.cache_features=true")

# ----------------------------------------------------------------------------- UA-PDFL study
UAPDFL_ROUNDS = 150
# stem -> (label, overrides, paper CNN/CIFAR-10 β = 0.5, β = 5) (Tables 1 and 2)
UAPDFL_METHODS = {
    "local": ("Local", ("algorithm.name=local",), 65.06, 49.13),
    "dfedavg": ("FedAvg", ("algorithm.name=dfedavg",), 67.16, 69.38),
    "dfedper": ("FedPer", ("algorithm.name=dfedper",), 74.67, 61.85),
    "dispfl": ("DisPFL", ("algorithm.name=dispfl",), 73.57, 65.93),
    "dfedavgm": (
        "DFedAvgM (2 epochs, half the rounds)",
        (
            "algorithm.name=dfedavgm",
            "federation.local_epochs=2",
            f"federation.rounds={UAPDFL_ROUNDS // 2}",
        ),
        69.11,
        69.57,
    ),
    "uapdfl": ("UA-PDFL", ("algorithm.name=uapdfl",), 74.85, 71.34),
}
# Fig. 13's ablation: stem -> (label, overrides)
UAPDFL_ABLATION = {
    "uapdfl-nolp": ("without layer-wise personalization", ("algorithm.layerwise=false",)),
    "uapdfl-nocd": ("without client-wise dropout", ("algorithm.dropout=false",)),
    "uapdfl-noboth": (
        "without both",
        ("algorithm.layerwise=false", "algorithm.dropout=false"),
    ),
}
UAPDFL_PARTITIONS = {"beta0.5": ("partition.alpha=0.5",), "beta5": ("partition.alpha=5",)}

# ----------------------------------------------------------------------------- DFedPGP study
DFEDPGP_ROUNDS = 100
# stem -> (label, overrides, paper CIFAR-10 Dir-0.3, Pat-2) (Table 1; DFedAvgM-P: Table 4)
DFEDPGP_METHODS = {
    "local": ("Local", ("algorithm.name=local",), 63.20, 85.16),
    "fedavg": ("FedAvg", ("algorithm.name=fedavg",), 79.66, 85.04),
    "fedper": ("FedPer", ("algorithm.name=fedper",), 84.06, 90.94),
    "fedrep": ("FedRep", ("algorithm.name=fedrep",), 84.50, 91.09),
    "fedbabu": ("FedBABU", ("algorithm.name=fedbabu",), 83.26, 91.28),
    "ditto": ("Ditto", ("algorithm.name=ditto",), 73.51, 84.96),
    "dfedavgm": ("DFedAvgM", ("algorithm.name=dfedavgm",), 82.49, 90.23),
    "dfedavgmp": ("DFedAvgM-P", ("algorithm.name=dfedavgmp",), 84.69, 90.90),
    "osgp": ("OSGP (random 10-out)", ("algorithm.name=osgp",), 83.14, 90.72),
    "osgp-exp": (
        "OSGP (one-peer exponential)",
        ("algorithm.name=osgp", "topology.name=exponential", "topology.time_varying=true"),
        83.14,
        90.72,
    ),
    "dispfl": ("Dis-PFL", ("algorithm.name=dispfl",), 82.71, 88.19),
    "dfedpgp": ("DFedPGP", ("algorithm.name=dfedpgp",), 85.61, 91.26),
}
DFEDPGP_PARTITIONS = {
    "dir0.3": ("partition.kind=dirichlet", "partition.alpha=0.3"),
    "pat2": ("partition.kind=classes", "partition.classes_per_client=2"),
}
PARTITION_LABELS = {"beta0.5": "β = 0.5", "beta5": "β = 5", "dir0.3": "Dir-0.3", "pat2": "Pat-2"}

Run = tuple[str, Path, tuple[str, ...]]  # (run name, config, overrides)


def run_name(study: str, part: str, stem: str, seed: int) -> str:
    return f"{study}-{part}-{stem}-seed{seed}"


def _uapdfl_runs(
    stems: dict[str, tuple],
    threshold: float | None = None,
    seeds: tuple[int, ...] = SEEDS,
    extra: tuple[str, ...] = (),
) -> list[Run]:
    """The study's runs of ``stems``: at the old calibration's th_I (``threshold`` None, the
    first study, runs ``uapdfl-<part>-<stem>-seed<s>``) or at ``threshold`` (runs
    ``uapdfl-th<threshold>-<part>-<stem>-seed<s>``), with ``extra`` overrides appended."""
    from calibrate_uapdfl import old_calibration

    cal = old_calibration()
    study = "uapdfl" if threshold is None else threshold_study(threshold)
    common = (
        f"partition.pool_size={chosen_pool('uapdfl')}",
        f"federation.rounds={UAPDFL_ROUNDS}",
        f"algorithm.threshold={cal['threshold'] if threshold is None else threshold!r}",
        f"algorithm.mu={cal['mu']!r}",
    )
    runs: list[Run] = []
    for seed in seeds:
        for part, part_over in UAPDFL_PARTITIONS.items():
            for stem, (_, overrides, *_) in stems.items():
                if stem.startswith("uapdfl-"):
                    overrides = ("algorithm.name=uapdfl", *overrides)
                # UA-PDFL's options are only given to UA-PDFL runs
                opts = common if "algorithm.name=uapdfl" in overrides else common[:2]
                runs.append(
                    (
                        run_name(study, part, stem, seed),
                        CONFIGS / "dfedavg.yaml",
                        (*opts, *part_over, *overrides, *extra, f"seed={seed}"),
                    )
                )
    return runs


def threshold_study(threshold: float) -> str:
    """The runs' prefix at a given th_I (the sweep's and the redone study's)."""
    return f"uapdfl-th{threshold:g}"


def _uapdfl_sweep_runs() -> list[Run]:
    """UA-PDFL at every th_I of the threshold rule's grid, both β, seeds 0-2 (seed 0 first)."""
    from calibrate_uapdfl import GRID

    uapdfl = {"uapdfl": UAPDFL_METHODS["uapdfl"]}
    return [run for seed in SEEDS for t in GRID for run in _uapdfl_runs(uapdfl, t, seeds=(seed,))]


def _uapdfl_rule_runs() -> list[Run]:
    """The study's UA-PDFL and Fig. 13's three variants at the rule's th_I (issue 42); the
    UA-PDFL runs are the sweep's at that th_I."""
    from calibrate_uapdfl import chosen

    stems = {"uapdfl": UAPDFL_METHODS["uapdfl"], **UAPDFL_ABLATION}
    return _uapdfl_runs(stems, chosen()["threshold"])


#: a second th_I for the ablation, chosen after the sweep (post hoc): the only grid value at
#: which dropout is rare at β = 0.5 and common at β = 5 on all three study seeds
EDGE_THRESHOLD = 3e-3


def _uapdfl_edge_runs() -> list[Run]:
    """Fig. 13's variants at ``EDGE_THRESHOLD`` (UA-PDFL itself: the sweep's runs; "without
    both" does not read th_I: the rule's runs)."""
    stems = {k: v for k, v in UAPDFL_ABLATION.items() if k != "uapdfl-noboth"}
    return _uapdfl_runs(stems, EDGE_THRESHOLD)


#: local epochs of the scale check: a client of the study's pool holds 56 training images on
#: average, ceil(n_i / 50) steps of batch 50 an epoch — 1.6 on average over the 30 clients at
#: β = 0.5, 1.8 at β = 5 (seed 0); 18 epochs make 29 and 32 steps a round, the paper's ~30
#: (1,500 CIFAR-10 images a client at batch 50)
SCALE_EPOCHS = 18


#: the methods run beside UA-PDFL in the scale check
SCALE_BASELINES = {k: UAPDFL_METHODS[k] for k in ("local", "dfedper")}
#: rounds of the scale check (a round costs ~9× the study's; the step decay leaves lr at 5 % of
#: its start by round 59, as in the whole-pool mechanism check)
SCALE_ROUNDS = 60


def _uapdfl_scale_runs() -> list[Run]:
    """Is it scale? The study's UA-PDFL with ``SCALE_EPOCHS`` local epochs (~30 steps a round,
    the paper's), ``SCALE_ROUNDS`` rounds, at the rule's th_I and at the old calibration's, both
    β, seed 0."""
    from calibrate_uapdfl import chosen, old_calibration

    uapdfl = {"uapdfl": UAPDFL_METHODS["uapdfl"]}
    extra = (f"federation.local_epochs={SCALE_EPOCHS}", f"federation.rounds={SCALE_ROUNDS}")
    runs = []
    for t in (chosen()["threshold"], old_calibration()["threshold"]):
        for name, config, over in _uapdfl_runs(uapdfl, t, seeds=(0,), extra=extra):
            runs.append((name.replace("uapdfl-th", "uapdfl-scale-th", 1), config, over))
    # the baselines at the same local compute: what accuracy means there
    for name, config, over in _uapdfl_runs(SCALE_BASELINES, seeds=(0,), extra=extra):
        runs.append((name.replace("uapdfl-", "uapdfl-scale-", 1), config, over))
    return runs


def _dfedpgp_runs() -> list[Run]:
    common = (
        f"partition.pool_size={chosen_pool('dfedpgp')}",
        f"federation.rounds={DFEDPGP_ROUNDS}",
        "federation.local_epochs=5",
        "federation.lr=0.025",
        # a client whose loss goes non-finite keeps its model that round (counted per round as
        # ``skipped_nonfinite``) instead of ending the run: Local at Pat-2, seed 1, diverged on
        # one client in round 42. No run that finished under ``stop`` changes.
        "federation.on_nonfinite=skip_client",
    )
    return [
        (
            run_name("dfedpgp", part, stem, seed),
            CONFIGS / "dfedavgm.yaml",
            (*common, *part_over, *overrides, f"seed={seed}"),
        )
        for seed in SEEDS
        for part, part_over in DFEDPGP_PARTITIONS.items()
        for stem, (_, overrides, *_) in DFEDPGP_METHODS.items()
    ]


MECHANISM_ROUNDS = 60


def _uapdfl_mechanism_runs() -> list[Run]:
    """UA-PDFL on the whole pool (~35 local steps a round, the paper's ~30; the study's: 2), th_I
    and μ calibrated there by the study's rule: does the rule separate β = 0.5 from β = 5 there?"""
    from calibrate_uapdfl import old_calibration

    cal = old_calibration(0)
    return [
        (
            run_name("uapdfl-mechanism", part, "uapdfl", 0),
            CONFIGS / "dfedavg.yaml",
            (
                "partition.pool_size=0",
                f"federation.rounds={MECHANISM_ROUNDS}",
                f"algorithm.threshold={cal['threshold']!r}",
                f"algorithm.mu={cal['mu']!r}",
                *part_over,
                "algorithm.name=uapdfl",
                "seed=0",
            ),
        )
        for part, part_over in UAPDFL_PARTITIONS.items()
    ]


#: experiment -> how to list its runs (built only when the experiment runs: the studies read
#: their setting from the pilot and calibration records)
EXPERIMENTS = {
    "uapdfl": lambda: _uapdfl_runs(UAPDFL_METHODS),
    "uapdfl-ablation": lambda: _uapdfl_runs(UAPDFL_ABLATION),
    "uapdfl-mechanism": _uapdfl_mechanism_runs,
    "uapdfl-sweep": _uapdfl_sweep_runs,
    "uapdfl-rule": _uapdfl_rule_runs,
    "uapdfl-scale": _uapdfl_scale_runs,
    "uapdfl-edge": _uapdfl_edge_runs,
    "dfedpgp": _dfedpgp_runs,
}


def experiments() -> dict[str, list[Run]]:
    """experiment -> [(run name, config, overrides)] (needs the pilot and calibration records)."""
    return {name: make() for name, make in EXPERIMENTS.items()}


KEEP = (
    "round",
    "accuracy",
    "train_loss",
    "up_bytes",
    "down_bytes",
    "messages",
    "skipped_nonfinite",
    "dropout_clients",
    "similar_neighbors_mean",
    "div_p10",
    "div_p50",
    "div_p90",
    "mu_min",
    "mu_max",
    "wall_seconds",
)


def kept_rounds(metrics: Path) -> list[dict]:
    """The ``KEEP`` values of every round row of a run's ``metrics.jsonl``."""
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    return [{k: r[k] for k in KEEP if k in r} for r in rows if "stage" not in r]


def record(name: str, summary: dict, run_dir: Path) -> None:
    """Keep what the tables need from a finished run (the run directory itself is not kept)."""
    per_round = kept_rounds(run_dir / "metrics.jsonl")
    RECORDS.mkdir(exist_ok=True)
    text = json.dumps({"run": name, "summary": summary, "rounds": per_round}, indent=1)
    (RECORDS / f"{name}.json").write_text(text + "\n")


def rerecord(out: Path) -> None:
    """Rebuild the per-round part of every record whose run directory is still on this machine
    (after ``KEEP`` grew); the values a record already holds must come out the same."""
    for path in sorted(RECORDS.glob("*.json")):
        rec = json.loads(path.read_text())
        if "run" not in rec or "rounds" not in rec:  # a pilot, or a diverged run
            continue
        metrics = out / rec["run"] / "metrics.jsonl"
        if not metrics.is_file():
            continue
        per_round = kept_rounds(metrics)
        old = rec["rounds"]
        same = len(old) == len(per_round) and all(
            all(new.get(k) == v for k, v in o.items())
            for o, new in zip(old, per_round, strict=True)
        )
        if not same:
            print(f"{rec['run']}: run directory disagrees with the record; left as it is")
        elif per_round != old:
            record(rec["run"], rec["summary"], out / rec["run"])
            print(f"{rec['run']}: re-recorded")


def record_failure(name: str, reason: str) -> None:
    """A run that diverged leaves a record saying so (it is not retried)."""
    RECORDS.mkdir(exist_ok=True)
    (RECORDS / f"{name}.json").write_text(json.dumps({"run": name, "failed": reason}) + "\n")


def load(name: str) -> dict | None:
    path = RECORDS / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


# ------------------------------------------------------------------------------------ report
def _mb(rec: dict) -> float:
    s = rec["summary"]
    comm = s["communication"]
    rounds = max(1, s["rounds_completed"])
    return (comm["up_bytes"] + comm["down_bytes"]) / 2 / s["num_clients"] / rounds / 1e6


def _rows(
    study: str | dict[str, str], part: str, stems: dict[str, tuple], paper_col: int | None
) -> list[str]:
    """One accuracy table; ``study`` names the runs' prefix, or each stem's (a mapping)."""
    head = (
        "| method | final, mean ± std (seeds) | best | seed 0 | seed 1 | seed 2 | MB/client/round |"
    )
    lines = [head + (" paper |" if paper_col is not None else ""), ""]
    lines[1] = "|" + " --- |" * (lines[0].count("|") - 1)
    for stem, (label, *rest) in stems.items():
        where = study if isinstance(study, str) else study[stem]
        recs = [load(run_name(where, part, stem.split(":")[0], s)) for s in SEEDS]
        done = [r for r in recs if r is not None and "failed" not in r]
        finals = [100 * r["summary"]["accuracy"]["final"] for r in done]
        bests = [100 * r["summary"]["accuracy"]["best"] for r in done]
        seeds = []
        for r in recs:
            if r is None:
                seeds.append("—")
            elif "failed" in r:
                seeds.append("diverged")
            else:
                seeds.append(f"{100 * r['summary']['accuracy']['final']:.2f}")
        mb = f"{statistics.mean(_mb(r) for r in done):.3f}" if done else "—"
        row = f"| {label} | {mean_std(finals, 2)} | {mean_std(bests, 2)} | {' | '.join(seeds)} | {mb} |"
        if paper_col is not None:
            paper = rest[1 + paper_col]
            row += f" {paper:.2f} |" if paper is not None else " — |"
        lines.append(row)
    return lines


def _dropouts(
    part: str,
    stems: dict[str, tuple],
    study: str = "uapdfl",
    rounds: int = 150,
    seeds: tuple[int, ...] = SEEDS,
) -> list[str]:
    """UA-PDFL's client-wise dropouts and similar peers, per run."""
    marks = [m for m in (1, 2, 5, 10, 20, 30, 40, 50, 75, 100, 125, 149) if m < rounds]
    late = f"rounds 30–{rounds - 1}"
    lines = [
        "| run | dropouts (of 30) at rounds " + ", ".join(map(str, marks)) + f" | mean dropouts, "
        f"{late} | mean similar peers (of 5), {late} | Div median, {late} | final accuracy |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for stem, (label, *_) in stems.items():
        if not stem.startswith("uapdfl"):
            continue
        for seed in seeds:
            rec = load(run_name(study, part, stem, seed))
            if rec is None or "failed" in rec:
                continue
            by_round = {r["round"]: r for r in rec["rounds"]}
            at = [str(by_round.get(m, {}).get("dropout_clients", "—")) for m in marks]
            late = [r for r in rec["rounds"] if r["round"] >= 30]
            drop = [r["dropout_clients"] for r in late if "dropout_clients" in r]
            sim = [
                r["similar_neighbors_mean"]
                for r in late
                if r.get("similar_neighbors_mean") is not None
            ]
            med = [r["div_p50"] for r in late if r.get("div_p50") is not None]
            cells = [
                " ".join(at),
                f"{statistics.mean(drop):.1f}" if drop else "—",
                f"{statistics.mean(sim):.2f}" if sim else "—",
                f"{statistics.mean(med):.4f}" if med else "—",
                f"{100 * rec['summary']['accuracy']['final']:.2f}",
            ]
            lines.append(f"| {label}, seed {seed} | " + " | ".join(cells) + " |")
    return lines


def _uapdfl_recs(study: str, part: str, stem: str = "uapdfl") -> list[dict]:
    """The finished records of a UA-PDFL configuration's seeds."""
    recs = [load(run_name(study, part, stem, s)) for s in SEEDS]
    return [r for r in recs if r is not None and "failed" not in r]


def _window(rec: dict, key: str, lo: int, hi: int | None = None) -> list[float]:
    return [
        r[key]
        for r in rec["rounds"]
        if r["round"] >= lo and (hi is None or r["round"] <= hi) and r.get(key) is not None
    ]


def _mean_of(recs: list[dict], key: str, lo: int, hi: int | None = None) -> float | None:
    """The mean of ``key`` over rounds ``lo``..``hi`` of every record in ``recs``."""
    vals = [v for rec in recs for v in _window(rec, key, lo, hi)]
    return statistics.mean(vals) if vals else None


def _sweep() -> list[str]:
    """The threshold sweep: UA-PDFL at every grid th_I (and the old calibration's, the first
    study's records), both β, seeds 0-2, 150 rounds."""
    from calibrate_uapdfl import GRID, chosen, old_calibration

    old, rule = old_calibration()["threshold"], chosen()["threshold"]
    points = [(t, threshold_study(t)) for t in GRID] + [(old, "uapdfl")]
    marks = (1, 2, 5, 10, 20, 30, 50, 100, 149)
    acc = [
        "| th_I | β | final, mean ± std | best | seed 0 | seed 1 | seed 2 | MB/client/round |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    dec = [
        "| th_I | β | seeds | dropouts (of 30) at rounds "
        + ", ".join(map(str, marks))
        + " (mean over seeds) | mean dropouts, rounds 5–29, per seed | mean dropouts, rounds "
        "30–149, per seed "
        "| mean similar peers (of 5), rounds 30–149 | Div 10th / 50th / 90th pct, rounds 30–149 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for t, study in points:
        name = f"{t:g}" + (
            " (old calibration)" if t == old else " (the rule's)" if t == rule else ""
        )
        for part in UAPDFL_PARTITIONS:
            beta = PARTITION_LABELS[part].removeprefix("β = ")
            recs = [load(run_name(study, part, "uapdfl", s)) for s in SEEDS]
            done = [r for r in recs if r is not None and "failed" not in r]
            finals = [100 * r["summary"]["accuracy"]["final"] for r in done]
            bests = [100 * r["summary"]["accuracy"]["best"] for r in done]
            seeds = [
                "—"
                if r is None
                else "diverged"
                if "failed" in r
                else f"{100 * r['summary']['accuracy']['final']:.2f}"
                for r in recs
            ]
            mb = f"{statistics.mean(_mb(r) for r in done):.3f}" if done else "—"
            acc.append(
                f"| {name} | {beta} | {mean_std(finals, 2)} | {mean_std(bests, 2)} | "
                + " | ".join(seeds)
                + f" | {mb} |"
            )
            if not done:
                dec.append(f"| {name} | {beta} | 0 | — | — | — | — | — |")
                continue
            by = [{r["round"]: r for r in rec["rounds"]} for rec in done]
            at = []
            for m in marks:
                vals = [b[m]["dropout_clients"] for b in by if m in b]
                at.append(f"{statistics.mean(vals):.1f}".removesuffix(".0") if vals else "—")

            ok = [r if r is not None and "failed" not in r else None for r in recs]
            early, late = (
                " / ".join(
                    "—" if r is None else f"{_mean_of([r], 'dropout_clients', *w):.1f}" for r in ok
                )
                for w in ((5, 29), (30, None))
            )
            sim = _mean_of(done, "similar_neighbors_mean", 30)
            divs = [_mean_of(done, f"div_p{q}", 30) for q in (10, 50, 90)]
            dec.append(
                f"| {name} | {beta} | {len(done)} | {' '.join(at)} | {early} | {late} | "
                + (f"{sim:.2f}" if sim is not None else "—")
                + " | "
                + " / ".join(f"{d:.2g}" for d in divs)
                + " |"
            )
    return [
        "Personalized test accuracy after round 149, %:\n",
        *acc,
        "",
        "UA-PDFL's decisions (a client copies a neighbour: client-wise dropout; similar peers: "
        "those whose h is averaged in, among the clients that did not copy; Div: over every "
        "client and the 5 peers in its queue, mean of each round's percentile):\n",
        *dec,
    ]


def _scale() -> list[str]:
    """The scale check: ~30 local steps a round on the study's pool, old and rule's th_I, and
    the baselines; accuracy at the last round against the study's (1.6–1.8 steps a round) at
    the same round and seed."""
    from calibrate_uapdfl import chosen, old_calibration

    last = SCALE_ROUNDS - 1
    rule, old = chosen()["threshold"], old_calibration()["threshold"]
    # (label, the scale run's prefix, the study run's prefix, stem)
    rows = [
        (f"UA-PDFL, th_I = {rule:g}", threshold_study(rule), threshold_study(rule), "uapdfl"),
        (f"UA-PDFL, th_I = {old:g} (old calibration)", threshold_study(old), "uapdfl", "uapdfl"),
    ]
    rows += [(label, "uapdfl", "uapdfl", stem) for stem, (label, *_) in SCALE_BASELINES.items()]
    lines = [
        f"| method | {' | '.join(f'{PARTITION_LABELS[p]}: ~30 steps, round {last}' for p in UAPDFL_PARTITIONS)} "
        f"| {' | '.join(f'{PARTITION_LABELS[p]}: the study, round {last}' for p in UAPDFL_PARTITIONS)} |",
        "| --- | --- | --- | --- | --- |",
    ]
    for label, scale_study, study, stem in rows:
        cells = []
        for scaled in (True, False):
            for part in UAPDFL_PARTITIONS:
                name = run_name(scale_study if scaled else study, part, stem, 0)
                rec = load(name.replace("uapdfl-", "uapdfl-scale-", 1) if scaled else name)
                by = (
                    {} if rec is None or "failed" in rec else {r["round"]: r for r in rec["rounds"]}
                )
                cells.append(f"{100 * by[last]['accuracy']:.2f}" if last in by else "—")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("")
    decisions: list[str] = []
    for t in (rule, old):
        for part in UAPDFL_PARTITIONS:
            label = f"th_I = {t:g}, {PARTITION_LABELS[part]}"
            rows = _dropouts(
                part,
                {"uapdfl": (label,)},
                threshold_study(t).replace("uapdfl-th", "uapdfl-scale-th", 1),
                SCALE_ROUNDS,
                seeds=(0,),
            )
            decisions += rows if not decisions else rows[2:]
    return lines + decisions


#: UA-PDFL's accuracy claims at the rule's th_I: (claim, partition, better, worse, relation)
#: with relation ">" (better above worse) or "≈" (level: the claim holds within the seed spread)
UAPDFL_CLAIMS = (
    *(
        ("UA-PDFL above every other method (Tables 1–2)", part, "uapdfl", "*", ">")
        for part in UAPDFL_PARTITIONS
    ),
    (
        "Fig. 13a: layer-wise personalization helps (full > without LP)",
        "beta0.5",
        "uapdfl",
        "uapdfl-nolp",
        ">",
    ),
    (
        "Fig. 13a: client-wise dropout helps (full > without CD)",
        "beta0.5",
        "uapdfl",
        "uapdfl-nocd",
        ">",
    ),
    (
        "Fig. 13a: dropout alone helps (without LP > without both)",
        "beta0.5",
        "uapdfl-nolp",
        "uapdfl-noboth",
        ">",
    ),
    (
        "Fig. 13a: layer-wise personalization alone helps (without CD > without both)",
        "beta0.5",
        "uapdfl-nocd",
        "uapdfl-noboth",
        ">",
    ),
    ("Fig. 13b: full ≈ without LP", "beta5", "uapdfl", "uapdfl-nolp", "≈"),
    (
        "Fig. 13b: dropout is the main factor (without LP > without CD)",
        "beta5",
        "uapdfl-nolp",
        "uapdfl-nocd",
        ">",
    ),
)


def _uapdfl_claims(threshold: float, noboth: str | None = None) -> list[str]:
    """The accuracy claims judged at ``threshold`` by the seed-spread rule (``runner.verdict``),
    on the final round and on the best; the other methods' records are the study's, "without
    both"'s those of ``noboth`` (a study prefix) when given."""
    study = threshold_study(threshold)
    where = {stem: "uapdfl" for stem in UAPDFL_METHODS} | {
        stem: study for stem in ("uapdfl", *UAPDFL_ABLATION)
    }
    if noboth is not None:
        where["uapdfl-noboth"] = noboth
    labels = {stem: v[0] for stem, v in {**UAPDFL_METHODS, **UAPDFL_ABLATION}.items()}

    def accs(part: str, stem: str, best: bool) -> list[float] | None:
        recs = [load(run_name(where[stem], part, stem, s)) for s in SEEDS]
        if any(r is None or "failed" in r for r in recs):
            return None
        a = [r["summary"]["accuracy"] for r in recs]
        return [100 * (max(x["best"], x["final"]) if best else x["final"]) for x in a]

    lines = [
        f"A claim *holds* when the mean difference exceeds the sum of the two configurations' "
        'seed standard deviations (for "≈": when it does not), is *reversed* when it is '
        "below minus that sum, and is otherwise *within the seed spread*; judged on the final "
        "round and on the best (the higher of the best evaluated round and the final), three "
        f"seeds each, UA-PDFL and its variants at th_I = {threshold:g}.\n",
        "| claim | partition | difference, final (points) | verdict, final | difference, best "
        "| verdict, best |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for claim, part, a, b, rel in UAPDFL_CLAIMS:
        others = [s for s in UAPDFL_METHODS if s != a] if b == "*" else [b]
        if any(accs(part, s, False) is None for s in [a, *others]):
            lines.append(f"| {claim} | {PARTITION_LABELS[part]} | — | waits (seeds) | — | — |")
            continue
        cells = []
        for best in (False, True):
            fa = accs(part, a, best)
            fb = {s: accs(part, s, best) for s in others}
            top = max(fb, key=lambda s: statistics.mean(fb[s]))
            diff, word = verdict(fa, fb[top])
            if rel == "≈":
                word = "holds" if word == "within the seed spread" else f"not level ({word})"
            vs = f" (vs {labels[top]})" if b == "*" else ""
            cells += [f"{diff:+.2f}{vs}", word]
        lines.append(f"| {claim} | {PARTITION_LABELS[part]} | " + " | ".join(cells) + " |")
    return lines


def report_uapdfl() -> str:
    from calibrate_uapdfl import chosen, grid_report
    from calibrate_uapdfl import report as calibration
    from choose_setting import table as pilots

    th = chosen()["threshold"]
    study = threshold_study(th)
    out = ["### The setting: pilots at β = 0.5 (seed 0, 30 rounds)\n", pilots("uapdfl", "", False)]
    out += ["\n### UA-PDFL's th_I: the threshold rule\n", grid_report(), ""]
    out += ["### The threshold sweep (150 rounds, seeds 0–2)\n", *_sweep(), ""]
    methods = {
        **UAPDFL_METHODS,
        "uapdfl:old": ("UA-PDFL, old calibration (th_I = 0.19172)", (), None, None),
    }
    where = {stem: "uapdfl" for stem in methods} | {"uapdfl": study}  # "uapdfl:old": uapdfl
    for i, part in enumerate(UAPDFL_PARTITIONS):
        out.append(
            f"### {PARTITION_LABELS[part]}: personalized test accuracy after the last round, "
            f"%, UA-PDFL at th_I = {th:g}\n"
        )
        out += _rows(where, part, methods, i)
        out.append("")
    for part in UAPDFL_PARTITIONS:
        out.append(f"### Ablation (Fig. 13), {PARTITION_LABELS[part]}, th_I = {th:g}\n")
        out += _rows(study, part, {"uapdfl": UAPDFL_METHODS["uapdfl"], **UAPDFL_ABLATION}, None)
        out.append("")
    out.append(f"### The paper's claims at th_I = {th:g}\n")
    out += _uapdfl_claims(th)
    out.append("")
    for part in UAPDFL_PARTITIONS:
        out.append(f"### UA-PDFL's decisions, {PARTITION_LABELS[part]}, th_I = {th:g}\n")
        out += _dropouts(part, {"uapdfl": UAPDFL_METHODS["uapdfl"], **UAPDFL_ABLATION}, study)
        out.append("")
    edge = threshold_study(EDGE_THRESHOLD)
    out.append(
        f"### Post hoc: the ablation at th_I = {EDGE_THRESHOLD:g} (the sweep's only th_I with "
        "rare dropout at β = 0.5 and common at β = 5 on all three seeds)\n"
    )
    out.append(f'"Without both" does not read th_I: its rows are the th_I = {th:g} runs.\n')
    ablation = {"uapdfl": UAPDFL_METHODS["uapdfl"], **UAPDFL_ABLATION}
    for part in UAPDFL_PARTITIONS:
        where_edge = {stem: edge for stem in ablation} | {"uapdfl-noboth": study}
        rows = _rows(where_edge, part, ablation, None)
        out += [f"{PARTITION_LABELS[part]}:\n", *rows, ""]
    out += _uapdfl_claims(EDGE_THRESHOLD, noboth=study)
    out.append("")
    from_ = f"{SCALE_EPOCHS} local epochs, {SCALE_ROUNDS} rounds"
    out.append(f"### Is it scale? ~30 local steps a round on the study's pool ({from_}, seed 0)\n")
    out += _scale()
    out.append("")
    out += ["### The old calibration (the first study's th_I and μ)\n", calibration(), ""]
    for part in UAPDFL_PARTITIONS:
        out.append(f"### Ablation (Fig. 13), {PARTITION_LABELS[part]}, old calibration\n")
        out += _rows("uapdfl", part, {"uapdfl": UAPDFL_METHODS["uapdfl"], **UAPDFL_ABLATION}, None)
        out.append("")
    out.append(
        f"### Mechanism check: UA-PDFL on the whole pool ({MECHANISM_ROUNDS} rounds, seed 0, th_I "
        "by the old calibration's rule applied there)\n"
    )
    for part in UAPDFL_PARTITIONS:
        stems = {"uapdfl": (f"UA-PDFL, {PARTITION_LABELS[part]}",)}
        out += _dropouts(part, stems, "uapdfl-mechanism", MECHANISM_ROUNDS)[
            0 if part == "beta0.5" else 2 :
        ]
    out.append("")
    return "\n".join(out)


def report_dfedpgp() -> str:
    from choose_setting import table as pilots

    out = [
        "### The setting: pilots at Dir(0.3) (seed 0, 30 rounds)\n",
        pilots("dfedpgp", "", False),
    ]
    out.append("")
    for i, part in enumerate(DFEDPGP_PARTITIONS):
        out.append(
            f"### {PARTITION_LABELS[part]}: personalized test accuracy after the last round, %\n"
        )
        out += _rows("dfedpgp", part, DFEDPGP_METHODS, i)
        out.append("")
    out.append(
        "FedBABU's *best* is over its rounds before the fine-tuning that gives its final "
        "number (each round evaluates the federated model, its head fixed at its random "
        "initialisation).\n"
    )
    out.append(_skipped("dfedpgp") + "\n")
    out += _claims()
    return "\n".join(out)


def _skipped(study: str) -> str:
    """Which recorded runs of a study skipped a client's update for a non-finite loss
    (``federation.on_nonfinite=skip_client``), in which rounds."""
    hits = []
    for path in sorted(RECORDS.glob(f"{study}-*.json")):
        rec = json.loads(path.read_text())
        rounds = [(r["round"], r.get("skipped_nonfinite", 0)) for r in rec.get("rounds", [])]
        rounds = [(rnd, n) for rnd, n in rounds if n]
        if rounds:
            where = ", ".join(f"{n} in round {rnd}" for rnd, n in rounds)
            hits.append(f"{rec['run']} ({where})")
    text = "; ".join(hits) + "; every other recorded run: none" if hits else "no recorded run"
    return (
        "Client updates skipped for a non-finite training loss (the client keeps its model that "
        f"round; `federation.on_nonfinite=skip_client`): {text}."
    )


#: DFedPGP's claims (spec dfedpgp.md, Tables 1 and 4): (claim, partition, better, worse)
DFEDPGP_CLAIMS = (
    [
        ("DFedPGP above every other method (Table 1)", part, "dfedpgp", "*")
        for part in DFEDPGP_PARTITIONS
    ]
    + [
        (claim, part, a, b)
        for part in DFEDPGP_PARTITIONS
        for claim, a, b in (
            (
                "partial personalization helps, undirected (Table 4: DFedAvgM-P > DFedAvgM)",
                "dfedavgmp",
                "dfedavgm",
            ),
            (
                "partial personalization helps, directed (Table 4: DFedPGP > OSGP)",
                "dfedpgp",
                "osgp",
            ),
            (
                "directed communication helps, full model (Table 4: OSGP > DFedAvgM)",
                "osgp",
                "dfedavgm",
            ),
            (
                "directed communication helps, partial (Table 4: DFedPGP > DFedAvgM-P)",
                "dfedpgp",
                "dfedavgmp",
            ),
            ("DFedPGP above Local (Table 1)", "dfedpgp", "local"),
        )
    ]
    + [("DFedPGP 1.11 points above FedRep at Dir-0.3 (Table 1)", "dir0.3", "dfedpgp", "fedrep")]
)
#: Table 2's accuracy targets on CIFAR-10 (Dir-0.3: 80 %, Pat-2: 90 %), used as they are
DFEDPGP_TARGETS = {"dir0.3": 0.80, "pat2": 0.90}


def _finals(part: str, stem: str, best: bool = False) -> list[float] | None:
    """The three seeds' final accuracies (%) — or, with ``best``, the best evaluated round's or
    the final, whichever is higher (FedBABU's final follows its fine-tuning) — or None while a
    seed is missing."""
    recs = [load(run_name("dfedpgp", part, stem, s)) for s in SEEDS]
    if any(r is None or "failed" in r for r in recs):
        return None
    acc = [r["summary"]["accuracy"] for r in recs]
    return [100 * (max(a["best"], a["final"]) if best else a["final"]) for a in acc]


def _claims() -> list[str]:
    lines = [
        "### The paper's claims, three seeds each\n",
        "A claim *holds* when the mean difference exceeds the sum of the two methods' seed "
        "standard deviations, is *reversed* when it is below minus that sum, and is otherwise "
        "*within the seed spread*; it waits while a seed is missing. Judged on the final round "
        "(the metric of the tables above) and, since the paper does not say which it reports, "
        "on the best round (the higher of the best evaluated round and the final).\n",
        "| claim | partition | difference, final (points) | verdict, final | difference, best "
        "| verdict, best |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for claim, part, a, b in DFEDPGP_CLAIMS:
        others = [s for s in DFEDPGP_METHODS if s != a] if b == "*" else [b]
        waiting = sum(_finals(part, s) is None for s in [a, *others])
        if waiting:
            lines.append(
                f"| {claim} | {PARTITION_LABELS[part]} | — | waits (seeds of {waiting} "
                f"method{'s' if waiting > 1 else ''}) | — | — |"
            )
            continue
        cells = []
        for best in (False, True):
            fa = _finals(part, a, best)
            fb = {s: _finals(part, s, best) for s in others}
            top = max(fb, key=lambda s: statistics.mean(fb[s]))
            diff, word = verdict(fa, fb[top])
            vs = f" (vs {DFEDPGP_METHODS[top][0]})" if b == "*" else ""
            cells += [f"{diff:+.2f}{vs}", word]
        lines.append(f"| {claim} | {PARTITION_LABELS[part]} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(
        "### Rounds to Table 2's targets (Dir-0.3: 80 %, Pat-2: 90 %)\n\n"
        "The first round whose mean personalized accuracy reaches the target, seeds 0 / 1 / 2 "
        "(— not reached in 100 rounds, · not run yet). FedBABU's per-round accuracy is its "
        "un-fine-tuned model's (it fine-tunes after the last round), and the centralized "
        "methods train 10 clients a round where the decentralized ones train all 100.\n"
    )
    lines.append("| method | " + " | ".join(PARTITION_LABELS[p] for p in DFEDPGP_PARTITIONS) + " |")
    lines.append("|" + " --- |" * (1 + len(DFEDPGP_PARTITIONS)))
    for stem, (label, *_) in DFEDPGP_METHODS.items():
        cells = []
        for part, target in DFEDPGP_TARGETS.items():
            seeds = []
            for s in SEEDS:
                rec = load(run_name("dfedpgp", part, stem, s))
                if rec is None or "failed" in rec:
                    seeds.append("·")
                    continue
                hit = [r["round"] for r in rec["rounds"] if r.get("accuracy", 0) >= target]
                seeds.append(str(hit[0]) if hit else "—")
            cells.append(" / ".join(seeds))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("")
    lines += _mu_range()
    return lines


def _mu_range() -> list[str]:
    """Push-sum weights μ_i over the run (the de-biasing DFedPGP and OSGP rely on). μ follows
    the graph alone (μ ← P μ), so runs on the same graph and seed share one row."""
    lines = [
        "### Push-sum weights μ_i (min – max over clients; μ ≡ 1 would make de-biasing a "
        "no-op; μ depends only on the round's graphs, so the runs on one graph and seed share "
        "a row)\n",
        "| runs | round 0 | round 9 | round 49 | round 99 |",
        "| --- | --- | --- | --- | --- |",
    ]
    rows: dict[tuple[str, ...], list[str]] = {}
    for stem in ("osgp", "osgp-exp", "dfedpgp"):
        for part in DFEDPGP_PARTITIONS:
            for s in SEEDS:
                rec = load(run_name("dfedpgp", part, stem, s))
                if rec is None or "failed" in rec or "mu_min" not in rec["rounds"][0]:
                    continue
                by = {r["round"]: r for r in rec["rounds"]}
                cells = tuple(
                    f"{by[i]['mu_min']:.3f} – {by[i]['mu_max']:.3f}" if i in by else "—"
                    for i in (0, 9, 49, 99)
                )
                rows.setdefault(cells, []).append(rec["run"])
    for cells, runs in rows.items():
        lines.append(f"| {', '.join(runs)} | " + " | ".join(cells) + " |")
    return lines


#: results page -> its generated section
PAGES = {"uapdfl.md": report_uapdfl, "dfedpgp.md": report_dfedpgp}
BEGIN, END = "<!-- reproduce.py --docs: begin -->", "<!-- reproduce.py --docs: end -->"


def write_docs(docs: Path) -> None:
    """Replace each results page's generated section (between the markers) with the tables."""
    for page, make in PAGES.items():
        path = docs / page
        text = path.read_text()
        if BEGIN not in text or END not in text:
            raise SystemExit(f"{path}: no {BEGIN} ... {END} section to fill")
        head, rest = text.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        path.write_text(f"{head}{BEGIN}\n\n{make()}\n{END}{tail}")
        print(f"wrote {path}", file=sys.stderr)


def main() -> None:
    ap = reproduction_parser(__doc__, list(EXPERIMENTS))
    ap.add_argument("--out", default=str(HERE / "runs"))
    ap.add_argument(
        "--docs", action="store_true", help="rewrite the results pages' generated sections"
    )
    ap.add_argument("--stems", default="", help="only these methods (run stems, comma-separated)")
    ap.add_argument(
        "--rerecord",
        action="store_true",
        help="rebuild the per-round part of the records from run directories still here",
    )
    args = ap.parse_args()
    if args.rerecord:
        rerecord(Path(args.out))
        return
    if not args.report:
        chosen = args.only.split(",") if args.only else list(EXPERIMENTS)
        unknown = [e for e in chosen if e not in EXPERIMENTS]
        if unknown:
            ap.error(f"unknown experiment(s) {unknown}; valid: {', '.join(EXPERIMENTS)}")
        listed = {e: EXPERIMENTS[e]() for e in chosen}
        runs = selected_runs(ap, args, listed)
        if args.stems:
            keep = set(args.stems.split(","))
            # <study>-<partition>-<stem>-seed<s>, the partition one of the studies'
            parts = (*UAPDFL_PARTITIONS, *DFEDPGP_PARTITIONS)
            runs = {
                n: r
                for n, r in runs.items()
                if any(
                    n.rsplit("-seed", 1)[0].endswith(f"-{p}-{stem}") for p in parts for stem in keep
                )
            }
        out = Path(args.out)
        jobs = [
            Job(
                name,
                config,
                out / name,
                (f"dataset.root={args.data_root}", *FAST, *overrides),
            )
            for name, (config, overrides) in runs.items()
        ]
        run_missing(jobs, load, record, args.jobs, record_failure, settings=args.set)
    if args.docs:
        write_docs(HERE.parents[1] / "docs" / "results")
    else:
        print(report_uapdfl() + "\n" + report_dfedpgp())


if __name__ == "__main__":
    main()
