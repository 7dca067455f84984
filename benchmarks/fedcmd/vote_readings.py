"""FedCMD's layer vote under the readings the paper leaves open (issue 43): which layer each
reading keeps, and how the vote went round by round.

The kept layer is decided in the K_p = 20 selection rounds, so the study first runs only them
(``federation.rounds=20 algorithm.selection_rounds=20``: the first 20 rounds of the 200-round
protocol, whose training is FedAvg's whatever the reading) for every reading, both datasets,
α ∈ {0.1, 1.0} and seeds 42-44 (experiment ``readings``). Full 200-round runs of a reading
(experiment ``readings-full``) are for the readings that keep another layer than the default's record.

    python benchmarks/fedcmd/reproduce.py --only readings --jobs 1
    python benchmarks/fedcmd/reproduce.py --only readings-full --jobs 1
"""

from __future__ import annotations

from collections.abc import Callable

#: the reading of every FedCMD record made before the rule's reading became the default (the
#: options' defaults until then): min–max fit, every tie to the earliest candidate, every batch
#: votes
MINMAX = (
    "algorithm.fit=minmax",
    "algorithm.tie_break=first",
    "algorithm.client_tie=first",
    "algorithm.round_tie=first",
    "algorithm.final_tie=first",
    "algorithm.degenerate=score",
)
#: the code variant's records made before the switch: its tie rules and batches were the
#: defaults of then (the code variant now takes the authors' code's, as the default does)
CODE_BEFORE = (
    "algorithm.variant=code",
    "algorithm.client_tie=first",
    "algorithm.round_tie=first",
    "algorithm.final_tie=first",
    "algorithm.degenerate=score",
)


def on_minmax(*changes: str) -> tuple[str, ...]:
    """The records' old reading with ``changes`` (``key=value`` overrides) replacing its own."""
    keys = {c.split("=", 1)[0] for c in changes}
    return tuple(o for o in MINMAX if o.split("=", 1)[0] not in keys) + changes


#: reading -> (its overrides of the FedCMD options, what it is); the default first
READINGS: dict[str, tuple[tuple[str, ...], str]] = {
    "argued": (
        (),
        "the default, the rule's reading: raw fit (the text), the code's tie rules and size-1 skip",
    ),
    "minmax": (MINMAX, "the records' reading before the switch: min–max fit, ties to the earliest"),
    "raw": (on_minmax("algorithm.fit=raw"), "min–max's reading with the raw mean and std"),
    "ties-fc2": (
        on_minmax(
            "algorithm.tie_break=prefer_fc2",
            "algorithm.client_tie=prefer_fc2",
            "algorithm.round_tie=prefer_fc2",
            "algorithm.final_tie=prefer_fc2",
        ),
        "min–max fit, every tie to fc2",
    ),
    "code-ties": (
        on_minmax(
            "algorithm.tie_break=prefer_fc2",
            "algorithm.client_tie=first_seen",
            "algorithm.round_tie=first_seen",
            "algorithm.final_tie=first_seen",
            "algorithm.degenerate=skip_single",
        ),
        "min–max fit, the authors' code's tie rules and size-1 skip",
    ),
    "post-train": (
        on_minmax("algorithm.granularity=post_train"),
        "min–max's reading, one vote per client after training",
    ),
    "onehot": (on_minmax("algorithm.labels=onehot"), "min–max's reading, y one-hot"),
    "raw-onehot": (
        on_minmax("algorithm.fit=raw", "algorithm.labels=onehot"),
        "min–max's reading, raw fit, y one-hot",
    ),
    "skip": (
        on_minmax("algorithm.degenerate=skip"),
        "min–max's reading, no vote from one-sample or one-class batches",
    ),
}
#: the default reading (what ``fedcmd`` runs without overrides) and the records' old one
DEFAULT, BEFORE = "argued", "minmax"
ALPHAS = {"a1": 1.0, "a01": 0.1}
#: Table IX's K_p beyond 20 (the paper: 60 and 100); Table VIII's seeds
TABLE9_KP = (60, 100)
TABLE8_SEEDS = (42, 43)
SEEDS = (42, 43, 44)
DATASETS = ("fmnist", "mnist")
SELECTION = ("federation.rounds=20", "algorithm.selection_rounds=20")
#: the readings with full 200-round runs where their selection phase keeps another layer: the
#: rule's reading (docs/results/fedcmd.md, "Which reading is the default")
MARK = {"fc1": "1", "fc2": "2", "classifier": "c"}


def selection_name(reading: str, dataset: str, alpha: str, seed: int) -> str:
    return f"sel-{reading}-{dataset}-{alpha}-s{seed}"


def full_name(reading: str, dataset: str, alpha: str, seed: int) -> str:
    return f"fedcmd-{reading}-{dataset}-{alpha}-s{seed}"


def cell_overrides(alpha: str, seed: int) -> tuple[str, ...]:
    return (f"partition.alpha={ALPHAS[alpha]}", f"seed={seed}")


def kept_by(rec: dict | None) -> str | None:
    return None if rec is None else rec["summary"].get("fedcmd", {}).get("layer")


def kept(load: Callable[[str], dict | None], reading: str, d: str, a: str, s: int) -> str | None:
    """The layer a reading's selection phase kept at a cell (None: not recorded)."""
    return kept_by(load(selection_name(reading, d, a, s)))


def experiments(
    load: Callable[[str], dict | None],
) -> dict[str, list[tuple[str, str, str, tuple[str, ...]]]]:
    """``readings``: every reading's selection phase, reading by reading (the readings that
    matter most first); ``readings-full``: a full run for every cell and layer that some
    reading's selection phase keeps and no 200-round record holds yet (phase 1 does not depend
    on the reading, so a cell's 200-round number depends on the reading only through the layer
    kept: one run per cell and layer serves every reading that keeps it), named by the first
    reading that keeps it, the α = 1.0 cells first, Fashion-MNIST (the cell furthest from the
    paper) before MNIST."""
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
    full, planned = [], set()
    for a in ALPHAS:
        for d in DATASETS:
            for s in SEEDS:
                if load(recorded_name("fedcmd", d, a, s)) is None:
                    continue
                for r in READINGS:
                    layer = kept(load, r, d, a, s)
                    if layer is None or (d, a, s, layer) in planned:
                        continue
                    if layer_run(load, d, a, s, layer) is None:
                        planned.add((d, a, s, layer))
                        overrides = (*cell_overrides(a, s), *READINGS[r][0])
                        full.append((full_name(r, d, a, s), "fedcmd", d, overrides))
    # the records of the reading before the switch (min–max), named by it, under its overrides
    before = []
    for d in DATASETS:
        for a, seeds in (("a01", SEEDS), ("a1", TABLE8_SEEDS)):
            before += [
                (full_name(BEFORE, d, a, s), "fedcmd", d, (*cell_overrides(a, s), *MINMAX))
                for s in seeds
            ]
        ablation = ("algorithm.weighted_aggregation=false", *MINMAX)
        before.append((f"fedcmd-{BEFORE}-noweighted-{d}", "fedcmd", d, ablation))
    before += [
        (
            f"fedcmd-{BEFORE}-kp{kp}-fmnist",
            "fedcmd",
            "fmnist",
            (f"algorithm.selection_rounds={kp}", *MINMAX),
        )
        for kp in TABLE9_KP
    ]
    # the code variant's selection phase under its tie rules of today (its records ran with
    # the tie rules of then: CODE_BEFORE), and its full run where that keeps another layer
    cells = [
        (a, d, s)
        for a, seeds in (("a01", (42,)), ("a1", TABLE8_SEEDS))
        for d in DATASETS
        for s in seeds
    ]
    code, code_full = [], []
    for a, d, s in cells:
        today = (*cell_overrides(a, s), "algorithm.variant=code")
        code.append((code_selection_name(d, a, s), "fedcmd", d, (*today, *SELECTION)))
        layer = kept_by(load(code_selection_name(d, a, s)))
        if layer is not None and layer != kept_by(load(code_record(d, a, s))):
            code_full.append((code_name(d, a, s), "fedcmd", d, today))
    return {
        "readings": sel,
        "readings-full": full,
        "minmax": before,
        "code-selection": code,
        "code-full": code_full,
    }


def code_selection_name(d: str, a: str, s: int) -> str:
    return f"sel-code-{d}-{a}-s{s}"


def code_record(d: str, a: str, s: int) -> str:
    """The code variant's record at a cell (the earlier default's tie rules)."""
    return f"fedcmd-code-{d}" if a == "a01" else f"fedcmd-code-a1-{d}-s{s}"


def code_name(d: str, a: str, s: int) -> str:
    """Today's code variant (the authors' tie rules) in full at a cell."""
    return f"fedcmd-code-seen-{d}-{a}-s{s}"


def report_table9(load: Callable[[str], dict | None], paper: dict[int, float]) -> list[str]:
    """Table IX (Fashion-MNIST α = 0.1, seed 42) under the default reading and the records' old
    one: the 200-round number and the layer kept for each K_p."""

    def cell(rec: dict | None) -> str:
        if rec is None:
            return "— (not run)"
        value = 100 * rec["summary"]["participants_accuracy_before"]["last10_mean"]
        return f"{value:.3f} ({rec['summary'].get('fedcmd', {}).get('layer', '?')})"

    lines = [
        "\n### Table IX (Fashion-MNIST, FedCMD vs K_p) under the default reading (the rule's, "
        '"argued") and the old one ("minmax"): last-10-round mean of the participants\' accuracy '
        "before training (%) and the layer kept\n",
        "| K_p | default (the rule's reading) | old default (min–max) | paper |",
        "| --- | --- | --- | --- |",
    ]
    for kp, value in paper.items():
        if kp == 20:
            default, before = load("fedcmd-fmnist"), load(full_name(BEFORE, "fmnist", "a01", 42))
        else:
            default = load(f"fedcmd-kp{kp}-fmnist")
            before = load(f"fedcmd-{BEFORE}-kp{kp}-fmnist")
        lines.append(f"| {kp} | {cell(default)} | {cell(before)} | {value:.3f} |")
    return lines


def report_code(load: Callable[[str], dict | None]) -> list[str]:
    """The code variant's selection phase under its tie rules of today (``sel-code-*``) against
    its records, which ran with the tie rules of the earlier default (:data:`CODE_BEFORE`)."""
    lines = [
        "\n### The code variant's selection phase under the code's tie rules: the layer kept and "
        "the rounds each layer won (fc1–fc2–classifier), against the code variant's records "
        "(the earlier default's tie rules)\n",
        "| cell | seed | today's `variant=code` | the record | record | 200 rounds: today's / the record (%) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]

    def kept_and_wins(rec: dict | None) -> str:
        if rec is None:
            return "— (not run)"
        f = rec["summary"].get("fedcmd", {})
        won = f.get("round_winner_counts", {})
        return (
            f"{f.get('layer')} ({won.get('fc1', 0)}–{won.get('fc2', 0)}–{won.get('classifier', 0)})"
        )

    for a, seeds in (("a01", (42,)), ("a1", TABLE8_SEEDS)):
        for d in DATASETS:
            for s in seeds:
                record = code_record(d, a, s)
                today = load(code_selection_name(d, a, s))
                full = [load(code_name(d, a, s)), load(record)]
                values = [
                    "—"
                    if x is None
                    else f"{100 * x['summary']['participants_accuracy_before']['last10_mean']:.3f}"
                    for x in full
                ]
                if full[0] is None:  # the same layer: the record's run
                    values[0] = "(the record's)" if kept_by(today) == kept_by(full[1]) else "—"
                lines.append(
                    f"| {d} α={ALPHAS[a]} | {s} | {kept_and_wins(today)} | "
                    f"{kept_and_wins(full[1])} | `{record}` | {' / '.join(values)} |"
                )
    return lines


def same_training(load: Callable[[str], dict | None]) -> tuple[int, int, int]:
    """The default's records against the old reading's where both keep the same layer (phase 1
    does not depend on the reading, nor phase 2 given the layer): (cells compared, cells whose
    every round's accuracies before and after training and bytes are equal, rounds compared)."""
    keys = ("participants_accuracy_before", "participants_accuracy_after", "up_bytes", "down_bytes")
    names = [
        (recorded_name("fedcmd", d, a, s), full_name(BEFORE, d, a, s))
        for a in ALPHAS
        for d in DATASETS
        for s in SEEDS
    ]
    names += [(f"fedcmd-noweighted-{d}", f"fedcmd-{BEFORE}-noweighted-{d}") for d in DATASETS]
    names += [(f"fedcmd-kp{kp}-fmnist", f"fedcmd-{BEFORE}-kp{kp}-fmnist") for kp in TABLE9_KP]
    cells = equal = rounds = 0
    for new, old in names:
        a, b = load(new), load(old)
        if a is None or b is None or kept_by(a) != kept_by(b):
            continue
        cells += 1
        rows = [[{k: r.get(k) for k in keys} for r in rec["rounds"]] for rec in (a, b)]
        equal += rows[0] == rows[1]
        rounds += len(rows[0])
    return cells, equal, rounds


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
    cells = same_votes = same_winners = same_layer = 0
    for a in ALPHAS:
        for d in DATASETS:
            for s in SEEDS:
                sel = load(selection_name(DEFAULT, d, a, s))
                full = load(recorded_name("fedcmd", d, a, s))
                if sel is None or full is None:
                    continue
                cells += 1
                votes = [r.get("fedcmd_votes") for r in sel["rounds"]]
                same_votes += votes == [r.get("fedcmd_votes") for r in full["rounds"][:20]]
                same_winners += _winners(sel) == _winners(full)[:20]
                same_layer += kept_by(sel) == kept_by(full)
    lines.append(
        "\n### Selection phase round by round: each round's winner (1 = fc1, 2 = fc2, "
        "c = classifier), the clients' margin fc2 − fc1 per round, rounds decided by a tie, "
        "batches whose minimum was tied, clients whose batch majority was tied, batches without "
        "a vote\n"
    )
    lines.append(
        f"Check that a selection-phase run is the first 20 rounds of a 200-round run, against "
        f"the default's FedCMD records in the {cells} cells that have one: the same client votes "
        f"in every round in {same_votes}, the same round winners in {same_winners}, the same kept "
        f"layer in {same_layer}.\n"
    )
    compared, equal, rounds = same_training(load)
    lines.append(
        f"Check that a run depends on the reading only through the layer kept: of the "
        f"{compared} 200-round runs of the default reading whose old-reading record (min–max) "
        f"kept the same layer, {equal} have every round's accuracies before and after training "
        f"and bytes equal to that record's ({rounds} rounds compared).\n"
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
    """The records of the default's FedCMD and of pFedSim at a cell (``reproduce.py``'s
    Table VIII and Table VI names)."""
    if alpha == "a1":
        return f"{method}-a1-{dataset}-s{seed}"
    return f"{method}-{dataset}" if seed == 42 else f"{method}-{dataset}-s{seed}"


def layer_run(
    load: Callable[[str], dict | None],
    d: str,
    a: str,
    s: int,
    layer: str,
    reading: str | None = None,
) -> dict | None:
    """The 200-round record of a cell with ``layer`` kept: the default's FedCMD record where it
    kept ``layer``, else a full run of a reading that kept it (phase 1 is the same under every
    reading, so the run depends on the reading only through the layer); ``reading``'s own full
    run first where it has one."""
    own = None if reading is None else load(full_name(reading, d, a, s))
    if kept_by(own) == layer:
        return own
    today = load(recorded_name("fedcmd", d, a, s))
    if kept_by(today) == layer:
        return today
    for r in READINGS:
        rec = load(full_name(r, d, a, s))
        if kept_by(rec) == layer:
            return rec
    return None


def report_full(load: Callable[[str], dict | None]) -> list[str]:
    """Every reading's FedCMD at the Table VIII / VI cells that have the default's record: the
    200-round number of the layer the reading keeps on each seed, next to pFedSim on the same
    seeds, and the gap of the mean to the paper."""
    from runner import mean_std, verdict  # noqa: PLC0415 - reproduce.py puts benchmarks/ on the path

    def metric(rec: dict) -> float:
        return 100 * rec["summary"]["participants_accuracy_before"]["last10_mean"]

    lines = [
        "\n### Every reading's FedCMD at the Table VIII (α = 1.0) and Table VI (α = 0.1) cells: "
        "the 200-round number of the layer it keeps on each seed (the default's record, or a "
        "full run of a reading keeping the other layer), mean ± std, the gap to the paper, and pFedSim on "
        "the same seeds (%), and FedCMD − pFedSim with its verdict over the seeds (beyond the "
        "two seed standard deviations together: holds or reversed; else within the seed spread)\n",
        "| reading | dataset | α | mean ± std | seeds (layer) | paper | gap | pFedSim | FedCMD − pFedSim |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in READINGS:
        for a in ALPHAS:
            for d in DATASETS:
                got, missing = {}, []
                for s in SEEDS:
                    layer = kept(load, r, d, a, s)
                    if layer is None or load(recorded_name("fedcmd", d, a, s)) is None:
                        continue
                    rec = layer_run(load, d, a, s, layer, r)
                    if rec is None:
                        missing.append(f"{s} ({layer}: not run)")
                    else:
                        got[s] = (metric(rec), layer)
                if not got and not missing:
                    continue
                ours = [v for v, _ in got.values()]
                each = [f"{s}: {v:.3f} ({layer})" for s, (v, layer) in got.items()] + missing
                paper = PAPER[(d, a)]
                sims = [load(recorded_name("pfedsim", d, a, s)) for s in got]
                mean, gap, sim, against = "— (incomplete)", "—", "—", "—"
                if not missing:
                    mean, gap = mean_std(ours), f"{sum(ours) / len(ours) - paper:+.2f}"
                if not missing and None not in sims:
                    theirs = [metric(x) for x in sims]
                    sim = mean_std(theirs)
                    diff = sum(ours) / len(ours) - sum(theirs) / len(theirs)
                    against = f"{diff:+.2f}"
                    if len(ours) > 1:
                        against += f" ({verdict(ours, theirs)[1]})"
                lines.append(
                    f"| {r} | {d} | {ALPHAS[a]} | {mean} | {', '.join(each)} | "
                    f"{paper:.3f} | {gap} | {sim} | {against} |"
                )
    return lines
