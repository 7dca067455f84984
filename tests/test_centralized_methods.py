"""Defining behaviours of the centralized partial-personalization methods."""

import pytest
import torch

import fedpart
from fedpart.algorithms import ALGORITHMS
from fedpart.algorithms.fedseqlayer import unfrozen_blocks
from fedpart.config import Config
from fedpart.engine.cost import paper_cost_proxy, trainable_parameters
from fedpart.engine.rounds import sample_clients
from fedpart.engine.simulation import Simulation
from fedpart.errors import ConfigError
from fedpart.models import build_model


def cfg_for(algorithm, rounds=2, **options):
    return Config.from_dict(
        {
            "seed": 1,
            "dataset": {"name": "digits"},
            "partition": {"kind": "dirichlet", "num_clients": 5, "alpha": 0.5, "min_size": 30},
            "model": {"name": "fedavgcnn", "padding": 2},
            "algorithm": {"name": algorithm, **options},
            "federation": {"rounds": rounds, "join_ratio": 0.6, "batch_size": 16, "lr": 0.05},
        }
    )


def changed_blocks(model, before, after):
    return {model.block_of(k) for k in before if not torch.equal(before[k], after[k])}


def one_client_update(sim, rnd=0):
    client = sample_clients(sim.cfg.seed, rnd, sim.data.num_clients, sim.cfg.federation.join_ratio)[
        0
    ]
    start = sim.algorithm.start_state(rnd, client)
    result = sim.algorithm.local_update(rnd, client)
    return client, start, result


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_method_runs_and_learns_something(name):
    res = fedpart.run(cfg_for(name, rounds=2), write=False)
    acc = res.summary["accuracy"]["final"]
    assert 0.0 <= acc <= 1.0
    assert all(r["train_loss"] is not None for r in res.metrics)


def test_fedper_head_never_averaged():
    sim = Simulation(cfg_for("fedper"))
    init_head = {k: v.clone() for k, v in sim.store.global_state.items() if k.startswith("fc2.")}
    _, start, result = one_client_update(sim)
    sent = sim.algorithm.upload(0, 0, result.state)
    assert not any(k.startswith("fc2.") for k in sent) and "fc1.weight" in sent
    sim.run_round(1)
    for k, v in init_head.items():
        assert torch.equal(sim.store.global_state[k], v)  # server head untouched
    trained = sorted(sim.store.personal)
    a, b = sim.store.personal[trained[0]], sim.store.personal[trained[1]]
    assert not torch.equal(a["fc2.weight"], b["fc2.weight"])


def test_lgfedavg_body_personal_head_shared():
    sim = Simulation(cfg_for("lgfedavg"))
    _, _, result = one_client_update(sim)
    sent = sim.algorithm.upload(0, 0, result.state)
    assert set(sent) == {"fc2.weight", "fc2.bias"}


def test_fedrep_head_phase_then_body_phase():
    sim = Simulation(cfg_for("fedrep", head_epochs=1, body_epochs=0))
    _, start, result = one_client_update(sim)
    assert changed_blocks(sim.model, start, result.state) == {"fc2"}
    sim = Simulation(cfg_for("fedrep", head_epochs=0, body_epochs=1))
    _, start, result = one_client_update(sim)
    assert changed_blocks(sim.model, start, result.state) == {"conv1", "conv2", "fc1"}
    assert [p[0] for p in result.phases][0][0].startswith("conv1")


@pytest.mark.parametrize("name, options", [("fedbabu", {}), ("fedseqlayer", {"mode": "all"})])
def test_fedbabu_head_bit_identical_until_finetuning(name, options):
    cfg = cfg_for(name, rounds=3, finetune_epochs=1, **options)
    sim = Simulation(cfg)
    init = sim.store.global_state["fc2.weight"].clone()
    for rnd in range(3):
        sim.run_round(rnd)
        assert torch.equal(sim.store.global_state["fc2.weight"], init)
        for state in sim.store.personal.values():
            assert "fc2.weight" not in state
    assert "fc2.weight" not in sim.algorithm.download_keys(0)
    sim.rounds_completed = 3
    res = sim.run()
    ft = sim.algorithm.finetuned
    assert len(ft) == sim.data.num_clients
    assert not torch.equal(ft[0]["fc2.weight"], init)
    assert sim.final_row["stage"] == "final"
    assert res.summary["accuracy"]["final"] == sim.final_row["accuracy"]


def test_vanilla_trains_only_conv1_and_anti_only_fc1_in_round_0():
    for mode, block in (("vanilla", "conv1"), ("anti", "fc1")):
        sim = Simulation(cfg_for("fedseqlayer", mode=mode))
        _, start, result = one_client_update(sim)
        assert changed_blocks(sim.model, start, result.state) == {block}
        sent = sim.algorithm.upload(0, 0, result.state)
        assert {sim.model.block_of(k) for k in sent} == {block}
        assert {sim.model.block_of(k) for k in sim.algorithm.download_keys(0)} == {block}


def test_unfreeze_schedule():
    base = ["conv1", "conv2", "fc1"]
    t = [0, 100, 200]
    assert unfrozen_blocks(99, "vanilla", base, t) == ["conv1"]
    assert unfrozen_blocks(100, "vanilla", base, t) == ["conv1", "conv2"]
    assert unfrozen_blocks(0, "anti", base, t) == ["fc1"]
    assert unfrozen_blocks(150, "anti", base, t) == ["conv2", "fc1"]
    assert unfrozen_blocks(250, "anti", base, t) == base
    assert unfrozen_blocks(0, "all", base, t) == base


def test_table4_computation_proxy_exact():
    """fedseqlayer spec §3.6 / paper Table 4: T=300, 50 batches per epoch, 100 clients."""
    model = build_model("fedavgcnn", num_classes=10, input_shape=(1, 28, 28))
    base = list(model.body_names())

    def proxy(blocks_of_round):
        per_round = [trainable_parameters(model, blocks_of_round(t)) for t in range(300)]
        return paper_cost_proxy(per_round, batches_per_epoch=50, clients=100)

    sched = [0, 100, 200]
    assert proxy(lambda t: model.block_names) == 873_039_000_000
    assert proxy(lambda t: unfrozen_blocks(t, "all", base, sched)) == 865_344_000_000
    assert proxy(lambda t: unfrozen_blocks(t, "vanilla", base, sched)) == 314_912_000_000
    assert proxy(lambda t: unfrozen_blocks(t, "anti", base, sched)) == 838_880_000_000


def test_logged_cost_follows_the_schedule():
    res = fedpart.run(
        cfg_for("fedseqlayer", rounds=2, mode="vanilla", unfreeze_rounds=[0, 1, 5]), write=False
    )
    m0, m1 = res.metrics[0], res.metrics[1]
    assert m0["trainable_params"] == 32 * 25 + 32  # conv1 only
    assert m1["trainable_params"] > m0["trainable_params"]
    assert 0 < m0["compute_proxy"] < m1["compute_proxy"]
    assert 0 < m0["train_macs"] < m1["train_macs"]
    assert m0["up_bytes"] == m0["participants"] * (32 * 25 + 32) * 4


def test_fedprox_mu_zero_is_fedavg():
    a = fedpart.run(cfg_for("fedprox", mu=0.0), write=False).summary["accuracy"]
    b = fedpart.run(cfg_for("fedavg"), write=False).summary["accuracy"]
    assert a == b
    c = fedpart.run(cfg_for("fedprox", mu=1.0), write=False).summary["accuracy"]
    assert c != b


def test_ditto_personal_models_are_kept_and_evaluated():
    sim = Simulation(cfg_for("ditto", lam=0.1))
    sim.run_round(0)
    trained = sorted(sim.algorithm.personal_models)
    assert trained
    v = sim.algorithm.eval_state(trained[0])
    assert not torch.equal(v["fc1.weight"], sim.store.global_state["fc1.weight"])


def test_fedrod_personal_head_stays_home_and_adds_to_generic():
    sim = Simulation(cfg_for("fedrod"))
    assert "phead" in sim.model.block_names
    _, start, result = one_client_update(sim)
    sent = sim.algorithm.upload(0, 0, result.state)
    assert not any(k.startswith("phead.") for k in sent) and "fc2.weight" in sent
    x = torch.randn(3, 1, 8, 8)
    z = sim.model.features(x)
    assert torch.allclose(sim.model(x), sim.model.generic(z) + sim.model.personal(z))


@pytest.mark.parametrize(
    "override, key",
    [
        ("algorithm.head_epochs=-1", "algorithm.head_epochs"),
        ("algorithm.unfreeze_rounds=[0,50,50]", "algorithm.unfreeze_rounds"),
        ("algorithm.unfreeze_rounds=[0,100]", "algorithm.unfreeze_rounds"),
        ("algorithm.base_blocks=[conv1,conv9,fc1]", "algorithm.base_blocks"),
        ("algorithm.mode=sideways", "algorithm.mode"),
        ("algorithm.finetune_epochs=-2", "algorithm.finetune_epochs"),
        ("algorithm.mu=-1", "algorithm.mu"),
    ],
)
def test_bad_hyperparameters_are_one_line_errors(override, key):
    name = {"head_epochs": "fedrep", "mu": "fedprox"}.get(key.split(".")[1], "fedseqlayer")
    with pytest.raises(ConfigError) as err:
        cfg = cfg_for(name).with_overrides([override])
        Simulation(cfg)
    assert str(err.value).startswith(key) and "\n" not in str(err.value)
