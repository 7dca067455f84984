"""Every method runs with ``engine.device=cuda`` — placement proved without a GPU.

The fake CUDA device of ``tests/fake_cuda.py`` raises wherever a GPU raises "Expected all
tensors to be on the same device" while computing the CPU's values, so each registered method
runs its training, aggregation, mixing, server-side steps, evaluation and resume on "cuda" and
is compared with the same run on the CPU bit for bit (same kernels underneath). It also counts
host reads, which on a GPU are synchronisations: they must not grow with the number of local
steps.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import fedpart
from fake_cuda import FakeCuda, torch_switches_kept
from fedpart.algorithms import ALGORITHMS
from fedpart.config import load_config
from fedpart.engine import evaluation_pass
from fedpart.engine.simulation import Simulation

QUICKSTART = Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml"
#: a small slice of the quick start: every method, two rounds, 8 clients
SMALL = [
    "partition.num_clients=8",
    "federation.rounds=2",
    "engine.backend=sequential",
    "engine.conv_layout=contiguous",  # auto differs between CPU (channels-last) and CUDA
    "output.checkpoint_every=1",
]
METHODS = [n for n, cls in ALGORITHMS.items() if cls.supports(load_config(QUICKSTART, SMALL))]


def _method(name: str) -> list[str]:
    """The overrides that pick method ``name``. FedBABU's and fedseqlayer's whole-model
    fine-tuning after the last round takes one epoch instead of ten: the same code runs on the
    same device (both sides of a comparison get the same override), a tenth as often. A
    capacity-aware method runs with clients of different widths (``federation.capacity=uniform``),
    as ``benchmarks/gpu_smoke.py`` runs it: TailorFL's width slicing met a CPU index only there."""
    extra = ["algorithm.finetune_epochs=1"] if name in ("fedbabu", "fedseqlayer") else []
    if ALGORITHMS[name].capacity_aware:
        extra.append("federation.capacity=uniform")
    return [f"algorithm.name={name}", *extra]


pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="a real GPU: --device cuda")


@pytest.fixture
def fake_gpu():
    with torch_switches_kept(), FakeCuda() as gpu:
        yield gpu


def _rows(result) -> list[dict]:
    return [{k: v for k, v in row.items() if k != "wall_seconds"} for row in result.metrics]


def _devices(sim: Simulation, gpu: FakeCuda) -> dict[str, str]:
    """Where every tensor the run keeps lives: name → device, for the ones not on cuda."""
    wrong = {}
    for name, t in sim.state_tensors().items():
        if not gpu.on_cuda(t):
            wrong[name] = str(t.device)
    for name, t in sim.model.state_dict().items():
        if not gpu.on_cuda(t):
            wrong[f"model/{name}"] = str(t.device)
    return wrong


@pytest.mark.parametrize("method", METHODS)
def test_every_method_runs_on_cuda_with_the_cpu_numbers(method, tmp_path, fake_gpu):
    overrides = [*SMALL, *_method(method)]
    with _Off(fake_gpu):
        cpu = fedpart.run(QUICKSTART, [*overrides, f"output.dir={tmp_path / 'cpu'}"])
    gpu_run = fedpart.run(
        QUICKSTART, [*overrides, "engine.device=cuda", f"output.dir={tmp_path / 'cuda'}"]
    )
    assert _rows(gpu_run) == _rows(cpu)
    assert gpu_run.client_accuracy == cpu.client_accuracy
    assert _devices(gpu_run.simulation, fake_gpu) == {}
    summary = json.loads((tmp_path / "cuda" / "summary.json").read_text())
    assert summary["determinism"]["deterministic"] is True
    assert summary["determinism"]["device"] == "fake CUDA (CPU checker)"
    # resumed from the checkpoint after round 1: the method's state comes back on the device
    resumed = fedpart.resume(tmp_path / "cuda", ["federation.rounds=2"])
    assert _devices(resumed.simulation, fake_gpu) == {}


class _Off:
    """Leave the fake device for a block (the CPU reference run)."""

    def __init__(self, gpu: FakeCuda) -> None:
        self.gpu = gpu

    def __enter__(self) -> None:
        self.gpu.__exit__(None, None, None)

    def __exit__(self, *exc: object) -> None:
        self.gpu.__enter__()


def _per_run(gpu: FakeCuda, counter: str, tmp_path: Path, overrides: list[str]) -> list[int]:
    """``gpu.<counter>`` over a run at 1 and at 2 local epochs (twice the steps)."""
    counts = []
    for epochs in (1, 2):
        before = getattr(gpu, counter)
        fedpart.run(
            QUICKSTART,
            [
                *SMALL,
                *overrides,
                "engine.device=cuda",
                f"federation.local_epochs={epochs}",
                f"output.dir={tmp_path / str(epochs)}",
            ],
            write=False,
        )
        counts.append(getattr(gpu, counter) - before)
    return counts


@pytest.mark.parametrize("method", ["fedavg", "fedper", "fedrep", "dfedpgp"])
def test_host_reads_do_not_grow_with_local_steps(method, tmp_path, fake_gpu):
    """Metrics come back to the host once per round, not once per step: doubling the local
    epochs (twice the steps) reads the device the same number of times."""
    reads = _per_run(fake_gpu, "host_reads", tmp_path, [f"algorithm.name={method}"])
    assert reads[0] == reads[1], reads


@pytest.mark.filterwarnings("ignore:engine.cuda_graphs:RuntimeWarning")  # no graphs without a GPU
@pytest.mark.parametrize("cuda_graphs", [False, True])
def test_batched_host_to_device_copies_do_not_grow_with_local_steps(
    cuda_graphs, tmp_path, fake_gpu
):
    """A blocking copy of host data onto a GPU waits for every queued kernel: none per step on
    the batched backend (eager or captured), so the host can queue step after step while the
    device computes. Doubling the local epochs copies the same number of times; each sample
    batch is normalised with the pool's mean and std made on the device once per run."""
    flag = f"engine.cuda_graphs={str(cuda_graphs).lower()}"
    overrides = ["algorithm.name=fedavg", "engine.backend=batched", flag]
    writes = _per_run(fake_gpu, "host_writes", tmp_path, overrides)
    assert writes[0] == writes[1], writes


@pytest.mark.parametrize("method", ["heterofl", "fedrolex"])
def test_width_sliced_copies_do_not_grow_with_the_clients_of_a_round(method, tmp_path, fake_gpu):
    """A width-sliced method keeps its clients' index sets on the device (made once per width,
    or per round for FedRolex's rolling window): slicing a client's state and averaging the
    slices copy nothing from the host: 4 more clients in each of 2 rounds add at most one copy
    each (the batch order of a client trained alone, drawn on the host), where every client's
    index sets once came over (17-19 copies a client)."""
    counts = []
    for ratio in (0.5, 1.0):
        before = fake_gpu.host_writes
        fedpart.run(
            QUICKSTART,
            [
                *SMALL,
                *_method(method),
                "engine.backend=batched",
                "engine.device=cuda",
                f"federation.join_ratio={ratio}",
                f"output.dir={tmp_path / str(ratio)}",
            ],
            write=False,
        )
        counts.append(fake_gpu.host_writes - before)
    assert counts[1] - counts[0] <= 4 * 2, counts


def test_training_on_part_of_a_split_copies_nothing_per_batch(fake_gpu):
    """FedAP and FedFomo train on part of a client's split through a copy of the run's data
    with other index arrays (``FederatedData.with_clients``): it shares the normalisation
    tensors made on the device, so its batches copy nothing from the host (each copy on a GPU
    waits for every queued kernel)."""
    cfg = load_config(QUICKSTART, [*SMALL, "engine.device=cuda"])
    data = Simulation(cfg, quiet=True).data
    data.batch(data.clients[0].train[:4])  # the run's normalisation tensors, made once
    part = data.with_clients([c for c in data.clients])
    before = fake_gpu.host_writes
    for _ in range(3):
        part.batch(part.clients[0].train[:4])
    assert fake_gpu.host_writes == before


def test_fake_device_counts_blocking_copies_onto_it(fake_gpu):
    host = torch.ones(3)
    before = fake_gpu.host_writes
    on = host.to("cuda")  # 1
    torch.tensor([1.0, 2.0], device="cuda")  # 2
    torch.as_tensor((1.0,), device="cuda")  # 3
    on.copy_(host)  # 4
    on[:2] = host[:2]  # 5
    host.to("cuda", non_blocking=True)  # not blocking
    torch.zeros(3, device="cuda")  # made there
    on.to("cuda")  # already there
    torch.as_tensor(on, device="cuda")
    assert fake_gpu.host_writes - before == 5


@pytest.mark.parametrize("method", ["fedavg", "fedper", "fedrep", "fedbabu", "dfedpgp"])
def test_batched_backend_on_cuda_with_the_cpu_numbers(method, tmp_path, fake_gpu, monkeypatch):
    """The backend ``auto`` picks on a GPU: the same numbers as the batched backend on the CPU.
    The evaluation is the same computation on both: CUDA's evaluation batch, and whole models
    (DFedPGP's clients) in one pass on the CPU too (which the engine leaves to the reference
    there: ``evaluation_pass.fewer_passes``)."""
    monkeypatch.setattr(evaluation_pass, "fewer_passes", lambda *a: True)
    overrides = [*SMALL, *_method(method), "engine.backend=batched", "engine.eval_batch_size=4096"]
    with _Off(fake_gpu):
        cpu = fedpart.run(QUICKSTART, overrides, write=False)
    gpu_run = fedpart.run(QUICKSTART, [*overrides, "engine.device=cuda"], write=False)
    assert gpu_run.simulation.backend == "batched"
    assert _rows(gpu_run) == _rows(cpu)
    assert _devices(gpu_run.simulation, fake_gpu) == {}


def test_processes_backend_on_cuda_is_one_line(tmp_path, capsys):
    """Worker processes would each open their own CUDA context: refused, naming the
    alternatives, before anything runs."""
    from fedpart.cli import main

    code = main(
        [
            "run",
            str(QUICKSTART),
            "engine.device=cuda",
            "engine.backend=processes",
            f"output.dir={tmp_path / 'run'}",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "engine.backend" in err[0] and "ray" in err[0], err
    assert not (tmp_path / "run").exists()
