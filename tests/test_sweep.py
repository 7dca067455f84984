"""Sweeps: the grid, the aggregated table against the per-run summaries, skipping and resuming."""

import csv
import io
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from fedpart import sweep as sw
from fedpart.cli import main
from fedpart.errors import FedpartError

TINY = """\
seed: 0
dataset: {name: digits}
partition: {kind: dirichlet, num_clients: 6, alpha: 0.5, min_size: 20, split: [0.75, 0.0, 0.25]}
model: {name: mlp, hidden: 16}
algorithm: {name: fedavg}
federation: {rounds: 3, join_ratio: 0.5, local_epochs: 1, batch_size: 32, lr: 0.05}
engine: {backend: sequential, threads: 1}
output:
  checkpoint_every: 1
"""


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    return path


def test_grid_parsing():
    assert sw.split_values("a,[1,2],'x,y'") == ["a", "[1,2]", "'x,y'"]
    axes = sw.parse_grid(["algorithm.name=fedavg,fedper", "federation.lr=0.1", "x=1,2"])
    assert axes[1] == ("federation.lr", ["0.1"])
    cells = sw.cells_of(axes)
    assert [c.name for c in cells] == ["fedavg_1", "fedavg_2", "fedper_1", "fedper_2"]
    assert cells[1].overrides == ["algorithm.name=fedavg", "x=2"]
    assert sw.parse_seeds("0,1,3-4") == [0, 1, 3, 4]
    for bad in (["noequals"], ["a=1,"], ["a=1", "a=2"], ["seed=1,2"]):
        with pytest.raises(FedpartError):
            sw.parse_grid(bad)
    with pytest.raises(FedpartError):
        sw.parse_seeds("1,x")


def test_sweep_table_is_the_mean_and_std_of_the_run_summaries(tiny, tmp_path, capsys):
    out = tmp_path / "S"
    sweep, table = sw.run_sweep(
        str(tiny), ["algorithm.name=fedavg,fedbabu"], [0, 1], out=out, jobs=1, quiet=True
    )
    manifest = json.loads((out / "sweep.json").read_text())
    assert manifest["grid"] == {"algorithm.name": ["fedavg", "fedbabu"]}
    assert [c["name"] for c in manifest["cells"]] == ["fedavg", "fedbabu"]
    assert all(r["state"] == "finished" for c in manifest["cells"] for r in c["runs"])
    rows = {r["cell"]: r for r in csv.DictReader(io.StringIO((out / "table.csv").read_text()))}
    for cell in ("fedavg", "fedbabu"):
        summaries = [
            json.loads((out / cell / f"seed{s}" / "summary.json").read_text()) for s in (0, 1)
        ]
        assert [s["seed"] for s in summaries] == [0, 1]
        assert rows[cell]["seeds"] == "2"
        for col, block, stat in (
            ("acc_final", "accuracy", "final"),
            ("acc_best", "accuracy", "best"),
            ("acc_last_10", "accuracy", "last10_mean"),
            ("weighted_final", "accuracy_weighted", "final"),
        ):
            values = [s[block][stat] for s in summaries]
            assert float(rows[cell][f"{col}_mean"]) == pytest.approx(statistics.mean(values))
            assert float(rows[cell][f"{col}_std"]) == pytest.approx(statistics.stdev(values))
        mean, std = (
            statistics.mean(s["accuracy"]["final"] for s in summaries),
            statistics.stdev(s["accuracy"]["final"] for s in summaries),
        )
        line = next(x for x in table.splitlines() if x.startswith(f"| {cell} | 2 |"))
        assert f"{100 * mean:.2f} ± {100 * std:.2f}" in line
    # FedBABU's final accuracy is after its fine-tuning stage: marked, with the footnote
    assert rows["fedbabu"]["final_stage"] == "1" and rows["fedavg"]["final_stage"] == "0"
    assert "†" in table and sw.FINAL_STAGE_NOTE in table
    assert (out / "table.md").read_text().strip() == table

    # everything finished: nothing runs again
    def refuse(*args):
        raise AssertionError(f"ran {args}")

    _, again = sw.run_sweep(
        str(tiny), ["algorithm.name=fedavg,fedbabu"], [0, 1], out=out, quiet=True, runner=refuse
    )
    assert again == table
    # an interrupted run (started, no summary) is resumed, not started again
    (out / "fedavg" / "seed1" / "summary.json").unlink()
    calls = []

    def spy(config, overrides, run_dir):
        calls.append(run_dir)
        return sw.run_job(config, overrides, run_dir)

    _, third = sw.run_sweep(
        str(tiny), ["algorithm.name=fedavg,fedbabu"], [0, 1], out=out, quiet=True, runner=spy
    )
    assert calls == [str(out / "fedavg" / "seed1")]
    assert third == table
    # another config into the same folder is refused
    with pytest.raises(FedpartError, match="another config"):
        sw.plan(str(tiny), ["federation.lr=0.2"], [0], out)


def test_ray_dispatch_sends_each_unfinished_run_as_a_task(tiny, tmp_path, monkeypatch):
    """The Ray path with a stand-in ``ray`` module: one one-CPU task per unfinished run."""
    import types

    submitted = []

    class Ref:
        def __init__(self, value):
            self.value = value

    def remote(**opts):
        assert opts == {"num_cpus": 1}

        def wrap(fn):
            def call(*args):
                submitted.append(args)
                return Ref({"state": "failed", "error": "stand-in"})

            return types.SimpleNamespace(remote=call)

        return wrap

    fake = types.SimpleNamespace(
        is_initialized=lambda: False,
        init=lambda **kw: submitted.append(("init", kw["address"])),
        remote=remote,
        wait=lambda refs, num_returns: (refs[:num_returns], refs[num_returns:]),
        get=lambda ref: ref.value,
    )
    monkeypatch.setitem(sys.modules, "ray", fake)
    plan = sw.plan(str(tiny), ["algorithm.name=fedavg,fedper"], [0], tmp_path / "R")
    (plan.jobs[0].run_dir).mkdir(parents=True)
    (plan.jobs[0].run_dir / "summary.json").write_text("{}")  # finished: not sent
    outcomes = sw.execute(plan.jobs, plan.config, ray_address="ray://head:10001")
    assert submitted[0] == ("init", "ray://head:10001")
    assert [a[-1] for a in submitted[1:]] == [str(plan.jobs[1].run_dir)]
    assert outcomes[plan.jobs[1].run_dir]["state"] == "failed"
    assert outcomes[plan.jobs[0].run_dir]["state"] == "finished"


def test_sweep_killed_halfway_resumes(tiny, tmp_path, capsys):
    """The CLI killed (SIGKILL) in the second run's second round, then run again (here)."""
    out = tmp_path / "K"
    cmd = [sys.executable, "-m", "fedpart.cli", "sweep", str(tiny), "algorithm.name=fedavg"]
    cmd += ["--seeds", "0,1", "--jobs", "1", "--out", str(out), "--quiet"]
    env = {**os.environ, "FEDPART_CRASH_AT": "round.start@5"}  # 3 rounds of seed 0, then 2
    killed = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert killed.returncode != 0
    jobs = sw.plan(str(tiny), ["algorithm.name=fedavg"], [0, 1], out).jobs
    assert [j.state() for j in jobs] == ["finished", "interrupted"]
    assert main(cmd[3:]) == 0
    runs = json.loads((out / "sweep.json").read_text())["cells"][0]["runs"]
    assert [r["state"] for r in runs] == ["finished", "finished"]
    rows = [
        json.loads(x) for x in (out / "all" / "seed1" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [r["round"] for r in rows] == [0, 1, 2]
    assert "| all | 2 |" in capsys.readouterr().out


def test_sweep_cli_errors_are_one_line(tiny, capsys):
    assert main(["sweep", str(tiny), "algorithm.name=nope,fedavg", "--seeds", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nope" in err
    assert main(["sweep", str(tiny), "--seeds", "a"]) == 2
    assert main(["sweep", str(tiny), "--jobs", "0"]) == 2


def test_default_folder_is_stable(tiny, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    a = sw.plan(str(tiny), ["algorithm.name=fedavg,fedper"], [0, 1])
    b = sw.plan(str(tiny), ["algorithm.name=fedavg,fedper"], [0, 1, 2])
    assert a.path == b.path == Path(tmp_path / "runs" / a.path.name).resolve()
    assert a.path.name.startswith("sweep-tiny-")


def test_progress_line_counts_rounds_and_gives_an_eta(tmp_path):
    jobs = [sw.Job("a", s, tmp_path / f"r{s}", [], 4) for s in (0, 1)]
    jobs[0].run_dir.mkdir()
    progress = sw.Progress(jobs, enabled=False)
    assert progress.line().startswith("[sweep] 0/2 runs, 0/8 rounds (0%)")
    assert progress.line().endswith("ETA ?")
    (jobs[0].run_dir / "metrics.jsonl").write_text('{"round": 0}\n{"round": 1}\n')
    progress.t0 -= 10  # 2 rounds in 10 s: 6 left take 30 s
    assert "2/8 rounds (25%)" in progress.line() and "ETA 30s" in progress.line()


def test_partition_plot_goes_to_the_fixed_part_of_output_dir():
    from fedpart.cli.partition import _runs_root

    assert _runs_root("runs/quickstart-{time}/{algorithm}") == Path("runs")
    assert _runs_root("/data/exp/{algorithm}-{seed}") == Path("/data/exp")
    assert _runs_root("{algorithm}") == Path("runs")
