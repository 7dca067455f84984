"""``engine.cuda_graphs``: batched training as a few captured programs kept across rounds.

On the CPU there are no graphs: :class:`~fedpart.engine.step_graphs.StepGraphs` calls each
step, so these tests pin the rest of :mod:`fedpart.engine.captured` — bucketed rows, padded
batches, finished clients restored, buffers reused across rounds — against the sequential
reference (the batched backend's tolerances) and count the captures a round makes. On a GPU,
``benchmarks/captured_round.py`` times the graphs (docs/results/gpu.md).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from fedpart.api import _as_config
from fedpart.api import resume as resume_run
from fedpart.engine import captured
from fedpart.engine.captured import rows_for
from fedpart.engine.recipe import LossTerm, Phase, Recipe, proximal
from fedpart.engine.simulation import Simulation
from fedpart.engine.step_graphs import StepGraphs
from test_batched import _check, _data, _model, _settings


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return _data(tmp_path_factory.mktemp("graphs"))


def test_rows_are_the_group_or_a_power_of_two():
    assert [rows_for(a, 10) for a in (10, 9, 8, 5, 4, 3, 2, 1)] == [10, 10, 8, 8, 4, 4, 2, 1]
    assert [rows_for(a, 100) for a in (100, 64, 63, 33, 1)] == [100, 64, 64, 64, 1]


@pytest.mark.parametrize(
    ("recipe", "over"),
    [
        (Recipe(), {}),
        (Recipe(), {"batch_size": 24, "momentum": 0.5, "local_epochs": 1}),  # ragged batches
        (
            Recipe(
                phases=(
                    Phase(blocks=("classifier",), epochs=3, lr_scale=2.0, name="head"),
                    Phase(blocks=("fc1", "fc2"), epochs=1, name="body"),
                )
            ),
            {},
        ),
        ("proximal", {}),
    ],
    ids=["plain", "ragged", "two phases", "loss term"],
)
def test_captured_training_equals_the_sequential_reference(data, recipe, over):
    # FedAvgCNN where the eager batched backend meets these tolerances too, else the MLP
    model = _model("fedavgcnn" if isinstance(recipe, Recipe) and len(recipe.phases) == 1 else "mlp")
    if recipe == "proximal":
        ref = {k: v.detach() + 0.01 for k, v in model.state_dict().items()}
        recipe = Recipe(phases=(Phase(loss_terms=(LossTerm("p", proximal(ref), 0.5),)),))
    clients = list(range(data.num_clients))  # clients of different sizes: bucketed rows
    settings = _settings(cuda_graphs=True, **over)
    _check(model, data, recipe, clients, settings)


def test_a_round_after_the_first_captures_nothing(data):
    model = _model("fedavgcnn")
    settings = _settings(cuda_graphs=True, momentum=0.5)
    clients = list(range(data.num_clients))
    first = _check(model, data, Recipe(), clients, settings, rnd=1)
    programs = [p for k, p in captured._PROGRAMS.items() if k[0] == id(model)]
    assert len(programs) == 1
    keys = set(programs[0].graphs.steps)
    assert 1 < len(keys) < programs[0].graphs.replayed  # a handful of steps, replayed
    second = _check(model, data, Recipe(), clients, settings, rnd=2)
    assert set(programs[0].graphs.steps) == keys  # round 2: no new step shapes
    again = _check(model, data, Recipe(), clients, settings, rnd=1)  # round 1 again
    for a, b in zip(first, again, strict=True):  # the same numbers from the reused buffers
        assert a.loss == b.loss and all(torch.equal(a.state[k], b.state[k]) for k in a.state)
    assert any(a.loss != b.loss for a, b in zip(first, second, strict=True))


def test_per_client_learning_rate_factors_only_where_given(data):
    """A captured program multiplies the gradients by per-client factors only for a group
    trained with them (push-sum's 1/μ_i): each client then equals the sequential reference at
    ``lr·f``; without factors the program has no such step."""
    from fedpart.engine.batched import train_clients_batched
    from fedpart.engine.training import train_client
    from test_batched import _starts

    model = _model("mlp")
    settings = _settings(cuda_graphs=True, momentum=0.0, weight_decay=0.0)
    clients = list(range(data.num_clients))
    _check(model, data, Recipe(), clients, settings)
    plain = [p for k, p in captured._PROGRAMS.items() if k[0] == id(model)]
    assert len(plain) == 1 and not plain[0].scaled
    factors = [0.5 + 0.25 * i for i in range(len(clients))]
    starts = _starts(model, len(clients))
    got = train_clients_batched(
        model, starts, Recipe(), data, clients, 2, settings, lr_scales=[[f] for f in factors]
    )
    scaled = [p for k, p in captured._PROGRAMS.items() if k[0] == id(model) and p.scaled]
    assert len(scaled) == 1
    for start, client, f, result in zip(starts, clients, factors, got, strict=True):
        alone = dataclasses.replace(settings, lr=settings.lr * f)
        want = train_client(model, start, Recipe(), data, client, 2, alone)
        for k in want.state:
            torch.testing.assert_close(result.state[k], want.state[k], atol=1e-5, rtol=1e-5)


def test_each_step_key_is_captured_once():
    graphs = StepGraphs(torch.device("cpu"))
    calls = []

    def body():
        calls.append(1)
        return torch.ones(2)

    def warm():
        raise AssertionError("no warm-up without a GPU")

    for key in ("a", "a", "b", "a"):
        assert graphs.run(key, body, warm).tolist() == [1.0, 1.0]
    assert len(graphs.steps) == 2 and graphs.replayed == 4 and len(calls) == 4
    assert graphs.captured == 0  # nothing is a graph on the CPU


def test_a_run_with_cuda_graphs_resumes_bit_for_bit_and_stays_close(tmp_path):
    def run(flag: bool, rounds: int, out, resume=False):
        overrides = [
            "algorithm.name=fedper",
            "engine.backend=batched",
            f"engine.cuda_graphs={str(flag).lower()}",
            f"federation.rounds={rounds}",
            "federation.momentum=0.5",
            f"output.dir={out}",
            "output.checkpoint_every=1",
        ]
        if resume:
            return resume_run(out, [f"federation.rounds={rounds}"]).metrics
        cfg = _as_config("configs/quickstart.yaml", overrides)
        sim = Simulation(dataclasses.replace(cfg), run_dir=out)
        sim.run()
        return sim.rows

    eager = run(False, 3, tmp_path / "e")
    whole = run(True, 3, tmp_path / "g")
    for a, b in zip(eager, whole, strict=True):  # the batched backend's tolerance
        assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-4)
        assert b["accuracy"] == pytest.approx(a["accuracy"], abs=1e-2)
    run(True, 2, tmp_path / "r")
    resumed = run(True, 3, tmp_path / "r", resume=True)
    rows = [r for r in resumed if "stage" not in r]
    assert [r["train_loss"] for r in rows] == [r["train_loss"] for r in whole]
    assert [r["accuracy"] for r in rows] == [r["accuracy"] for r in whole]
