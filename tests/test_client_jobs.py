"""Per-client round state is explicit: a ``ClientJob`` (start state, recipe, scratch values)
travels with the client's result to ``trained`` and ``upload``, so no hook leaves values on the
method for a later one, ``upload`` has no side effects, and ``flower.py`` names no method."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from fedpart.algorithms import ALGORITHMS
from fedpart.config import Config
from fedpart.engine.simulation import Simulation
from fedpart.engine.training import ClientJob

ROOT = Path(__file__).resolve().parents[1]


def fedcmd(**options) -> Simulation:
    return Simulation(
        Config.from_dict(
            {
                "seed": 2,
                "dataset": {"name": "digits"},
                "partition": {"kind": "dirichlet", "num_clients": 4, "alpha": 0.5, "min_size": 30},
                "model": {"name": "fedavgcnn", "padding": 2, "width": 4},
                "algorithm": {"name": "fedcmd", **options},
                "federation": {"rounds": 2, "join_ratio": 0.5, "batch_size": 16, "lr": 0.05},
            }
        )
    )


def test_fedcmd_weight_deltas_come_from_the_job_and_upload_is_pure():
    sim = fedcmd(personal_layer="fc1", variant="code")
    algo = sim.algorithm
    job = algo.job(0, 1)
    assert isinstance(job, ClientJob) and (job.rnd, job.client) == (0, 1)
    result = algo.train_job(job)
    assert result.job is job
    first = algo.upload(0, 1, result.state, result.job)
    again = algo.upload(0, 1, result.state, result.job)  # no state was consumed by the first
    assert first.keys() == again.keys()
    assert all(torch.equal(first[k], again[k]) for k in first)
    delta = first["similarity/fc1.weight"]
    assert torch.equal(delta, job.start["fc1.weight"] - result.state["fc1.weight"])
    assert not hasattr(algo, "_before")


def test_a_width_sliced_start_state_changes_nothing():
    sim = Simulation(
        Config.from_dict(
            {
                "seed": 3,
                "dataset": {"name": "digits"},
                "partition": {"kind": "dirichlet", "num_clients": 4, "alpha": 0.5, "min_size": 20},
                "model": {"name": "fedavgcnn", "padding": 2, "width": 4},
                "algorithm": {"name": "heterofl"},
                "federation": {"rounds": 1, "capacity": "uniform", "batch_size": 16},
            }
        )
    )
    algo = sim.algorithm
    before = (dict(algo._trained_round), algo._round)
    for c in range(4):
        algo.start_state(0, c)
        algo.job(0, c)
    assert (dict(algo._trained_round), algo._round) == before
    algo.begin_round(5)
    assert algo._round == 5


def test_flower_names_no_method_and_asks_the_method_what_it_cannot_do():
    names = {
        node.value
        for path in (ROOT / "src" / "fedpart" / "flower").glob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    assert "partition-id" in names  # the package's strings were read
    assert not names & set(ALGORITHMS), names & set(ALGORITHMS)
    reason = fedcmd(variant="code").algorithm.remote_limitation()
    assert reason is not None and "weight_deltas" in reason and "\n" not in reason
    assert fedcmd().algorithm.remote_limitation() is None


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_upload_takes_the_job(name):
    upload = ALGORITHMS[name].upload
    assert "job" in upload.__code__.co_varnames[: upload.__code__.co_argcount]
