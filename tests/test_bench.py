"""``fedpart bench``: the harness runs and reports, and its naive baseline is a fair one."""

from __future__ import annotations

import re

import pytest
import torch

from fedpart.bench import harness
from fedpart.bench.naive import NaiveFederation, round_samples
from fedpart.config import Config
from fedpart.data.sources import load_dataset
from fedpart.engine.data import build_federated_data
from fedpart.engine.simulation import Simulation


def _tables(report: str) -> dict[str, list[dict[str, str]]]:
    """Markdown tables of the report by section (``## name``), as lists of row dicts."""
    out: dict[str, list[dict[str, str]]] = {}
    section = ""
    header: list[str] | None = None
    for line in report.splitlines():
        if line.startswith("## "):
            section, header = line[3:].strip(), None
            continue
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if header is None:
            header = cells
        elif not set("".join(cells)) <= set("- "):
            out.setdefault(section, []).append(dict(zip(header, cells, strict=True)))
    return out


def _number(cell: str) -> float:
    return float(cell.replace(",", "").rstrip("×"))


def _digits_cfg(algorithm: dict, **federation) -> Config:
    return Config.from_dict(
        {
            "seed": 1,
            "dataset": {"name": "digits"},
            "partition": {"num_clients": 8, "alpha": 0.5, "min_size": 20},
            "model": {"name": "fedavgcnn", "padding": 2, "width": 4},
            "algorithm": algorithm,
            "federation": {"join_ratio": 0.5, "batch_size": 10, "lr": 0.05, **federation},
            "engine": {"backend": "sequential", "threads": 1},
        }
    )


def test_bench_smoke_report_has_every_column(tmp_path, capsys):
    out = tmp_path / "bench.md"
    argv = [
        "--dataset",
        "digits",
        "--clients",
        "10",
        "--min-size",
        "10",
        "--repeats",
        "1",
        "--workloads",
        "fedper,scale1000",
        "--scale-clients",
        "40",
        "--scale-min-size",
        "5",
        "--workers",
        "2",
        "--out",
        str(out),
    ]
    assert harness.main(argv) == 0
    report = out.read_text()
    assert report == capsys.readouterr().out
    assert "fedpart bench --dataset digits" in report  # the exact command
    assert "torch " + torch.__version__ in report and "cores" in report
    tables = _tables(report)

    rows = {r["variant"]: r for r in tables["fedper"]}
    assert list(rows) == [
        "naive",
        "sequential",
        "sequential, 2 threads",  # the best single process next to the two workers
        "batched",
        "processes x2",
        "ceiling",
    ]
    assert rows["sequential, 2 threads"]["backend"] == "sequential"
    assert "processes x2: end-to-end" in report and "parallel efficiency" in report
    assert "the best single-process variant" in report
    for row in rows.values():
        assert list(row) == harness.COLUMNS
        for col in (
            "client-samples/round",
            "samples/s (train)",
            "train s/round",
            "end-to-end s/round",
            "peak RSS MB",
            "train speed vs naive",
            "train speed vs ceiling",
        ):
            assert _number(row[col]) > 0, (row["variant"], col, row[col])
        assert _number(row["peak Δ RSS MB"]) >= 0
    for variant in ("naive", "sequential", "batched"):
        assert _number(rows[variant]["eval s/round"]) > 0
        assert _number(rows[variant]["end-to-end vs naive"]) > 0
        assert 0 <= _number(rows[variant]["accuracy %"]) <= 100
    assert rows["ceiling"]["eval s/round"] == "—"
    # every variant trained on the same samples
    assert len({rows[v]["client-samples/round"] for v in rows}) == 1
    assert rows["batched"]["backend"] == "batched"

    (scale,) = tables["scale1000"]
    assert list(scale) == harness.SCALE_COLUMNS
    assert scale["clients"] == "40"
    for col in ("train s", "eval s (all clients)", "end-to-end s", "peak RSS MB"):
        assert _number(scale[col]) > 0
    assert scale["peak under target"] == "yes (< 3 GB)"


def test_bench_reports_batchnorm_as_not_batchable(tmp_path):
    """LeNet5 has BatchNorm: the batched row says n/a and why (on a tiny MNIST-format fixture)."""
    from fixtures_data import write_mnist_fixture

    write_mnist_fixture(tmp_path, n_train=240, n_test=60)
    opts = harness.parse_args(
        ["--data-root", str(tmp_path), "--clients", "4", "--min-size", "20", "--repeats", "1"]
        + ["--workers", "0"]
        + ["--workloads", "lenet5"]
    )
    (result,) = harness.run_bench(opts)
    assert result.skipped is None
    by = {v.variant: v for v in result.variants}
    assert by["batched"].na == "n/a (BatchNorm)"
    assert by["sequential"].samples_per_s > 0 and by["naive"].samples_per_s > 0
    assert by["naive"].samples_per_round == by["sequential"].samples_per_round
    report = harness.format_report(opts, [result], 1.0)
    assert "| batched | n/a (BatchNorm) |" in report


def test_naive_fedavg_learns_on_digits():
    """The naive loop is a working FedAvg: above chance (10 %) after 3 rounds."""
    cfg = _digits_cfg({"name": "fedavg"}, lr=0.1, local_epochs=2)
    data = build_federated_data(cfg, load_dataset("digits"))
    fed = NaiveFederation(cfg, data)
    before = fed.evaluate()["accuracy"]
    for rnd in range(3):
        assert fed.train_round(rnd) == round_samples(cfg, data, fed.model, rnd)
    after = fed.evaluate()
    assert after["accuracy"] > 0.3, after
    assert after["accuracy"] > before + 0.1


@pytest.mark.parametrize(
    "algorithm",
    [
        {"name": "fedavg"},
        {"name": "fedper"},
        {"name": "fedrep"},
        {"name": "dfedpgp"},
    ],
)
def test_naive_does_the_engines_work(algorithm):
    """With full-batch steps (order-free), the naive loop and the engine give the same models:
    the baseline trains the same clients, phases, steps and aggregation as fedpart."""
    cfg = _digits_cfg(algorithm, batch_size=10_000, local_epochs=2, momentum=0.5, weight_decay=1e-3)
    data = build_federated_data(cfg, load_dataset("digits"))
    fed = NaiveFederation(cfg, data)
    sim = Simulation(cfg, data=data)
    for rnd in range(2):
        fed.train_round(rnd)
        sim.run_round(rnd)
    for c in range(data.num_clients):
        ours = sim.algorithm.eval_state(c)
        theirs = fed.client_state(c)
        for key, value in ours.items():
            torch.testing.assert_close(theirs[key], value, rtol=1e-4, atol=1e-5, msg=key)
    acc_naive = fed.evaluate()["accuracy"]
    acc_engine = sim.evaluate()["accuracy"]
    assert acc_naive == pytest.approx(acc_engine, abs=0.02)


def test_parse_args_rejects_unknown_workloads(capsys):
    assert harness.main(["--workloads", "fedper,nope"]) == 2
    assert re.search(r"unknown workload\(s\) nope", capsys.readouterr().err)


def test_timed_rounds_are_interleaved_across_variants():
    """Set-up and warm-up one variant at a time, then round r of every variant (the first one
    rotating) before round r + 1 of any; each variant's medians come from its own rounds."""
    calls: list[tuple[str, str, int]] = []

    class Fake:
        def __init__(self, name: str) -> None:
            self.backend = name
            calls.append((name, "setup", -1))

        def train_round(self, rnd: int) -> int:
            calls.append((self.backend, "train", rnd))
            return 10 * (rnd + 1)

        def evaluate(self) -> dict[str, float]:
            return {"accuracy": 0.5}

    plan = [(name, lambda name=name: Fake(name)) for name in ("a", "b", "c")]
    results = harness.measure_interleaved(plan, repeats=3)
    assert calls[:6] == [
        ("a", "setup", -1),
        ("a", "train", 0),
        ("b", "setup", -1),
        ("b", "train", 0),
        ("c", "setup", -1),
        ("c", "train", 0),
    ]
    timed = [(name, rnd) for name, kind, rnd in calls[6:]]
    assert timed == [
        ("a", 1), ("b", 1), ("c", 1),
        ("b", 2), ("c", 2), ("a", 2),
        ("c", 3), ("a", 3), ("b", 3),
    ]  # fmt: skip
    assert [r.variant for r in results] == ["a", "b", "c"]
    for r in results:
        assert [row["round"] for row in r.rounds] == [1, 2, 3]
        assert r.samples_per_round == 30 and r.accuracy == 0.5
