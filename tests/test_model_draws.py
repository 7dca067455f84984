"""What a model draws at random while a client trains (dropout) comes from the client's own seed
(``fedpart.seeding.model_draws``): a resumed run, another backend and another client order draw
the same masks."""

from __future__ import annotations

import textwrap

import pytest
import torch

import fedpart
from fedpart.models.registry import MODELS
from fedpart.seeding import model_draws
from resume_check import assert_resume_bit_identical

PLUGIN = textwrap.dedent(
    """
    import torch.nn as nn
    import fedpart

    @fedpart.register_model("dropmlp")
    def dropmlp(*, num_classes, input_shape, **_):
        n = 1
        for s in input_shape:
            n *= s
        return nn.Sequential(
            nn.Flatten(), nn.Linear(n, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, num_classes)
        )
    """
)


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    """One plugin file for the module (a model name registers once per process)."""
    path = tmp_path_factory.mktemp("plugin") / "dropmlp_plugin.py"
    path.write_text(PLUGIN)
    yield str(path)
    MODELS.pop("dropmlp", None)  # the registry as the other tests know it


@pytest.fixture
def dropout_cfg(plugin, tiny_cfg):
    return {**tiny_cfg, "plugins": [plugin], "model": {"name": "dropmlp"}}


def test_a_dropout_model_resumes_bit_identical(dropout_cfg, tmp_path):
    assert_resume_bit_identical(dropout_cfg, tmp_path)


def test_a_dropout_model_trains_the_same_in_worker_processes(dropout_cfg):
    seq = fedpart.run(dropout_cfg, write=False)
    par = fedpart.run(
        {**dropout_cfg, "engine": {"backend": "processes", "workers": 2}}, write=False
    )
    assert par.simulation.backend == "processes"
    assert [r["train_loss"] for r in seq.metrics] == [r["train_loss"] for r in par.metrics]
    for c in range(6):
        a, b = seq.simulation.algorithm.eval_state(c), par.simulation.algorithm.eval_state(c)
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_model_draws_are_the_clients_and_leave_the_global_generator_alone():
    torch.manual_seed(123)
    before = torch.get_rng_state()
    with model_draws(7, 2, 5, torch.device("cpu")):
        first = torch.rand(4)
    with model_draws(7, 2, 6, torch.device("cpu")):
        other = torch.rand(4)
    with model_draws(7, 2, 5, torch.device("cpu")):
        again = torch.rand(4)
    assert torch.equal(first, again) and not torch.equal(first, other)
    assert torch.equal(torch.get_rng_state(), before)
