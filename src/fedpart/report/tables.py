"""The comparison tables of ``fedpart report``: one row per run (accuracies, communication,
time; what the runs' setups share and where they differ), and the accuracy per capacity group."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from fedpart.formatting import is_number, markdown_table, pct
from fedpart.report.loading import RunRecord


def _stat(summary: dict[str, Any], key: str, stat: str) -> Any:
    block = summary.get(key)
    if not isinstance(block, dict):
        return None
    if stat == "last10_mean" and block.get(stat) is None:
        for k, v in block.items():  # last{k}_mean written with another window
            if k.startswith("last") and k.endswith("_mean") and v is not None:
                return v
    return block.get(stat)


def _mb(value: Any) -> str:
    return f"{float(value) / 1e6:.2f}" if is_number(value) else "-"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def run_labels(runs: Sequence[RunRecord]) -> list[str]:
    """Run names, made unique by prefixing parent directories where two runs share a name."""
    names = [r.name for r in runs]
    for depth in range(1, 4):
        dupes = {n for n in names if names.count(n) > 1}
        if not dupes:
            break
        names = [
            "/".join(r.path.parts[-(depth + 1) :]) if n in dupes else n
            for n, r in zip(names, runs, strict=True)
        ]
    return names


def has_final_stage(metrics: Sequence[dict[str, Any]]) -> bool:
    """Whether a run's ``final`` accuracy comes from a stage after the federated rounds (the
    fine-tuning of FedBABU and fedseqlayer): a ``"stage": "final"`` row after evaluated rounds."""
    evaluated = any(r.get("stage") is None and r.get("accuracy") is not None for r in metrics)
    return evaluated and any(r.get("stage") == "final" for r in metrics)


def _model_of(run: RunRecord) -> str | None:
    """The model a run trained, as ``name(option=value, ...)`` with the options it was built
    with (``summary.json``'s ``model_options``: the config's, the method's defaults included);
    None for a run that did not record them."""
    s = run.summary
    options = s.get("model_options")
    if not isinstance(options, dict) or not isinstance(s.get("model"), str):
        return None
    inner = ", ".join(f"{k}={options[k]}" for k in sorted(options))
    return f"{s['model']}({inner})"


#: what a comparison holds fixed besides the method: summary.json's record of each
SETUP_FIELDS = ("dataset", "model", "rounds", "seed", "backend")


def _setup(run: RunRecord) -> dict[str, str | None]:
    s = run.summary
    values = {
        "dataset": s.get("dataset"),
        "model": _model_of(run),
        "rounds": s.get("rounds_completed"),
        "seed": s.get("seed"),
        "backend": s.get("backend"),
    }
    return {k: None if v is None else str(v) for k, v in values.items()}


class Setup(NamedTuple):
    """What the runs of a table share and where they differ (besides the method)."""

    #: per run, `` ‡`` when it differs from most runs in anything but the method
    marks: list[str]
    #: the fields that differ between runs, one table column each
    columns: list[str]
    #: the footnote naming what differs, or None
    note: str | None
    #: one line with what every run shares, or None
    shared: str | None


def setup_marks(runs: Sequence[RunRecord]) -> Setup:
    """Compare the runs' dataset, model (with options), rounds, seed and backend: a run that
    differs from most runs in any of them is marked ``‡``, the differing fields become columns,
    and a footnote names what differs (FedBN's and FedAP's BatchNorm variant of the model is
    such a difference: their accuracy is then not that of the method alone)."""
    setups = [_setup(r) for r in runs]
    marks = [""] * len(runs)
    columns, differences, shared = [], [], []
    labels = run_labels(runs)
    for name in SETUP_FIELDS:
        values = [s[name] for s in setups]
        known = [v for v in values if v is not None]
        if not known:
            continue
        if len(set(known)) < 2:
            shared.append(f"{name} {known[0]}")
            continue
        columns.append(name)
        common = max(set(known), key=known.count)
        others = []
        for i, v in enumerate(values):
            if v is not None and v != common:
                marks[i] = " ‡"
                why = ""
                if name == "model" and _method_model_defaults(runs[i]):
                    why = ", the method's own model defaults"
                others.append(f"{labels[i]}: {v}{why}")
        differences.append(f"{name} (most runs: {common}; {'; '.join(others)})")
    note = None
    if differences:
        note = (
            "‡ differs from the other runs in more than the method — "
            + "; ".join(differences)
            + ": its accuracy is not comparable with the rest of the table as a method alone."
        )
    line = "All runs: " + ", ".join(shared) + "." if shared else None
    return Setup(marks, columns, note, line)


def _method_model_defaults(run: RunRecord) -> bool:
    from fedpart.registry import methods

    cls = methods().get(run.algorithm)
    return bool(getattr(cls, "model_defaults", None))


FINAL_STAGE_NOTE = (
    "† final is measured after the method's final fine-tuning stage (FedBABU, fedseqlayer); "
    "best and last-k are over the federated rounds before it."
)


def compare_table(runs: Sequence[RunRecord]) -> str:
    """A markdown table with one row per run.

    Columns: run, algorithm, final / best (round) / last-10 mean personalised accuracy (%),
    sample-weighted final accuracy (%), a global-model final accuracy column when any run has
    one, uploaded and downloaded megabytes (10^6 bytes), and wall-clock seconds. A final
    accuracy measured after a final fine-tuning stage is marked ``†``, with a footnote under
    the table (best and last-10 do not include that stage).
    """
    has_global = any(_stat(r.summary, "global_accuracy", "final") is not None for r in runs)
    setup = setup_marks(runs)
    header = [
        "run",
        "algorithm",
        *setup.columns,
        "final acc %",
        "best acc % (round)",
        "last-10 mean %",
        "weighted final %",
    ]
    if has_global:
        header.append("global final %")
    header += ["up MB", "down MB", "wall s"]
    rows = []
    marked = False
    for run, label, other in zip(runs, run_labels(runs), setup.marks, strict=True):
        s = run.summary
        mark = " †" if has_final_stage(run.metrics) else ""
        marked |= bool(mark)
        best = pct(_stat(s, "accuracy", "best"))
        best_round = _stat(s, "accuracy", "best_round")
        if best != "-" and best_round is not None:
            best += f" ({best_round})"
        comm = s.get("communication") if isinstance(s.get("communication"), dict) else {}
        wall = s.get("wall_seconds")
        row = [
            _cell(label) + other,
            _cell(run.algorithm),
            *(_cell(_setup(run)[c] or "-") for c in setup.columns),
            pct(_stat(s, "accuracy", "final")) + mark,
            best,
            pct(_stat(s, "accuracy", "last10_mean")),
            pct(_stat(s, "accuracy_weighted", "final")) + mark,
        ]
        if has_global:
            row.append(pct(_stat(s, "global_accuracy", "final")))
        row += [
            _mb(comm.get("up_bytes")),
            _mb(comm.get("down_bytes")),
            f"{float(wall):.1f}" if is_number(wall) else "-",
        ]
        rows.append(row)
    lines = markdown_table(header, rows)
    if marked:
        lines += ["", FINAL_STAGE_NOTE]
    if setup.note:
        lines += ["", setup.note]
    return "\n".join(lines)


#: without ``capacity_group_labels``, group numbers above this are taken for damage
_MAX_UNLABELLED_GROUPS = 100


class GroupAccuracy(NamedTuple):
    """The final accuracy of one capacity group of a run."""

    #: the group's interval of capacity ratios ``r``, e.g. ``"(0.2, 0.4]"``
    label: str
    #: mean final accuracy (a fraction) of the group's clients with a test accuracy; ``None``
    #: when none has one
    accuracy: float | None
    #: number of clients in the group (those without test data included)
    clients: int


def capacity_group_accuracy(run: RunRecord) -> list[GroupAccuracy]:
    """Mean final test accuracy per capacity group of a run (Pa3dFL's Fig. 2).

    Reads ``clients.json``: ``capacity_groups`` (each client's group, ``0`` = lowest capacity,
    see :func:`fedpart.engine.capacity.capacity_groups`: equal-width intervals of ``r`` over
    ``(0, 1]``), ``capacity_group_labels`` (the groups' names) and ``client_accuracy``. Every
    labelled group is returned, in group order, empty ones too (``accuracy=None, clients=0``).
    A client without a test accuracy (``None``, no test data) counts in ``clients`` but not in
    the mean. Without ``capacity_group_labels`` the groups are named ``"group <g>"``.

    Returns:
        One :class:`GroupAccuracy` per group; an empty list when the run has no capacity groups
        to compare: ``clients.json`` has no ``capacity_groups`` (a run from before capacity
        profiles), every client's ``capacity`` is 1 (``federation.capacity: ideal``, the
        default: every client in the top group), or it does not pair one group (a labelled one;
        without labels, one of the first 100) with one accuracy per client.
    """
    clients = run.clients or {}
    groups = clients.get("capacity_groups")
    accuracies = clients.get("client_accuracy")
    if not isinstance(groups, list) or not groups or not isinstance(accuracies, list):
        return []
    if len(groups) != len(accuracies) or not all(
        isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in groups
    ):
        return []
    capacity = clients.get("capacity")
    if isinstance(capacity, list) and all(is_number(r) and float(r) == 1.0 for r in capacity):
        return []  # the ideal profile: no capacity heterogeneity
    labels = clients.get("capacity_group_labels")
    if isinstance(labels, list) and labels and all(isinstance(x, str) for x in labels):
        names = list(labels)
    else:
        names = [f"group {g}" for g in range(min(max(groups) + 1, _MAX_UNLABELLED_GROUPS))]
    if max(groups) >= len(names):
        return []  # a group without a label, or a damaged file
    result = []
    for g, name in enumerate(names):
        members = [a for grp, a in zip(groups, accuracies, strict=True) if grp == g]
        values = [float(a) for a in members if is_number(a)]
        mean = sum(values) / len(values) if values else None
        result.append(GroupAccuracy(name, mean, len(members)))
    return result


def group_header(rows: Sequence[tuple[str, list[GroupAccuracy]]]) -> list[str]:
    """The group labels of all runs, each once, in the order they first appear."""
    return list(dict.fromkeys(g.label for _, groups in rows for g in groups))


CAPACITY_TABLE_TITLE = (
    "Final accuracy % per capacity group r (mean over the group's clients; clients in the group)"
)


def capacity_group_table(runs: Sequence[RunRecord]) -> str:
    """A markdown table of :func:`capacity_group_accuracy`: one row per run that has capacity
    groups (labelled as in :func:`compare_table`), one column per group (headed by its ``r``
    interval), cells ``"mean % (clients)"`` (``-`` for a group without an evaluated client).
    Runs without capacity groups are left out; without any such run, the empty string."""
    rows = [
        (label, capacity_group_accuracy(run))
        for run, label in zip(runs, run_labels(runs), strict=True)
    ]
    rows = [(label, groups) for label, groups in rows if groups]
    if not rows:
        return ""
    header = group_header(rows)
    cells = []
    for label, groups in rows:
        by_label = {g.label: g for g in groups}
        values = [
            f"{pct(by_label[h].accuracy)} ({by_label[h].clients})" if h in by_label else "-"
            for h in header
        ]
        cells.append([_cell(label), *values])
    return "\n".join(markdown_table(["run", *(_cell(h) for h in header)], cells))
