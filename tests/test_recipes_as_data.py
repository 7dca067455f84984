"""Recipes are data: every function in a built-in method's recipe is a registered module-level
function with plain arguments, so a recipe compares by value, travels as JSON plus tensors (no
pickle) and is refused by a receiver that does not know its functions; equal recipes, and
recipes that differ only in their tensors' values, train together on the batched backend."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import torch

import fedpart
from fedpart.algorithms import ALGORITHMS, holdout
from fedpart.config import load_config
from fedpart.engine import batched, context
from fedpart.engine.recipe import (
    LossTerm,
    Phase,
    Recipe,
    bind,
    proximal,
    proximal_penalty,
    recipe_function,
)
from fedpart.engine.recipe_codec import decode_job, encode_job
from fedpart.engine.training import TrainSettings
from fedpart.errors import FedpartError

SRC = Path(__file__).resolve().parents[1] / "src" / "fedpart"
QUICKSTART = "configs/quickstart.yaml"
SETTINGS = TrainSettings(
    lr=0.1, momentum=0.9, weight_decay=0.0, batch_size=8, local_epochs=1, drop_last=False, seed=1
)
#: methods whose local objective is not data, with the reason; none of them runs on Flower or
#: on the batched backend (their ``backends`` say so), so their recipes never leave the process
NOT_DATA = {
    "fjord": "its objective draws a width per step from a generator it carries across steps",
    "uapdfl": "its loss term runs the model itself on X_unit (decentralized, sequential only)",
}


def _methods():
    base = load_config(QUICKSTART)
    return sorted(n for n, cls in ALGORITHMS.items() if cls.supports(base))


@pytest.fixture
def recorded(monkeypatch):
    """Every job the engine trains, encoded and decoded on the way: the run trains with the
    decoded recipe, so its numbers show the wire format loses nothing."""
    seen: list[str] = []
    inner = context.train_client

    def wire(model, start, recipe, data, client, rnd, settings, frozen=frozenset()):
        text, tensors = encode_job(recipe, settings, set(frozen))
        got, got_settings, got_frozen = decode_job(text, tensors)
        assert got == recipe and got_settings == settings and got_frozen == set(frozen)
        seen.append(text)
        return inner(model, start, got, data, client, rnd, got_settings, got_frozen)

    monkeypatch.setattr(context, "train_client", wire)
    monkeypatch.setattr(holdout, "train_client", wire)
    return seen


@pytest.mark.parametrize("method", [m for m in _methods() if m not in NOT_DATA])
def test_every_method_recipe_travels_as_data(recorded, method):
    cfg = load_config(
        QUICKSTART,
        [f"algorithm.name={method}", "federation.rounds=2", "partition.num_clients=4"],
    )
    fedpart.run(cfg, write=False)
    assert recorded, method
    assert all(json.loads(text)["recipe"]["phases"] for text in recorded)


@pytest.mark.parametrize("method", ["fedprox", "fedrod", "fedcmd"])
def test_the_wire_format_trains_to_the_same_numbers(recorded, monkeypatch, method):
    overrides = [f"algorithm.name={method}", "federation.rounds=2", "partition.num_clients=4"]
    got = fedpart.run(load_config(QUICKSTART, overrides), write=False)
    assert recorded
    monkeypatch.undo()
    ref = fedpart.run(load_config(QUICKSTART, overrides), write=False)
    keys = ("accuracy", "accuracy_weighted", "loss", "train_loss", "up_bytes")
    assert [[r[k] for k in keys] for r in got.metrics] == [
        [r[k] for k in keys] for r in ref.metrics
    ]


def test_no_network_bytes_are_unpickled():
    """No ``loads(`` of pickle or cloudpickle in the Flower path; none of cloudpickle at all
    outside the Ray and process backends (processes of one machine)."""
    allowed = {"engine/ray_backend.py", "engine/parallel.py"}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).as_posix()
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("loads", "load"):
                owner = node.value
                name = owner.id if isinstance(owner, ast.Name) else ""
                if name in ("pickle", "cloudpickle", "dill", "marshal"):
                    assert rel in allowed, f"{rel}:{node.lineno} unpickles"
        if rel.startswith("flower"):
            assert "pickle" not in path.read_text(), rel


def test_a_node_refuses_a_function_it_does_not_know():
    text, tensors = encode_job(Recipe(), SETTINGS, set())
    forged = text.replace("fedpart.engine.recipe.cross_entropy", "os.system")
    with pytest.raises(FedpartError, match="'os.system' is not registered") as err:
        decode_job(forged, tensors)
    assert "\n" not in str(err.value)
    for bad in ('{"recipe": 1}', "not json", text.replace('"frozen": []', '"frozen": [1]')):
        with pytest.raises(FedpartError, match="refused a client job"):
            decode_job(bad, tensors)


def test_closures_and_lambdas_cannot_be_bound():
    def inner(params):
        return params

    with pytest.raises(TypeError, match="module-level"):
        recipe_function(inner)
    with pytest.raises(TypeError, match="module-level"):
        recipe_function(lambda p: p)
    with pytest.raises(TypeError, match="not a registered recipe function"):
        bind(torch.sum)
    with pytest.raises(TypeError, match="not plain data"):
        bind(proximal_penalty, reference=object())
    with pytest.raises(TypeError, match="not a registered recipe function"):
        encode_job(Recipe(objective=lambda m, s, x, y: x.sum()), SETTINGS, set())


def test_recipes_compare_by_value():
    ref = {"w": torch.arange(3.0)}
    a = Recipe(phases=(Phase(loss_terms=(LossTerm("p", proximal(ref), 0.1),)),))
    b = Recipe(phases=(Phase(loss_terms=(LossTerm("p", proximal(dict(ref)), 0.1),)),))
    c = Recipe(phases=(Phase(loss_terms=(LossTerm("p", proximal({"w": ref["w"] + 1}), 0.1),)),))
    assert a == b and hash(a) == hash(b) and a != c


@pytest.mark.parametrize("method", ["fedprox", "fedrod", "feddyn"])
def test_clients_with_data_recipes_train_together(tiny_cfg, monkeypatch, method):
    """FedRoD's objective binds each client's class counts and FedDyn's linear term each
    client's g_i: their recipes differ only in tensor values, so the batched backend trains a
    round's participants as one group (before, each client's closure made a group of one)."""
    groups: list[int] = []
    inner = batched.train_clients_batched

    def spy(model, starts, *args, **kwargs):
        groups.append(len(starts))
        return inner(model, starts, *args, **kwargs)

    monkeypatch.setattr(batched, "train_clients_batched", spy)
    cfg = {
        **tiny_cfg,
        "algorithm": {"name": method},
        "federation": {**tiny_cfg["federation"], "rounds": 3, "join_ratio": 1.0},
        "engine": {"backend": "batched"},
    }
    bat = fedpart.run(cfg, write=False)
    assert groups == [6, 6, 6], groups
    seq = fedpart.run({**cfg, "engine": {"backend": "sequential"}}, write=False)
    for r1, r2 in zip(seq.metrics, bat.metrics, strict=True):
        assert r1["train_loss"] == pytest.approx(r2["train_loss"], rel=1e-4)
    for key in ("accuracy", "accuracy_weighted"):
        assert seq.summary[key]["final"] == pytest.approx(bat.summary[key]["final"], abs=1e-2)
