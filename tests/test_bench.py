"""``fedpart bench``: the harness runs and reports, and its naive baseline is a fair one."""

from __future__ import annotations

import re
import time

import pytest
import torch

from fedpart.bench.cli import main, parse_args
from fedpart.bench.measure import VariantResult, WorkloadResult, measure_interleaved
from fedpart.bench.memory import MB
from fedpart.bench.naive import NaiveFederation, round_samples
from fedpart.bench.ratios import batched_ratios, gpu_targets
from fedpart.bench.report import (
    COLUMNS,
    DEVICE_COLUMNS,
    SCALE_COLUMNS,
    device_workload_table,
    format_report,
)
from fedpart.bench.running import run_bench
from fedpart.bench.workloads import VARIANT_KINDS, WORKLOADS, workload_config
from fedpart.config import Config
from fedpart.data import load_dataset
from fedpart.engine.data import build_federated_data
from fedpart.engine.simulation import Simulation
from markdown_tables import tables as read_tables


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
    assert main(argv) == 0
    report = out.read_text()
    assert report == capsys.readouterr().out
    assert "fedpart bench --dataset digits" in report  # the exact command
    assert "torch " + torch.__version__ in report and "cores" in report
    tables = read_tables(report)

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
        assert list(row) == COLUMNS
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
    # one extra, untimed round counted per variant; the worker processes' work is not seen
    assert _number(rows["batched"]["ops/round"]) > 0
    assert rows["processes x2"]["ops/round"] == rows["processes x2"]["syncs/round"] == "—"

    (scale,) = tables["scale1000"]
    assert list(scale) == SCALE_COLUMNS
    assert scale["clients"] == "40"
    for col in ("train s", "eval s (all clients)", "end-to-end s", "peak RSS MB"):
        assert _number(scale[col]) > 0
    assert scale["peak under target"] == "yes (< 3 GB)"


def test_bench_reports_batchnorm_as_not_batchable(tmp_path):
    """LeNet5 has BatchNorm: the batched row says n/a and why (on a tiny MNIST-format fixture)."""
    from fixtures_data import write_mnist_fixture

    write_mnist_fixture(tmp_path, n_train=240, n_test=60)
    opts = parse_args(
        ["--data-root", str(tmp_path), "--clients", "4", "--min-size", "20", "--repeats", "1"]
        + ["--workers", "0"]
        + ["--workloads", "lenet5"]
    )
    (result,) = run_bench(opts)
    assert result.skipped is None
    by = {v.variant: v for v in result.variants}
    assert by["batched"].na == "n/a (BatchNorm)"
    assert by["sequential"].samples_per_s > 0 and by["naive"].samples_per_s > 0
    assert by["naive"].samples_per_round == by["sequential"].samples_per_round
    report = format_report(opts, [result], 1.0)
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
    assert main(["--workloads", "fedper,nope"]) == 2
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
    results = measure_interleaved(plan, repeats=3)
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


# ----------------------------------------------------------------------------- --device
def test_bench_device_cuda_without_a_gpu_is_one_line_and_exit_2(monkeypatch, capsys):
    """``fedpart bench --device cuda`` on a machine without a GPU: one line naming the cause,
    exit code 2, nothing on stdout, before any data is loaded."""
    from fedpart.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(
        "fedpart.bench.cli.run_bench", lambda *a, **k: pytest.fail("ran without a GPU")
    )
    assert main(["bench", "--device", "cuda", "--data-root", "/nonexistent"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert captured.err.startswith(
        "error: --device cuda: CUDA was requested but no GPU is available"
    )
    assert "use --device cpu" in captured.err


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_bench_device_cuda_subprocess_has_no_traceback():
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "fedpart.cli", "bench", "--device", "cuda:0"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "--device cuda:0: CUDA was requested but no GPU is available" in proc.stderr


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--device", "tpu"], "expected cpu, cuda or cuda:N"),
        (["--device", "cuda", "--variants", "naive,batched"], "naive run on the CPU only"),
        (["--device", "cuda", "--workers", "2"], "--workers: the process backend runs on the CPU"),
        (["--device", "cuda", "--workloads", "scale1000"], "scale1000 measures the process memory"),
        (["--variants", "fast"], "unknown variant(s) fast"),
        (["--deterministic", "maybe"], "expected true or false"),
    ],
)
def test_bench_device_usage_errors(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_bench_device_defaults():
    """On a GPU: the FedAvgCNN workloads, the sequential, batched and ceiling variants, no
    worker processes; the engine's configs carry the device (and --deterministic when given)."""
    opts = parse_args(["--device", "cuda:1", "--deterministic", "false"])
    assert opts.workloads == ["fedavg", "fedper", "fedrep", "dfedpgp"]
    assert opts.variants == ["sequential", "batched", "ceiling"] and opts.workers == []
    cfg = workload_config(WORKLOADS["dfedpgp"], opts, "batched")
    assert cfg.engine.device == "cuda:1" and cfg.engine.backend == "batched"
    assert cfg.engine.deterministic is False
    cpu = parse_args(["--workers", "0"])
    assert cpu.device == "cpu" and cpu.variants == list(VARIANT_KINDS)
    assert cpu.workloads == list(WORKLOADS)
    assert workload_config(WORKLOADS["fedper"], cpu, "sequential").engine.device == "cpu"


def test_bench_variants_on_the_cpu_with_the_batched_ratios(tmp_path):
    """``--variants sequential,batched,ceiling`` (what a GPU runs) on the CPU: those rows only,
    the CPU table's columns, and the batched / sequential and batched / ceiling note."""
    out = tmp_path / "bench.md"
    argv = ["--dataset", "digits", "--clients", "6", "--min-size", "10", "--repeats", "1"]
    argv += ["--workloads", "fedper", "--variants", "ceiling,batched,sequential", "--out", str(out)]
    assert main(argv) == 0
    report = out.read_text()
    rows = {r["variant"]: r for r in read_tables(report)["fedper"]}
    assert list(rows) == ["sequential", "batched", "ceiling"]
    assert all(list(r) == COLUMNS for r in rows.values())
    assert re.search(
        r"- batched / sequential: training throughput [\d.]+x, end-to-end [\d.]+x "
        r"\([\d.]+ s -> [\d.]+ s per round\); batched / ceiling: training throughput [\d.]+x",
        report,
    )
    assert "## targets" not in report  # the GPU targets are in GPU reports only


def _variant(
    name: str,
    samples_per_s: float,
    train_s: float,
    end_to_end_s: float,
    eval_free: bool = False,
    **kw,
):
    return VariantResult(
        name,
        backend=name,
        samples_per_round=1000,
        samples_per_s=samples_per_s,
        train_s=train_s,
        eval_s=None if eval_free else end_to_end_s - train_s,
        end_to_end_s=end_to_end_s,
        setup_s=0.1,
        peak_bytes=500 * MB,
        **kw,
    )


def test_gpu_table_and_targets_from_measurements():
    """The GPU table (GPU memory, ratios against sequential and the ceiling) and the targets:
    a FedPer round <= 60 ms, its batched training >= 0.7x the ceiling, a 100-client DFedPGP round
    <= 0.25 s."""
    gpu_mem = {"gpu_peak_delta_bytes": 30 * MB, "gpu_round_bytes": 12 * MB}
    fedper = WorkloadResult(WORKLOADS["fedper"], "FedPer", clients=100)
    fedper.variants = [
        _variant("sequential", 1000, 1.0, 1.5, gpu_peak_bytes=80 * MB, **gpu_mem),
        _variant("batched", 6000, 1 / 6, 0.5, gpu_peak_bytes=90 * MB, **gpu_mem),
        _variant("ceiling", 12000, 1 / 12, 1 / 12, eval_free=True),
    ]
    dfedpgp = WorkloadResult(WORKLOADS["dfedpgp"], "DFedPGP", clients=100)
    dfedpgp.variants = [
        _variant("sequential", 1000, 4.0, 4.5),
        _variant("batched", 3000, 1.25, 1.4),
        VariantResult("ceiling", na="n/a (test)"),
    ]
    table = device_workload_table(fedper)
    assert table[0] == "| " + " | ".join(DEVICE_COLUMNS) + " |"
    seq, bat, ceil = (read_tables("## t\n" + "\n".join(table))["t"][i] for i in range(3))
    assert (
        bat["train speed vs sequential"] == "6.00×" and bat["end-to-end vs sequential"] == "3.00×"
    )
    assert bat["train speed vs ceiling"] == "0.50×" and seq["train speed vs sequential"] == "1.00×"
    assert bat["peak Δ GPU MB"] == "30" and bat["round Δ GPU MB"] == "12"
    assert bat["peak GPU MB"] == "90" and ceil["peak GPU MB"] == "—"
    assert ceil["end-to-end vs sequential"] == "—" and ceil["eval s/round"] == "—"
    assert batched_ratios(fedper.variants) == [
        "batched / sequential: training throughput 6.00x, end-to-end 3.00x (1.500 s -> 0.500 s "
        "per round); batched / ceiling: training throughput 0.50x"
    ]
    targets = gpu_targets([fedper, dfedpgp], "cuda")
    assert [met for _, _, met in targets] == ["no", "no", "no"]
    assert targets[0][1] == "500 ms (training 167 ms)"
    assert targets[1][1] == "0.50x (6,000 vs 12,000 samples/s)"
    assert targets[2][1].startswith("1.250 s")
    fedper.variants[1] = _variant("batched", 9000, 0.04, 0.05, gpu_peak_bytes=90 * MB, **gpu_mem)
    dfedpgp.variants[1] = _variant("batched", 3000, 0.25, 0.3)
    assert [met for _, _, met in gpu_targets([fedper, dfedpgp], "cuda")] == ["yes"] * 3
    assert [met for _, _, met in gpu_targets([fedper, dfedpgp], "cpu")] == ["not a GPU"] * 3
    assert [m for _, _, m in gpu_targets([], "cuda")] == ["not measured"] * 3


def test_gpu_timers_synchronize_and_memory_is_reset_per_measurement(monkeypatch):
    """On a CUDA device every timer read follows a ``torch.cuda.synchronize()``; the memory of
    the set-up and warm-up round and of each timed round comes from a fresh peak."""
    calls: list[str] = []
    mem = {"allocated": 100, "peak": 100}

    def allocate(n: int, keep: bool) -> None:
        mem["peak"] = max(mem["peak"], mem["allocated"] + n)
        if keep:
            mem["allocated"] += n

    def reset(*_a) -> None:
        calls.append("reset")
        mem["peak"] = mem["allocated"]

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *_a: calls.append("sync"))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", reset)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda *_a: mem["allocated"])
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *_a: mem["peak"])
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    clock = iter(range(10_000))
    monkeypatch.setattr(time, "perf_counter", lambda: calls.append("clock") or next(clock))

    class Fake:
        backend = "fake"

        def __init__(self) -> None:
            allocate(1000, keep=True)  # its state: stays allocated

        def train_round(self, rnd: int) -> int:
            calls.append("train")
            allocate(50 if rnd == 0 else 20 * rnd, keep=False)  # working memory, freed
            return 10

        def evaluate(self) -> dict[str, float]:
            calls.append("eval")
            return {"accuracy": 0.5}

    (result,) = measure_interleaved([("v", Fake)], repeats=2, device=torch.device("cuda"))
    clocks = [i for i, c in enumerate(calls) if c == "clock"]
    assert clocks and all(calls[i - 1] == "sync" for i in clocks[1:]), calls
    assert calls.count("train") == 3 and calls.count("eval") == 3
    assert calls.count("reset") == 3  # set-up + warm-up, then each timed round
    assert result.gpu_peak_delta_bytes == 1050  # the state and the warm-up round's work
    assert result.gpu_round_bytes == 40  # the largest timed round's working memory
    assert result.gpu_peak_bytes == 1100 + 50  # the highest allocation seen


def test_bench_runs_the_gpu_path_on_the_fake_cuda_device(monkeypatch, tmp_path):
    """``--device cuda`` end to end on the CPU-backed fake CUDA device of ``tests/fake_cuda.py``
    (placement checked, the CPU's kernels): the engine, the ceiling and the data on "cuda",
    the GPU table, the notes and the targets."""
    fake_cuda = pytest.importorskip("fake_cuda")
    if torch.cuda.is_available():
        pytest.skip("a real GPU: the fake device is for CPU-only machines")
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)  # restored afterwards

    class Props:
        total_memory, major, minor = 80 * 1024**3, 9, 0

    out = tmp_path / "gpu.md"
    argv = ["--device", "cuda", "--dataset", "digits", "--clients", "6", "--min-size", "10"]
    argv += ["--repeats", "1", "--workloads", "fedper", "--out", str(out)]
    with fake_cuda.torch_switches_kept(), fake_cuda.FakeCuda():
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a: Props)
        assert main(argv) == 0
    report = out.read_text()
    assert report.startswith("# fedpart bench on cuda")
    assert "- device: fake CUDA (CPU checker) (cuda:0), 80.0 GiB, compute capability 9.0" in report
    assert "cudnn.deterministic=True" in report and "torch.cuda.synchronize()" in report
    tables = read_tables(report)
    rows = {r["variant"]: r for r in tables["fedper"]}
    assert list(rows) == ["sequential", "batched", "ceiling"]
    assert all(list(r) == DEVICE_COLUMNS for r in rows.values())
    assert rows["batched"]["backend"] == "batched"
    assert rows["sequential"]["accuracy %"] == rows["batched"]["accuracy %"]
    assert len({r["client-samples/round"] for r in rows.values()}) == 1
    assert [r["target"] for r in tables["targets"]] == [
        "FedPer: one round (training + evaluation of every client) <= 60 ms, batched",
        "FedPer: batched training throughput >= 0.7x the central ceiling",
        "DFedPGP, 100 clients: one round (training + mixing) <= 0.25 s, batched",
    ]
    assert "the data pool was moved onto cuda once" in report
    assert "- batched / sequential: training throughput" in report
