"""Head-only phases on cached body features (``engine.cache_features``)."""

import dataclasses

import pytest
import torch

import fedpart
from fedpart.engine import training
from fedpart.engine.recipe import LossTerm, Phase, Recipe, head_then_body, proximal
from fedpart.models import build_model


def _cnn_cfg(tiny_cfg, algorithm, **engine):
    return {
        **tiny_cfg,
        "model": {"name": "fedavgcnn", "padding": 2, "width": 4},
        "algorithm": {"name": algorithm},
        "federation": {**tiny_cfg["federation"], "rounds": 2, "momentum": 0.0, "lr": 0.01},
        "engine": engine,
    }


@pytest.mark.parametrize("algorithm", ["fedrep", "dfedpgp"])
def test_cached_features_give_the_same_run(tiny_cfg, algorithm):
    """FedRep's and DFedPGP's head epochs on cached features: the same run up to rounding."""
    extra = {"topology": {"neighbors": 2}} if algorithm == "dfedpgp" else {}
    runs = {
        flag: fedpart.run(
            {**_cnn_cfg(tiny_cfg, algorithm, cache_features=flag), **extra}, write=False
        )
        for flag in (False, True)
    }
    for c in range(6):
        a = runs[False].simulation.algorithm.eval_state(c)
        b = runs[True].simulation.algorithm.eval_state(c)
        for key in a:
            torch.testing.assert_close(a[key], b[key], atol=1e-5, rtol=1e-4)
    for r1, r2 in zip(runs[False].metrics, runs[True].metrics, strict=True):
        assert r1["train_loss"] == pytest.approx(r2["train_loss"], rel=1e-5)
        assert r1["compute_proxy"] == r2["compute_proxy"]


def test_the_body_runs_once_per_head_phase(tiny_cfg, monkeypatch):
    """With the cache, a head phase of several epochs calls the body once per feature batch
    (not once per step), and the body phase trains as before."""
    sim = fedpart.run(_cnn_cfg(tiny_cfg, "fedrep"), write=False).simulation
    calls = []
    real = training.features

    def counting(model, state, x):
        calls.append(len(x))
        return real(model, state, x)

    monkeypatch.setattr(training, "features", counting)
    recipe = head_then_body(sim.model, head_epochs=3)
    settings = dataclasses.replace(
        sim.train_settings(0, 0), cache_features=True, feature_batch_size=64
    )
    n = sim.data.clients[0].num_train
    start = sim.store.client_state(0)
    cached = training.train_client(sim.model, start, recipe, sim.data, 0, 0, settings)
    assert sum(calls) == n and len(calls) == -(-n // 64)
    calls.clear()
    plain = training.train_client(
        sim.model,
        start,
        recipe,
        sim.data,
        0,
        0,
        dataclasses.replace(settings, cache_features=False),
    )
    assert calls == []
    assert cached.steps == plain.steps and cached.phases == plain.phases
    for key, value in plain.state.items():
        torch.testing.assert_close(cached.state[key], value, atol=1e-5, rtol=1e-4)


def test_when_features_can_be_cached(tiny_cfg):
    sim = fedpart.run(_cnn_cfg(tiny_cfg, "fedrep"), write=False).simulation
    model, data = sim.model, sim.data
    head = [k for k, _ in model.named_parameters() if model.block_of(k) in model.head_names]
    body = [k for k, _ in model.named_parameters() if model.block_of(k) not in model.head_names]
    plain = Recipe(phases=(Phase(),))
    assert training.cacheable_features(model, head, plain, data)
    # a loss term on the head's parameters does not need the inputs
    ref = {k: v.clone() for k, v in model.state_dict().items() if k in head}
    with_term = Recipe(phases=(Phase(loss_terms=(LossTerm("prox", proximal(ref), 0.1),)),))
    assert training.cacheable_features(model, head, with_term, data)
    assert not training.cacheable_features(model, body + head, plain, data)  # body trains
    assert not training.cacheable_features(model, [], plain, data)
    objective = Recipe(objective=lambda m, s, x, y: torch.zeros(()))
    assert not training.cacheable_features(model, head, objective, data)  # sees the inputs
    augmented = dataclasses.replace(data, augment="crop")
    assert not training.cacheable_features(model, head, plain, augmented)  # new inputs per epoch
    lenet = build_model("lenet5", num_classes=10, input_shape=(1, 28, 28))
    lenet_head = [k for k, _ in lenet.named_parameters() if lenet.block_of(k) in lenet.head_names]
    assert not training.cacheable_features(lenet, lenet_head, plain, data)  # BatchNorm body
