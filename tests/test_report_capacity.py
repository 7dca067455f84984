"""Accuracy per capacity group in ``fedpart report`` (Pa3dFL's Fig. 2)."""

import json

import pytest

from fedpart.cli import main
from fedpart.engine.capacity import capacity_groups, group_labels
from fedpart.report import (
    CAPACITY_TABLE_TITLE,
    GroupAccuracy,
    capacity_group_accuracy,
    capacity_group_table,
    compare_table,
    load_run,
    plot_capacity_groups,
    write_report,
)

LABELS = ["(0, 0.2]", "(0.2, 0.4]", "(0.4, 0.6]", "(0.6, 0.8]", "(0.8, 1]"]


def make_run(root, name, accuracies, capacity=None, *, algorithm="heterofl"):
    """A run directory as the engine writes it; ``capacity``: each client's ratio r_i (groups
    and labels as ``CapacityProfile.client_json`` records them), ``None``: no capacity keys."""
    d = root / name
    d.mkdir(parents=True)
    final = sum(a for a in accuracies if a is not None) / len(accuracies)
    row = {"round": 1, "accuracy": final, "accuracy_weighted": final, "loss": 1.0}
    (d / "metrics.jsonl").write_text(json.dumps(row) + "\n")
    summary = {
        "algorithm": algorithm,
        "dataset": "digits",
        "num_clients": len(accuracies),
        "rounds_completed": 1,
        "accuracy": {"final": final, "best": final, "best_round": 1, "last10_mean": final},
        "accuracy_weighted": {"final": final},
        "communication": {"up_bytes": 1_000_000, "down_bytes": 1_000_000},
        "wall_seconds": 1.0,
    }
    (d / "summary.json").write_text(json.dumps(summary))
    clients = {
        "client_accuracy": accuracies,
        "client_test_samples": [0 if a is None else 10 for a in accuracies],
    }
    if capacity is not None:
        clients |= {
            "capacity": capacity,
            "width": capacity,
            "capacity_groups": [int(g) for g in capacity_groups(capacity)],
            "capacity_group_labels": group_labels(),
        }
    (d / "clients.json").write_text(json.dumps(clients))
    (d / "config.yaml").write_text(f"seed: 0\nalgorithm:\n  name: {algorithm}\n")
    return d


# run a: groups 0, 0, 1, 1, 2, 4, 4 (r = 0.2 is in the first group, 0.4 in the second);
# client 3 has no test data
A_CAPACITY = [0.05, 0.2, 0.3, 0.4, 0.5, 0.9, 1.0]
A_ACCURACY = [0.5, 0.7, 0.4, None, 0.9, 0.6, 0.8]
# run b: every group, one client has 0 accuracy
B_CAPACITY = [0.1, 0.3, 0.5, 0.7, 0.75, 0.95]
B_ACCURACY = [0.25, 0.5, 0.0, 1.0, 0.5, 0.75]


def cells(table, label):
    row = next(line for line in table.splitlines() if line.startswith(f"| {label} |"))
    return [c.strip() for c in row.strip("|").split("|")][1:]


def test_group_means_by_hand(tmp_path):
    run = load_run(make_run(tmp_path, "a", A_ACCURACY, A_CAPACITY))
    groups = capacity_group_accuracy(run)
    assert [g.label for g in groups] == LABELS
    assert [g.clients for g in groups] == [2, 2, 1, 0, 2]
    expected = [(0.5 + 0.7) / 2, 0.4, 0.9, None, (0.6 + 0.8) / 2]
    for got, want in zip(groups, expected, strict=True):
        assert isinstance(got, GroupAccuracy)
        assert got.accuracy == (None if want is None else pytest.approx(want))


def test_table_numbers_and_runs_left_out(tmp_path):
    runs = [
        load_run(make_run(tmp_path, "a", A_ACCURACY, A_CAPACITY)),
        load_run(make_run(tmp_path, "plain", [0.5, 0.6], None, algorithm="fedavg")),
        load_run(make_run(tmp_path, "ideal", [0.5, 0.6], [1.0, 1.0], algorithm="fedavg")),
        load_run(make_run(tmp_path, "b", B_ACCURACY, B_CAPACITY, algorithm="fedrolex")),
    ]
    table = capacity_group_table(runs)
    lines = table.splitlines()
    assert lines[0] == "| run | " + " | ".join(LABELS) + " |"
    assert len(lines) == 4  # header, rule, a, b: no row for the plain and the ideal run
    assert "plain" not in table and "ideal" not in table
    assert cells(table, "a") == ["60.00 (2)", "40.00 (2)", "90.00 (1)", "- (0)", "70.00 (2)"]
    assert cells(table, "b") == ["25.00 (1)", "50.00 (1)", "0.00 (1)", "75.00 (2)", "75.00 (1)"]


def test_table_and_plot_without_capacity(tmp_path):
    runs = [
        load_run(make_run(tmp_path, "plain", [0.5, 0.6], None)),
        load_run(make_run(tmp_path, "ideal", [0.5, 0.6], [1.0, 1.0])),
    ]
    assert capacity_group_table(runs) == ""
    assert plot_capacity_groups(runs, tmp_path / "groups.png") is False
    assert not (tmp_path / "groups.png").exists()


def test_malformed_clients_json_has_no_groups(tmp_path):
    d = make_run(tmp_path, "a", A_ACCURACY, A_CAPACITY)
    clients = json.loads((d / "clients.json").read_text())
    for broken in (
        {"capacity_groups": clients["capacity_groups"][:-1]},  # one group too few
        {"capacity_groups": ["0"] * len(A_ACCURACY)},
        {"capacity_groups": [True] * len(A_ACCURACY)},
        {"capacity_groups": {"0": 1}},
        {"capacity_groups": [0, 0, 1, 1, 2, 4, 5]},  # group 5 has no label
        {"capacity_groups": [0, 0, 1, 1, 2, 4, 10**12], "capacity_group_labels": None},
        {"client_accuracy": None},
    ):
        (d / "clients.json").write_text(json.dumps(clients | broken))
        assert capacity_group_accuracy(load_run(d)) == []
    # labels missing: groups still reported, named by number
    (d / "clients.json").write_text(json.dumps(clients | {"capacity_group_labels": None}))
    groups = capacity_group_accuracy(load_run(d))
    assert [g.label for g in groups] == ["group 0", "group 1", "group 2", "group 3", "group 4"]
    assert groups[4].accuracy == pytest.approx(0.7)


def test_write_report_adds_table_and_png(tmp_path):
    root = tmp_path / "runs"
    make_run(root, "a", A_ACCURACY, A_CAPACITY)
    make_run(root, "plain", [0.5, 0.6], None, algorithm="fedavg")
    text, written = write_report([str(root)], None)
    png = root / "capacity_groups.png"
    assert written == [root / "accuracy.png", root / "clients.png", png]
    assert png.stat().st_size > 1000
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    runs = [load_run(root / "a"), load_run(root / "plain")]
    assert text == (
        compare_table(runs) + f"\n\n{CAPACITY_TABLE_TITLE}\n\n" + capacity_group_table(runs)
    )
    assert cells(text.split(CAPACITY_TABLE_TITLE)[1], "a")[0] == "60.00 (2)"


def test_write_report_without_capacity_adds_nothing(tmp_path):
    root = tmp_path / "runs"
    make_run(root, "plain", [0.5, 0.6], None, algorithm="fedavg")
    make_run(root, "ideal", [0.7, 0.6], [1.0, 1.0], algorithm="fedavg")
    text, written = write_report([str(root)], None)
    assert written == [root / "accuracy.png", root / "clients.png"]
    assert not (root / "capacity_groups.png").exists()
    assert CAPACITY_TABLE_TITLE not in text
    assert text == compare_table([load_run(root / "ideal"), load_run(root / "plain")])


def test_cli_prints_the_capacity_png(tmp_path, capsys):
    make_run(tmp_path, "a", A_ACCURACY, A_CAPACITY)
    make_run(tmp_path, "b", B_ACCURACY, B_CAPACITY)
    out = tmp_path / "plots"
    assert main(["report", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert str(out / "capacity_groups.png") in captured.err
    groups_table = captured.out.split(CAPACITY_TABLE_TITLE)[1]
    assert cells(groups_table, "b")[-2:] == ["75.00 (2)", "75.00 (1)"]
