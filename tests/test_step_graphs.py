"""``engine.cuda_graphs``: the batched backend's steps through captured-step buffers.

On the CPU :class:`~fedpart.engine.step_graphs.StepGraphs` runs each step on its static buffers
without a graph: the same keys, copies and loss handling as on CUDA, so these tests pin that the
buffer logic gives the eager batched backend's numbers bit for bit (on a GPU,
``benchmarks/captured_round.py`` checks the graphs themselves, docs/results/gpu.md).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import fedpart.engine.batched as batched
from fedpart.api import _as_config
from fedpart.engine.batched import train_clients_batched
from fedpart.engine.recipe import LossTerm, Phase, Recipe, proximal
from fedpart.engine.simulation import Simulation
from fedpart.engine.step_graphs import StepGraphs
from test_batched import _data, _model, _settings, _starts


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return _data(tmp_path_factory.mktemp("graphs"))


@pytest.mark.parametrize(
    "recipe",
    [
        Recipe(),
        Recipe(phases=(Phase(blocks=("fc2",), epochs=1), Phase(lr_scale=0.5))),
        "proximal",
    ],
    ids=["plain", "two phases", "loss term"],
)
def test_captured_steps_equal_eager_bit_for_bit(data, recipe, monkeypatch):
    model = _model("fedavgcnn")
    starts = _starts(model, 5)
    if recipe == "proximal":
        recipe = Recipe(phases=(Phase(loss_terms=(LossTerm("p", proximal(starts[0]), 0.1),)),))
    clients = [0, 1, 2, 3, 4]
    made: list[StepGraphs] = []

    class Recording(StepGraphs):
        def __init__(self, device):
            super().__init__(device)
            made.append(self)

    monkeypatch.setattr(batched, "StepGraphs", Recording)
    eager = train_clients_batched(model, starts, recipe, data, clients, 2, _settings())
    assert not made  # off by default
    graphs = train_clients_batched(
        model, starts, recipe, data, clients, 2, _settings(cuda_graphs=True)
    )
    assert made and made[0].replayed > len(made[0].steps) > 1  # steps replayed, keys reused
    for e, g in zip(eager, graphs, strict=True):
        assert e.loss == g.loss and e.steps == g.steps and e.samples == g.samples
        for k in e.state:
            assert torch.equal(e.state[k], g.state[k]), k


def test_each_distinct_step_is_captured_once():
    graphs = StepGraphs(torch.device("cpu"))
    calls = []

    def body(x, y):
        calls.append(x.data_ptr())
        return x.sum(dim=1) + y

    def warm(x, y):
        raise AssertionError("no warm-up without a GPU")

    a = graphs.step(("p", 2, 3), torch.ones(2, 3), torch.zeros(2), body, warm)
    b = graphs.step(("p", 2, 3), torch.full((2, 3), 2.0), torch.ones(2), body, warm)
    graphs.step(("p", 1, 3), torch.ones(1, 3), torch.zeros(1), body, warm)
    assert a.tolist() == [3.0, 3.0] and b.tolist() == [7.0, 7.0]
    assert len(graphs.steps) == 2 and graphs.replayed == 3
    assert calls[0] == calls[1] != calls[2]  # one key's steps run on its own static buffers


def test_a_run_with_cuda_graphs_equals_the_eager_run():
    def run(flag: bool):
        cfg = _as_config(
            "configs/quickstart.yaml",
            [
                "algorithm.name=fedper",
                "engine.backend=batched",
                f"engine.cuda_graphs={str(flag).lower()}",
                "federation.rounds=2",
                "federation.momentum=0.5",
            ],
        )
        sim = Simulation(dataclasses.replace(cfg), run_dir=None)
        sim.run()
        return sim.rows, sim.state_tensors()

    (rows_e, state_e), (rows_g, state_g) = run(False), run(True)
    assert [r["train_loss"] for r in rows_e] == [r["train_loss"] for r in rows_g]
    assert [r["accuracy"] for r in rows_e] == [r["accuracy"] for r in rows_g]
    assert state_e.keys() == state_g.keys()
    assert all(torch.equal(state_e[k], state_g[k]) for k in state_e)
