"""FedCMD's layer vote under the readings the paper leaves open (issue 43): which layer each
reading keeps, and how the vote went round by round.

The kept layer is decided in the K_p = 20 selection rounds, so the study first runs only them
(``federation.rounds=20 algorithm.selection_rounds=20``: the first 20 rounds of the 200-round
protocol, whose training is FedAvg's whatever the reading) for every reading, both datasets,
α ∈ {0.1, 1.0} and seeds 42-44 (experiment ``readings``). Full 200-round runs of a reading
(experiment ``readings-full``) are for the readings that keep another layer than today's.

    python benchmarks/fedcmd/reproduce.py --only readings --jobs 1
    python benchmarks/fedcmd/reproduce.py --only readings-full --jobs 1
"""

from __future__ import annotations

from collections.abc import Callable

#: reading -> (its overrides of the FedCMD options, what it is); today's defaults first
READINGS: dict[str, tuple[tuple[str, ...], str]] = {
    "minmax": ((), "today's default: min–max fit, index labels, every tie to the earliest"),
    "raw": (("algorithm.fit=raw",), "the raw mean and std"),
    "argued": (
        (
            "algorithm.fit=raw",
            "algorithm.tie_break=prefer_fc2",
            "algorithm.client_tie=first_seen",
            "algorithm.round_tie=first_seen",
            "algorithm.final_tie=first_seen",
            "algorithm.degenerate=skip_single",
        ),
        "the rule's reading: raw fit (the text), the code's tie rules and size-1 skip",
    ),
    "ties-fc2": (
        (
            "algorithm.tie_break=prefer_fc2",
            "algorithm.client_tie=prefer_fc2",
            "algorithm.round_tie=prefer_fc2",
            "algorithm.final_tie=prefer_fc2",
        ),
        "min–max fit, every tie to fc2",
    ),
    "code-ties": (
        (
            "algorithm.tie_break=prefer_fc2",
            "algorithm.client_tie=first_seen",
            "algorithm.round_tie=first_seen",
            "algorithm.final_tie=first_seen",
            "algorithm.degenerate=skip_single",
        ),
        "min–max fit, the authors' code's tie rules and size-1 skip",
    ),
    "post-train": (("algorithm.granularity=post_train",), "one vote per client after training"),
    "onehot": (("algorithm.labels=onehot",), "y one-hot"),
    "raw-onehot": (("algorithm.fit=raw", "algorithm.labels=onehot"), "raw fit, y one-hot"),
    "skip": (("algorithm.degenerate=skip",), "no vote from one-sample or one-class batches"),
}
ALPHAS = {"a1": 1.0, "a01": 0.1}
SEEDS = (42, 43, 44)
DATASETS = ("fmnist", "mnist")
SELECTION = ("federation.rounds=20", "algorithm.selection_rounds=20")
#: the readings with full 200-round runs (those whose selection phase keeps another layer)
FULL_READINGS = ("raw",)
MARK = {"fc1": "1", "fc2": "2", "classifier": "c"}


def selection_name(reading: str, dataset: str, alpha: str, seed: int) -> str:
    return f"sel-{reading}-{dataset}-{alpha}-s{seed}"


def full_name(reading: str, dataset: str, alpha: str, seed: int) -> str:
    return f"fedcmd-{reading}-{dataset}-{alpha}-s{seed}"


def cell_overrides(alpha: str, seed: int) -> tuple[str, ...]:
    return (f"partition.alpha={ALPHAS[alpha]}", f"seed={seed}")


def experiments() -> dict[str, list[tuple[str, str, str, tuple[str, ...]]]]:
    """``readings``: every reading's selection phase, reading by reading (the readings that
    matter most first); ``readings-full``: the full runs of :data:`FULL_READINGS`, the α = 1.0
    cells first."""
    sel = [
        (
            selection_name(r, d, a, s),
            "fedcmd",
            d,
            (*cell_overrides(a, s), *SELECTION, *READINGS[r][0]),
        )
        for r in READINGS
        for a in ALPHAS
        for d in DATASETS
        for s in SEEDS
    ]
    full = [
        (full_name(r, d, a, s), "fedcmd", d, (*cell_overrides(a, s), *READINGS[r][0]))
        for r in FULL_READINGS
        for a in ("a1", "a01")
        for s in SEEDS
        for d in DATASETS
    ]
    return {"readings": sel, "readings-full": full}


def _winners(rec: dict) -> list[str]:
    return [r["fedcmd_round_winner"] for r in rec["rounds"] if r.get("fedcmd_round_winner")]


def _margin(row: dict) -> int:
    """fc2's clients minus fc1's in one selection round."""
    votes = row["fedcmd_votes"]
    return votes.get("fc2", 0) - votes.get("fc1", 0)


def report(load: Callable[[str], dict | None]) -> list[str]:
    """The readings, the kept layer of each reading's selection phase in every cell, and the
    vote round by round."""
    lines = ["\n### The readings of the vote (overrides of the FedCMD options)\n"]
    lines += ["| reading | overrides | what |", "| --- | --- | --- |"]
    for r, (overrides, what) in READINGS.items():
        text = " ".join(o.removeprefix("algorithm.") for o in overrides) or "—"
        lines.append(f"| {r} | `{text}` | {what} |")
    lines.append(
        "\n### Selection phase (K_p = 20) under each reading: the layer kept, and the rounds "
        "fc1 and fc2 won (fc1–fc2)\n"
    )
    head = [f"{d} α={ALPHAS[a]}" for a in ALPHAS for d in DATASETS]
    lines.append("| reading | seed | " + " | ".join(head) + " |")
    lines.append("|" + " --- |" * (len(head) + 2))
    for r in READINGS:
        for s in SEEDS:
            cells = []
            for a in ALPHAS:
                for d in DATASETS:
                    rec = load(selection_name(r, d, a, s))
                    if rec is None:
                        cells.append("—")
                        continue
                    f = rec["summary"].get("fedcmd", {})
                    won = f.get("round_winner_counts", {})
                    tie = " tie" if f.get("final_tie") else ""
                    cells.append(f"{f.get('layer')} ({won.get('fc1', 0)}–{won.get('fc2', 0)}{tie})")
            if any(c != "—" for c in cells):
                lines.append(f"| {r} | {s} | " + " | ".join(cells) + " |")
    same, cells = [], 0
    for a in ALPHAS:
        for d in DATASETS:
            for s in SEEDS:
                sel, full = (
                    load(selection_name("minmax", d, a, s)),
                    load(recorded_name("fedcmd", d, a, s)),
                )
                if sel is None or full is None:
                    continue
                cells += 1
                votes = [r.get("fedcmd_votes") for r in sel["rounds"]]
                if votes == [r.get("fedcmd_votes") for r in full["rounds"][: len(votes)]]:
                    same.append(f"{d} α={ALPHAS[a]} s{s}")
    lines.append(
        "\n### Selection phase round by round: each round's winner (1 = fc1, 2 = fc2, "
        "c = classifier), the clients' margin fc2 − fc1 per round, rounds decided by a tie, "
        "batches whose minimum was tied, clients whose batch majority was tied, batches without "
        "a vote\n"
    )
    lines.append(
        f"Check that a selection-phase run is the first 20 rounds of a 200-round run: the "
        f"minmax runs' client votes equal, round by round, those of today's FedCMD record in "
        f"{len(same)} of the {cells} cells both exist for.\n"
    )
    lines.append(
        "| run | winners | margin fc2 − fc1, round 0 on | tied rounds | batch ties | client ties | no vote |"
    )
    lines.append("| --- | --- | --- | --- | --- | --- | --- |")
    for r in READINGS:
        for a in ALPHAS:
            for d in DATASETS:
                for s in SEEDS:
                    name = selection_name(r, d, a, s)
                    rec = load(name)
                    if rec is None:
                        continue
                    rows = [row for row in rec["rounds"] if row.get("fedcmd_votes")]
                    ties = [row.get("fedcmd_ties", {}) for row in rows]
                    marks = "".join(MARK.get(w, "?") for w in _winners(rec))
                    margins = " ".join(f"{_margin(row):+d}" for row in rows)
                    tied = sum(1 for t in ties if t.get("round"))
                    batch = sum(t.get("batch", 0) for t in ties)
                    client = sum(t.get("client", 0) for t in ties)
                    none = sum(t.get("no_vote_batches", 0) for t in ties)
                    lines.append(
                        f"| {name} | `{marks}` | {margins} | {tied} | {batch} | {client} | {none} |"
                    )
    return lines


#: paper's FedCMD cells (Tables VIII and VI): (dataset, α tag) -> paper
PAPER = {("mnist", "a1"): 98.271, ("fmnist", "a1"): 89.837}
PAPER.update({("mnist", "a01"): 99.441, ("fmnist", "a01"): 96.569})


def recorded_name(method: str, dataset: str, alpha: str, seed: int) -> str:
    """The existing records of today's FedCMD and of pFedSim at a cell (``reproduce.py``'s
    Table VIII and Table VI names)."""
    if alpha == "a1":
        return f"{method}-a1-{dataset}-s{seed}"
    return f"{method}-{dataset}" if seed == 42 else f"{method}-{dataset}-s{seed}"


def report_full(load: Callable[[str], dict | None]) -> list[str]:
    """Each full-run reading's FedCMD at the Table VIII / VI cells next to today's reading and
    pFedSim on the same seeds, the layer each run kept, and the gap to the paper."""
    from runner import mean_std  # noqa: PLC0415 - reproduce.py puts benchmarks/ on the path

    def value(name: str) -> tuple[float, str] | None:
        rec = load(name)
        if rec is None:
            return None
        layer = rec["summary"].get("fedcmd", {}).get("layer") or "—"
        return 100 * rec["summary"]["participants_accuracy_before"]["last10_mean"], layer

    lines = [
        "\n### Full runs (200 rounds) under each reading, next to today's reading and pFedSim on "
        "the same seeds: last-10-round mean of the participants' accuracy before training (%), "
        "the layer each seed kept, the gap of the mean to the paper\n",
        "| reading | dataset | α | mean ± std | seeds (layer) | paper | gap | today's FedCMD | pFedSim |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in FULL_READINGS:
        for a in ("a1", "a01"):
            for d in DATASETS:
                got = {s: value(full_name(r, d, a, s)) for s in SEEDS}
                got = {s: v for s, v in got.items() if v is not None}
                if not got:
                    continue
                ours = [v for v, _ in got.values()]
                each = ", ".join(f"{s}: {v:.3f} ({layer})" for s, (v, layer) in got.items())
                paper = PAPER[(d, a)]
                gap = sum(ours) / len(ours) - paper
                others = []
                for method in ("fedcmd", "pfedsim"):
                    theirs = [value(recorded_name(method, d, a, s)) for s in got]
                    theirs = [v for v, _ in theirs if v is not None] if None not in theirs else []
                    others.append(mean_std(theirs))
                lines.append(
                    f"| {r} | {d} | {ALPHAS[a]} | {mean_std(ours)} | {each} | {paper:.3f} | "
                    f"{gap:+.2f} | {others[0]} | {others[1]} |"
                )
    return lines
