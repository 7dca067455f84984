import json

import pytest

from fedpart.errors import FedpartError
from fedpart.report import (
    FINAL_STAGE_NOTE,
    compare_table,
    load_run,
    plot_accuracy,
    plot_client_accuracy,
    report,
    write_report,
)
from fedpart.report.plots import run_styles


def make_run(root, name, algorithm, accs, *, global_acc=None, clients=True, final_stage=None):
    """A fake run directory as the engine writes it."""
    d = root / name
    d.mkdir(parents=True)
    rows = []
    for r, acc in enumerate(accs, 1):
        row = {
            "round": r,
            "accuracy": acc,
            "accuracy_weighted": acc - 0.01,
            "loss": 1.0 - acc,
            "up_bytes": 1_000_000,
            "down_bytes": 2_000_000,
            "wall_seconds": float(r),
        }
        if global_acc is not None:
            row["global_accuracy"] = global_acc
        rows.append(row)
    rows.insert(
        1,
        {
            "round": 0,
            "accuracy": None,
            "accuracy_weighted": None,
            "loss": None,
            "up_bytes": 0,
            "down_bytes": 0,
            "wall_seconds": 0.5,
        },
    )
    if final_stage is not None:
        rows.append(
            {
                "round": len(accs),
                "stage": "final",
                "accuracy": final_stage,
                "accuracy_weighted": final_stage,
                "loss": 0.1,
                "up_bytes": 0,
                "down_bytes": 0,
                "wall_seconds": 9.0,
            }
        )
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    best = max(accs)
    summary = {
        "algorithm": algorithm,
        "dataset": "digits",
        "num_clients": 4,
        "rounds_completed": len(accs),
        "accuracy": {
            "final": final_stage or accs[-1],
            "best": best,
            "best_round": accs.index(best) + 1,
            "last10_mean": sum(accs) / len(accs),
        },
        "accuracy_weighted": {
            "final": accs[-1] - 0.01,
            "best": best - 0.01,
            "best_round": accs.index(best) + 1,
            "last10_mean": 0.5,
        },
        "communication": {"up_bytes": 1_000_000 * len(accs), "down_bytes": 2_500_000},
        "wall_seconds": 12.34,
    }
    if global_acc is not None:
        summary["global_accuracy"] = {
            "final": global_acc,
            "best": global_acc,
            "best_round": 1,
            "last10_mean": global_acc,
        }
    (d / "summary.json").write_text(json.dumps(summary))
    if clients:
        (d / "clients.json").write_text(
            json.dumps(
                {"client_accuracy": [0.5, 0.9, 0.7, 0.8], "client_test_samples": [10, 20, 30, 40]}
            )
        )
    (d / "config.yaml").write_text(f"seed: 0\nalgorithm:\n  name: {algorithm}\n")
    return d


def test_load_run_reads_all_files(tmp_path):
    d = make_run(tmp_path, "fedavg-digits", "fedavg", [0.4, 0.6, 0.7])
    run = load_run(d)
    assert run.name == "fedavg-digits" and run.algorithm == "fedavg"
    assert len(run.metrics) == 4 and run.config["algorithm"]["name"] == "fedavg"
    assert run.client_accuracies() == [0.5, 0.9, 0.7, 0.8]
    assert load_run(d / "summary.json").path == run.path


def test_load_run_rejects_non_run_dirs(tmp_path):
    with pytest.raises(FedpartError, match="not a fedpart run directory"):
        load_run(tmp_path)
    with pytest.raises(FedpartError, match="not a fedpart run directory"):
        load_run(tmp_path / "missing")
    d = tmp_path / "bad"
    d.mkdir()
    (d / "summary.json").write_text("{not json")
    with pytest.raises(FedpartError, match="summary.json"):
        load_run(d)


def test_compare_table_contents(tmp_path):
    a = load_run(make_run(tmp_path, "a", "fedavg", [0.4, 0.8, 0.7]))
    b = load_run(make_run(tmp_path, "b", "ditto", [0.5, 0.6, 0.9], global_acc=0.55, clients=False))
    table = compare_table([a, b])
    lines = table.splitlines()
    assert len(lines) == 4
    assert lines[0].startswith("| run | algorithm | final acc %")
    assert "global final %" in lines[0] and "up MB" in lines[0] and "wall s" in lines[0]
    row_a = [c.strip() for c in lines[2].strip("|").split("|")]
    assert row_a[:6] == ["a", "fedavg", "70.00", "80.00 (2)", "63.33", "69.00"]
    assert row_a[6] == "-"  # no global accuracy for run a
    assert row_a[7:] == ["3.00", "2.50", "12.3"]
    row_b = [c.strip() for c in lines[3].strip("|").split("|")]
    assert row_b[1] == "ditto" and row_b[6] == "55.00"


def test_compare_table_without_global_and_duplicate_names(tmp_path):
    a = load_run(make_run(tmp_path / "x", "run", "fedavg", [0.5]))
    b = load_run(make_run(tmp_path / "y", "run", "local", [0.6]))
    table = compare_table([a, b])
    assert "global" not in table
    assert "x/run" in table and "y/run" in table


def test_plots_written(tmp_path):
    runs = [
        load_run(make_run(tmp_path, "a", "fedavg", [0.4, 0.8, 0.7], global_acc=0.5)),
        load_run(make_run(tmp_path, "b", "fedrep", [0.5, 0.6], final_stage=0.75)),
    ]
    plot_accuracy(runs, tmp_path / "out" / "acc.png")
    plot_client_accuracy(runs, tmp_path / "out" / "clients.png")
    assert (tmp_path / "out" / "acc.png").stat().st_size > 1000
    assert (tmp_path / "out" / "clients.png").stat().st_size > 1000


def test_plots_without_data(tmp_path):
    d = make_run(tmp_path, "empty", "fedavg", [0.5], clients=False)
    (d / "metrics.jsonl").unlink()
    run = load_run(d)
    plot_accuracy([run], tmp_path / "acc.png")
    plot_client_accuracy([run], tmp_path / "clients.png")
    assert (tmp_path / "acc.png").stat().st_size > 0
    assert (tmp_path / "clients.png").stat().st_size > 0


def test_report_writes_plots_to_common_parent(tmp_path):
    dirs = [make_run(tmp_path / "runs", n, n, [0.3, 0.5]) for n in ("fedavg", "local")]
    table = report([str(d) for d in dirs], None)
    assert "fedavg" in table and "local" in table and table.startswith("|")
    for name in ("accuracy.png", "clients.png"):
        assert (tmp_path / "runs" / name).stat().st_size > 1000


def test_report_out_dir_and_errors(tmp_path):
    d = make_run(tmp_path, "fedavg", "fedavg", [0.3])
    report([str(d)], str(tmp_path / "plots"))
    assert (tmp_path / "plots" / "accuracy.png").is_file()
    with pytest.raises(FedpartError):
        report([], None)
    with pytest.raises(FedpartError, match="not a fedpart run directory"):
        report([str(d), str(tmp_path / "plots")], None)  # a folder with no run below it


def test_report_accepts_a_folder_of_runs_and_its_own_pngs(tmp_path):
    """A sweep-like folder: runs one and two levels down, PNGs and tables beside them."""
    root = tmp_path / "sweep"
    make_run(root / "fedavg", "seed0", "fedavg", [0.3, 0.5])
    make_run(root / "fedbabu", "seed0", "fedbabu", [0.3, 0.4], final_stage=0.8)
    (root / "table.md").write_text("x")
    table, written = write_report([str(root)], None)
    assert written == [root / "accuracy.png", root / "clients.png"]
    # again, now with the PNGs it wrote among the paths (as a shell glob gives them)
    again, _ = write_report([str(p) for p in sorted(root.iterdir())], None)
    assert again == table
    assert "fedavg/seed0" in table and "fedbabu/seed0" in table
    # FedBABU's final accuracy is after its fine-tuning stage: marked, with the footnote
    row = next(x for x in table.splitlines() if "fedbabu/seed0" in x)
    assert "80.00 †" in row and FINAL_STAGE_NOTE in table


def test_accuracy_plot_of_many_runs_has_distinct_styles(tmp_path):
    styles = run_styles(26)
    pairs = {(s["color"], s["linestyle"], s["marker"]) for s in styles}
    assert len(pairs) == 26
    runs = [
        load_run(make_run(tmp_path, f"m{i}", f"m{i}", [0.1 * (i % 9), 0.5], global_acc=0.4))
        for i in range(26)
    ]
    plot_accuracy(runs, tmp_path / "acc.png")
    assert (tmp_path / "acc.png").stat().st_size > 1000
