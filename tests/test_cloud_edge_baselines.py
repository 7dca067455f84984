"""Defining behaviours of the FedCMD protocol's baselines: pFedSim, FedBN, FedAP, FedFomo, FedDyn."""

import json

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call

import fedpart
from fedpart.algorithms.fedap import batchnorm_input_statistics, similarity_weights, wasserstein
from fedpart.cli import main
from fedpart.config import Config
from fedpart.engine.rounds import sample_clients
from fedpart.engine.simulation import Simulation
from fedpart.errors import ConfigError
from fedpart.models.base import batchnorm_keys
from resume_check import assert_resume_bit_identical

BASELINES = ("pfedsim", "fedbn", "fedap", "fedfomo", "feddyn")


def cnn_cfg(algorithm, rounds=2, clients=5, join_ratio=0.6, **options):
    """Digits with the quarter-width FedAvgCNN (BatchNorm comes from the method's defaults)."""
    return {
        "seed": 1,
        "dataset": {"name": "digits"},
        "partition": {"kind": "dirichlet", "num_clients": clients, "alpha": 0.5, "min_size": 30},
        "model": {"name": "fedavgcnn", "padding": 2, "width": 4},
        "algorithm": {"name": algorithm, **options},
        "federation": {"rounds": rounds, "join_ratio": join_ratio, "batch_size": 16, "lr": 0.05},
    }


def row_is_stochastic(row):
    row = torch.as_tensor(row, dtype=torch.float64)
    return bool((row >= 0).all()) and abs(float(row.sum()) - 1.0) < 1e-12


@pytest.mark.parametrize("name", BASELINES)
def test_quickstart_runs_each_baseline(name, tmp_path):
    out = tmp_path / name
    args = ["run", "configs/quickstart.yaml", f"algorithm.name={name}", "federation.rounds=2"]
    assert main([*args, f"output.dir={out}", "evaluation.participants=both", "--quiet"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rounds_completed"] == 2 and 0.0 <= summary["accuracy"]["final"] <= 1.0
    for key in ("participants_accuracy_before", "participants_accuracy_after"):
        assert 0.0 <= summary[key]["final"] <= 1.0


# ---------------------------------------------------------------------------------- pFedSim
def test_pfedsim_warmup_then_personal_head_and_similarity_weights():
    sim = Simulation(Config.from_dict(cnn_cfg("pfedsim", rounds=4, join_ratio=0.6)))
    algo = sim.algorithm
    assert algo.warmup == 2 and not algo.personalized
    sim.run_round(0)
    assert not any(k.startswith("fc2.") for k in sim.store.personal_keys)  # FedAvg warm-up
    sim.run_round(1)
    assert algo.personalized and {"fc2.weight", "fc2.bias"} <= set(sim.store.personal_keys)
    head = sim.store.global_state["fc2.weight"].clone()
    for rnd in (2, 3):
        sim.run_round(rnd)
    assert torch.equal(sim.store.global_state["fc2.weight"], head)  # the head never averaged
    S = algo.mixer.matrix
    n = sim.data.num_clients
    assert torch.equal(S, S.T) and torch.equal(S.diagonal(), torch.ones(n, dtype=torch.float64))
    assert bool((S >= 0).all()) and bool((S <= 1).all())
    together = {
        frozenset((i, j))
        for r in (2, 3)
        for i in sample_clients(1, r, n, 0.6)
        for j in sample_clients(1, r, n, 0.6)
    }
    for i in range(n):
        for j in range(n):
            if i != j and frozenset((i, j)) not in together:
                assert S[i, j] == 0  # only co-participants are ever compared
    mixed = 0
    for c in range(n):
        w = algo.mixing_weights(c)
        if w is None:
            continue
        mixed += 1
        assert row_is_stochastic(w) and float(w[c]) == float(w.max())
        start = algo.start_state(4, c)
        expect = sum(float(w[j]) * sim.store.server_state(j)["fc1.weight"] for j in range(n))
        assert torch.allclose(start["fc1.weight"], expect, atol=1e-6)
        assert torch.equal(start["fc2.weight"], sim.store.client_state(c)["fc2.weight"])
    assert mixed > 0


@pytest.mark.parametrize("name", ["pfedsim", "fedap"])
def test_resume_across_the_end_of_warmup_is_bit_identical(name, tmp_path):
    # the warm-up pinned (a ratio would move with federation.rounds), ending at the checkpoint
    cfg = cnn_cfg(name, warmup_rounds=2)
    tensors = assert_resume_bit_identical(cfg, tmp_path)
    assert any(k.startswith("tailored/") for k in tensors)
    assert ("extra/similarity" if name == "pfedsim" else "extra/weights") in tensors


def test_fedfomo_resume_is_bit_identical(tiny_cfg, tmp_path):
    tensors = assert_resume_bit_identical({**tiny_cfg, "algorithm": {"name": "fedfomo"}}, tmp_path)
    assert "extra/affinity" in tensors


# ---------------------------------------------------------------------------------- FedBN
def test_fedbn_never_averages_a_batchnorm_tensor():
    sim = Simulation(Config.from_dict(cnn_cfg("fedbn", join_ratio=1.0)))
    bn = set(batchnorm_keys(sim.model, statistics=True, affine=True))
    assert {"conv1.norm.weight", "conv1.norm.running_mean"} <= bn  # norm=bn by default
    assert bn <= set(sim.store.personal_keys)
    sim.run_round(0)
    states = [sim.algorithm.eval_state(c) for c in range(sim.data.num_clients)]
    for key in sim.store.keys:
        same = all(torch.equal(states[0][key], s[key]) for s in states[1:])
        assert same == (key not in bn), key  # BN differs across clients, the rest is FedAvg's


def test_batchnorm_methods_refuse_a_model_without_batchnorm(tiny_cfg):
    for name in ("fedbn", "fedap"):
        with pytest.raises(ConfigError, match="BatchNorm"):
            Simulation(Config.from_dict({**tiny_cfg, "algorithm": {"name": name}}))


# ---------------------------------------------------------------------------------- FedAP
def test_fedap_statistics_wasserstein_and_weights():
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    batches = [torch.randn(4, 1, 6, 6), torch.randn(3, 1, 6, 6)]
    ((mean, var),) = batchnorm_input_statistics(model, state, batches)
    conv = torch.cat([model[0](x) for x in batches]).detach().transpose(0, 1).flatten(1).double()
    assert torch.allclose(mean, conv.mean(1)) and torch.allclose(var, conv.var(1, unbiased=False))
    assert torch.equal(state["1.running_mean"], torch.zeros(2))  # statistics of a scratch copy
    a = [(torch.zeros(2), torch.ones(2))]
    b = [(torch.tensor([3.0, 0.0]), torch.tensor([1.0, 25.0]))]
    assert wasserstein(a, b) == pytest.approx(5.0)  # sqrt(3² + (5 − 1)²)
    d = torch.tensor([[0.0, 1.0, 2.0], [1.0, 0.0, 0.0], [2.0, 0.0, 0.0]])
    W = similarity_weights(d, 0.5)
    assert all(row_is_stochastic(row) for row in W) and torch.equal(
        W.diagonal(), torch.full((3,), 0.5)
    )
    assert W[0, 1] == pytest.approx(0.5 * 2 / 3) and W[1, 2] == pytest.approx(0.5)


def test_fedap_pretrains_through_every_client_then_mixes():
    sim = Simulation(Config.from_dict(cnn_cfg("fedap", rounds=3, join_ratio=0.4, warmup_rounds=1)))
    algo = sim.algorithm
    n = sim.data.num_clients
    participants = sample_clients(1, 0, n, 0.4)
    assert len(participants) < n
    # the first participant's turn also reports the turns of the clients the engine did not
    # sample (computed once per round: the round below reuses it)
    first = algo._chain_result(0, participants[0])
    reported = [participants[0], *(c for c in range(n) if c not in participants)]
    shares = sum(algo.parts(c)[0].numel() for c in reported)
    assert first.samples == shares * sim.cfg.federation.local_epochs
    turns = algo._pretrain_turns(0)
    for k in range(1, n):  # each client trains the model the previous one left
        assert torch.equal(turns[k][0]["fc1.weight"], turns[k - 1][1].state["fc1.weight"])
    row = sim.run_round(0)
    row.update(algo.round_metrics())
    assert sorted(sim.store.personal) == list(range(n))  # every client took its turn
    model_bytes = sum(
        v.numel() * v.element_size()
        for k, v in sim.store.global_state.items()
        if k in sim.store.shared_keys()
    )
    assert row["up_bytes"] == row["down_bytes"] == n * model_bytes
    W = algo.weights
    assert W is not None and all(row_is_stochastic(r) for r in W)
    assert torch.equal(W.diagonal(), torch.full((n,), 0.5, dtype=torch.float64))
    sim.run_round(1)
    c = sample_clients(1, 1, n, 0.4)[0]
    start = algo.start_state(2, c)
    expect = sum(float(W[c, j]) * sim.store.server_state(j)["fc1.weight"] for j in range(n))
    assert torch.allclose(start["fc1.weight"], expect, atol=1e-6)
    assert torch.equal(start["conv1.norm.weight"], sim.store.client_state(c)["conv1.norm.weight"])
    pretrain, rest = algo.parts(c)
    result = algo.local_update(2, c)
    assert result.samples == rest.numel() * sim.cfg.federation.local_epochs
    assert set(pretrain.tolist()).isdisjoint(rest.tolist())


# ---------------------------------------------------------------------------------- FedFomo
def test_fedfomo_with_no_download_is_local(tiny_cfg):
    local = fedpart.run({**tiny_cfg, "algorithm": {"name": "local"}}, write=False)
    fomo = fedpart.run({**tiny_cfg, "algorithm": {"name": "fedfomo", "M": 0}}, write=False)
    assert fomo.client_accuracy == local.client_accuracy
    for a, b in zip(fomo.metrics, local.metrics, strict=True):
        for key in ("train_loss", "accuracy", "accuracy_weighted", "loss"):
            assert a[key] == b[key], key


def test_fedfomo_combines_with_non_negative_weights_summing_to_one(tiny_cfg):
    # near-IID clients, so that other clients' models help on a client's validation data
    cfg = {
        **tiny_cfg,
        "partition": {**tiny_cfg["partition"], "alpha": 100.0},
        "federation": {**tiny_cfg["federation"], "join_ratio": 1.0},
    }
    sim = Simulation(Config.from_dict({**cfg, "algorithm": {"name": "fedfomo", "M": 3}}))
    algo = sim.algorithm
    n = sim.data.num_clients
    sim.run_round(0)
    affinity = algo.affinity.clone()
    combined = 0
    for c in range(n):
        comb = algo.combination(1, c)
        assert len(comb.received) <= 3 + 1 and comb.received[0] == c
        val, train = algo.hold_out(1, c)
        assert val.numel() == int(0.2 * sim.data.clients[c].num_train)
        assert set(val.tolist()).isdisjoint(train.tolist())
        if comb.weights:
            combined += 1
            assert row_is_stochastic(list(comb.weights.values()))
            expect = sum(
                w * sim.store.server_state(j)["fc1.weight"] for j, w in comb.weights.items()
            )
            assert torch.allclose(comb.state["fc1.weight"], expect, atol=1e-6)
        else:
            assert comb.state is not None
    assert combined > 0
    row = sim.run_round(1)
    row.update(algo.round_metrics())
    for c in range(n):
        for j, w in algo.combination(1, c).benefit.items():
            assert algo.affinity[c, j] == pytest.approx(affinity[c, j] + w)
    per_model = sum(v.numel() * v.element_size() for v in sim.store.global_state.values())
    received = sum(len(algo.combination(1, c).received) for c in range(n))
    assert row["down_bytes"] == received * per_model > n * per_model


# ---------------------------------------------------------------------------------- FedDyn
def feddyn_problem(algorithm, **options):
    """Softmax regression with weight decay (strongly convex), 4 clients with different optima,
    full participation, full-batch local steps."""
    return {
        "seed": 0,
        "dataset": {"name": "synthetic", "num_samples": 400, "num_features": 8, "num_classes": 3},
        "partition": {"kind": "dirichlet", "num_clients": 4, "alpha": 0.2, "min_size": 20},
        "model": {"name": "mlp", "hidden": []},
        "algorithm": {"name": algorithm, **options},
        "federation": {
            "rounds": 40,
            "join_ratio": 1.0,
            "batch_size": 10_000,
            "local_epochs": 10,
            "lr": 0.5,
            "weight_decay": 0.01,
        },
        "evaluation": {"every": 1000},
    }


def objective_gradient_norm(sim, uniform):
    """‖∇F(θ)‖ at the server model, F the clients' regularised losses averaged uniformly
    (FedDyn's objective) or by data size (FedAvg's)."""
    params = {k: v.clone().requires_grad_(True) for k, v in sim.store.global_state.items()}
    total, weight = 0.0, 0.0
    for c in sim.data.clients:
        x, y = sim.data.batch(c.train)
        loss = F.cross_entropy(functional_call(sim.model, params, (x,)), y)
        loss = loss + 0.005 * sum((p * p).sum() for p in params.values())
        w = 1.0 if uniform else float(c.num_train)
        total, weight = total + w * loss, weight + w
    grads = torch.autograd.grad(total / weight, list(params.values()))
    return float(torch.sqrt(sum((g * g).sum() for g in grads)))


def test_feddyn_reaches_the_minimizer_where_fedavg_drifts():
    dyn = fedpart.run(feddyn_problem("feddyn", alpha=0.1), write=False).simulation
    avg = fedpart.run(feddyn_problem("fedavg"), write=False).simulation
    assert objective_gradient_norm(dyn, uniform=True) < 1e-3
    assert objective_gradient_norm(avg, uniform=False) > 1e-2


def test_feddyn_state_updates_follow_algorithm_1(tiny_cfg):
    sim = Simulation(Config.from_dict({**tiny_cfg, "algorithm": {"name": "feddyn", "alpha": 0.5}}))
    algo = sim.algorithm
    before = dict(sim.store.global_state)
    participants = sample_clients(3, 0, sim.data.num_clients, 0.5)
    trained = {c: sim.train(0, c, algo.start_state(0, c)).state for c in participants}
    sim.run_round(0)
    m, key = sim.data.num_clients, "classifier.weight"
    steps = [trained[c][key] - before[key] for c in participants]
    for c, step in zip(participants, steps, strict=True):
        assert torch.allclose(algo.grads[c][key], -0.5 * step, atol=1e-6)
    h = -0.5 / m * sum(steps)
    assert torch.allclose(algo.h[key], h, atol=1e-6)
    mean = sum(trained[c][key] for c in participants) / len(participants)
    assert torch.allclose(sim.store.global_state[key], mean - h / 0.5, atol=1e-6)


def test_feddyn_resume_is_bit_identical(tiny_cfg, tmp_path):
    tensors = assert_resume_bit_identical({**tiny_cfg, "algorithm": {"name": "feddyn"}}, tmp_path)
    assert (
        any(k.startswith("extra/grad/") for k in tensors) and "extra/h/classifier.weight" in tensors
    )
