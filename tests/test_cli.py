import json
import subprocess
import sys

import pytest

from fedpart.cli import main


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "fedpart.cli", *args], capture_output=True, text=True
    )


def test_run_writes_metrics_and_summary(tmp_path, capsys):
    out = tmp_path / "OUT"
    code = main(
        ["run", "configs/quickstart.yaml", "federation.rounds=3", f"output.dir={out}", "--quiet"]
    )
    assert code == 0
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [0, 1, 2]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rounds_completed"] == 3
    assert "accuracy final" in capsys.readouterr().out


@pytest.mark.parametrize(
    "override, needle", [("algorithm.name=nope", "fedavg"), ("federation.roundz=3", "rounds")]
)
def test_bad_config_exits_2_with_one_line(override, needle):
    proc = run_cli("run", "configs/quickstart.yaml", override)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert override.split("=")[0] in lines[0] and needle in lines[0]


def test_list_shows_registries(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ("fedavg", "local", "mnist", "digits", "fedavgcnn", "dirichlet", "shards"):
        assert name in out


def test_partition_command_prints_and_plots(tmp_path, capsys):
    png = tmp_path / "p.png"
    assert main(["partition", "configs/quickstart.yaml", "--out", str(png)]) == 0
    out = capsys.readouterr().out
    assert "train" in out and png.stat().st_size > 1000


def test_compare_runs_one_job_per_core_unless_told(monkeypatch, tmp_path):
    """``--jobs`` left out: one run per usable core, divided by ``engine.threads``; given: as
    given; negative: a one-line error."""
    import fedpart.sweep
    from fedpart.cli import compare
    from fedpart.engine import parallel

    monkeypatch.setattr(parallel, "default_workers", lambda: 16)
    assert compare.default_jobs(0) == compare.default_jobs(1) == 16
    assert compare.default_jobs(4) == 4 and compare.default_jobs(32) == 1
    seen = []

    def fake_execute(runs, config, workers, **_):
        seen.append(workers)
        return {job.run_dir: {"state": "failed", "error": "not run"} for job in runs}

    monkeypatch.setattr(fedpart.sweep, "execute", fake_execute)

    def compare_(*words: str) -> int:
        return main(["compare", "configs/quickstart.yaml", *words, "--quiet"])

    compare_("engine.threads=2", f"output.dir={tmp_path}/a/{{algorithm}}")
    compare_(f"output.dir={tmp_path}/b/{{algorithm}}", "--jobs", "3")
    assert seen == [8, 3]
    assert compare_(f"output.dir={tmp_path}/c/{{algorithm}}", "--jobs", "-1") == 2
    assert seen == [8, 3]


def test_compare_and_report(tmp_path, capsys):
    code = main(
        [
            "compare",
            "configs/quickstart.yaml",
            "federation.rounds=2",
            "partition.num_clients=6",
            f"output.dir={tmp_path}/{{algorithm}}",
            "--algorithms",
            "fedavg,local,fedbn",
            "--quiet",
        ]
    )
    assert code == 0
    captured = capsys.readouterr()
    table = captured.out
    assert "fedavg" in table and "local" in table and "|" in table
    # FedBN's BatchNorm model is marked and named; the others trained the config's model
    assert "| fedbn ‡ |" in table and "| fedavg |" in table
    assert "norm=bn" in table.splitlines()[-1]
    # compare ends by saying where its runs and plots are, and makes the plots
    assert f"runs: {tmp_path}" in captured.err
    assert (tmp_path / "accuracy.png").is_file() and str(tmp_path / "accuracy.png") in captured.err
    assert (
        main(["report", str(tmp_path / "fedavg"), str(tmp_path / "local"), "--out", str(tmp_path)])
        == 0
    )
    assert (tmp_path / "accuracy.png").is_file()


def test_missing_dataset_is_one_clear_line(tmp_path):
    proc = run_cli(
        "run",
        "configs/quickstart.yaml",
        "dataset.name=mnist",
        f"dataset.root={tmp_path}",
        "dataset.download=false",
        "model.padding=0",
        f"output.dir={tmp_path}/o",
    )
    assert proc.returncode == 2
    assert "train-images-idx3-ubyte" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
