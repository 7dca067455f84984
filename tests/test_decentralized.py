"""Decentralized rounds: gossip and push-sum invariants, DFedPGP, DFedAvgM(-P), OSGP, dfedavg."""

import math

import numpy as np
import pytest
import torch

import fedpart
from fedpart.config import Config
from fedpart.engine.decentralized import Exchange, gossip, push_sum
from fedpart.engine.simulation import Simulation
from fedpart.errors import ConfigError
from fedpart.topology import Topology
from resume_check import assert_resume_bit_identical

DECENTRALIZED = ["dfedavgm", "dfedavgmp", "dfedpgp", "osgp", "dfedavg", "dfedper"]


def _cfg(tiny_cfg, algorithm, **sections):
    data = {**tiny_cfg, "algorithm": {"name": algorithm}}
    data["federation"] = {**tiny_cfg["federation"], "rounds": 2}
    for key, value in sections.items():
        data[key] = {**data.get(key, {}), **value}
    return data


def test_push_sum_conserves_mass_and_weights():
    m = 7
    gen = torch.Generator().manual_seed(0)
    states = [
        {"w": torch.randn(3, 2, generator=gen), "h": torch.randn(2, generator=gen)}
        for _ in range(m)
    ]
    mu = torch.ones(m, dtype=torch.float64)
    topo = Topology("kout", m, 2, seed=0)
    for rnd in range(5):
        P = topo.graph(rnd).weights("push")
        u_before = sum(mu[i] * states[i]["w"].double() for i in range(m))
        states, mu = push_sum(states, mu, P, ["w"])
        u_after = sum(mu[i] * states[i]["w"].double() for i in range(m))
        assert math.isclose(float(mu.sum()), m, rel_tol=1e-12)
        assert torch.allclose(u_before, u_after, atol=1e-5)
    assert not torch.allclose(mu, torch.ones(m, dtype=torch.float64))  # directed: μ moves
    # a doubly stochastic matrix keeps μ ≡ 1
    W = Topology("kregular", m - 1, 2, seed=0).graph(0).weights("metropolis")
    _, mu_sym = push_sum(states[: m - 1], torch.ones(m - 1, dtype=torch.float64), W, ["w"])
    assert torch.allclose(mu_sym, torch.ones(m - 1, dtype=torch.float64))


def test_gossip_with_doubly_stochastic_weights_keeps_the_mean():
    m = 6
    states = [{"w": torch.full((2,), float(i)), "keep": torch.tensor([float(i)])} for i in range(m)]
    W = Topology("kregular", m, 2, seed=0).graph(0).weights("metropolis")
    mixed = gossip(states, W, ["w"])
    assert torch.allclose(sum(s["w"] for s in mixed), sum(s["w"] for s in states))
    assert [float(s["keep"]) for s in mixed] == list(range(m))  # unlisted keys untouched


def test_dfedpgp_push_sum_invariants_and_personal_heads(tiny_cfg):
    cfg = Config.from_dict(_cfg(tiny_cfg, "dfedpgp", topology={"neighbors": 2}))
    sim = Simulation(cfg)
    algo = sim.algorithm
    m = sim.data.num_clients
    head = set(sim.model.head_names)
    original = algo.communicate
    trained = {}

    def spy(rnd, graph):
        trained.update({c: dict(s) for c, s in enumerate(algo.states())})
        original(rnd, graph)

    algo.communicate = spy
    for rnd in range(3):
        sim.run_round(rnd)
        assert math.isclose(float(algo.mu.sum()), m, rel_tol=1e-12)
        for c in range(m):
            state = sim.store.client_state(c)
            for key, value in state.items():
                if sim.model.block_of(key) in head:
                    # heads are never mixed: what a client trained is what it keeps
                    assert torch.equal(value, trained[c][key])
    assert not torch.allclose(algo.mu, torch.ones(m, dtype=torch.float64))
    heads = [sim.store.client_state(c)[f"{sim.model.head_names[0]}.weight"] for c in range(m)]
    assert not torch.equal(heads[0], heads[1])


def test_push_sum_learning_rate_factors_are_read_once_per_change_of_mu(tiny_cfg):
    """``1/μ_i`` for every client from one read of the device (not one per client), equal bit
    for bit to the per-client read, and read again when μ changes (mixing, or in place)."""
    from fedpart.bench.dispatch import DispatchCounter

    sim = Simulation(Config.from_dict(_cfg(tiny_cfg, "dfedpgp", topology={"neighbors": 2})))
    algo = sim.algorithm
    m = sim.data.num_clients
    sim.run_round(0)  # μ mixed: no longer all ones, a new tensor
    with DispatchCounter("cpu") as counter:
        got = [algo.step_scale(c) for c in range(m)]
    assert got == [float(1.0 / algo.mu[c]) for c in range(m)]
    assert len(set(got)) > 1
    assert counter.total_syncs == 1 and counter.syncs["host read"] == 1
    algo.mu.mul_(2.0)
    assert algo.step_scale(0) == float(1.0 / algo.mu[0])


def test_dfedpgp_body_mass_is_conserved_by_mixing(tiny_cfg):
    cfg = Config.from_dict(_cfg(tiny_cfg, "dfedpgp", topology={"neighbors": 2}))
    sim = Simulation(cfg)
    algo = sim.algorithm
    m = sim.data.num_clients
    sim.run_round(0)
    key = next(k for k in sim.store.keys if sim.model.block_of(k) not in algo.personal_blocks())
    before = sum(algo.mu[c] * sim.store.client_state(c)[key].double() for c in range(m))
    algo.communicate(1, sim.topology.graph(1))
    after = sum(algo.mu[c] * sim.store.client_state(c)[key].double() for c in range(m))
    assert torch.allclose(before, after, atol=1e-5)


def test_dfedpgp_on_symmetric_graph_reduces_to_dfedavgmp(tiny_cfg):
    """With Metropolis weights on an undirected graph μ ≡ 1 and DFedPGP is DFedAvgM-P."""
    common = dict(topology={"name": "kregular", "neighbors": 2, "weights": "metropolis"})
    a = fedpart.run(_cfg(tiny_cfg, "dfedpgp", **common), write=False)
    b = fedpart.run(_cfg(tiny_cfg, "dfedavgmp", **common), write=False)
    assert torch.allclose(a.simulation.algorithm.mu, torch.ones(6, dtype=torch.float64))
    for c in range(6):
        sa, sb = a.simulation.store.client_state(c), b.simulation.store.client_state(c)
        for k in sa:
            torch.testing.assert_close(sa[k], sb[k], atol=1e-5, rtol=1e-4)
    assert a.summary["accuracy"]["final"] == pytest.approx(b.summary["accuracy"]["final"], abs=0.02)


def test_dfedavgm_sends_the_model_on_every_edge(tiny_cfg):
    res = fedpart.run(_cfg(tiny_cfg, "dfedavgm", topology={"neighbors": 2}), write=False)
    sim = res.simulation
    model_bytes = sum(v.numel() * v.element_size() for v in sim.store.global_state.values())
    row = res.metrics[0]
    assert row["messages"] == 6 * 2
    assert row["up_bytes"] == row["down_bytes"] == 12 * model_bytes
    assert row["participants"] == 6  # every client trains every round


def _run_with_body_bytes(tiny_cfg, algorithm):
    """A 2-round run on a 2-neighbour graph and the byte size of the model's body."""
    res = fedpart.run(_cfg(tiny_cfg, algorithm, topology={"neighbors": 2}), write=False)
    sim = res.simulation
    head = set(sim.model.head_names)
    body_bytes = sum(
        v.numel() * v.element_size()
        for k, v in sim.store.global_state.items()
        if sim.model.block_of(k) not in head
    )
    return res, body_bytes


def test_dfedavgmp_sends_only_the_body(tiny_cfg):
    res, body_bytes = _run_with_body_bytes(tiny_cfg, "dfedavgmp")
    assert res.metrics[0]["up_bytes"] == 12 * body_bytes


def test_dfedavg_on_a_full_graph_is_the_weighted_average(tiny_cfg):
    cfg = Config.from_dict(_cfg(tiny_cfg, "dfedavg", topology={"name": "kpull", "neighbors": 5}))
    sim = Simulation(cfg)
    gen = torch.Generator().manual_seed(0)
    states = [
        {k: v + torch.randn(v.shape, generator=gen) for k, v in sim.store.client_state(c).items()}
        for c in range(6)
    ]
    sim.algorithm.set_states(states)
    sim.exchange = Exchange(6)
    sim.algorithm.communicate(0, sim.topology.graph(0))
    sizes = torch.tensor([c.num_train for c in sim.data.clients], dtype=torch.float32)
    key = sim.store.keys[0]
    expect = sum(sizes[c] * states[c][key] for c in range(6)) / sizes.sum()
    for c in range(6):
        torch.testing.assert_close(sim.store.client_state(c)[key], expect, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("algorithm", DECENTRALIZED)
def test_unreliable_links_run_without_nans(tiny_cfg, algorithm):
    res = fedpart.run(
        _cfg(tiny_cfg, algorithm, topology={"neighbors": 3, "drop_prob": 0.3}), write=False
    )
    assert all(math.isfinite(r["train_loss"]) for r in res.metrics)
    assert res.summary["accuracy"]["final"] > 0.2


def test_dfedpgp_resume_is_bit_identical(tiny_cfg, tmp_path):
    tensors = assert_resume_bit_identical(
        _cfg(tiny_cfg, "dfedpgp", topology={"neighbors": 2}), tmp_path
    )
    assert "extra/push_sum_weights" in tensors


def test_computation_heterogeneity_groups(tiny_cfg):
    cfg = Config.from_dict(
        _cfg(
            tiny_cfg,
            "dfedavgm",
            federation={"local_epochs_groups": [1, 3]},
            topology={"neighbors": 2},
        )
    )
    sim = Simulation(cfg)
    assert [sim.local_epochs(c) for c in range(6)] == [1, 1, 1, 3, 3, 3]
    r0 = sim.train(0, 0, sim.store.client_state(0))
    r5 = sim.train(0, 5, sim.store.client_state(5))
    n0 = sim.data.clients[0].num_train
    n5 = sim.data.clients[5].num_train
    bs = cfg.federation.batch_size
    assert r0.steps == math.ceil(n0 / bs) and r5.steps == 3 * math.ceil(n5 / bs)


def test_topology_config_errors(tiny_cfg):
    with pytest.raises(ConfigError, match="topology.name"):
        Config.from_dict(_cfg(tiny_cfg, "fedavg", topology={"name": "kout"}))
    with pytest.raises(ConfigError, match="no server"):
        Config.from_dict(_cfg(tiny_cfg, "dfedpgp", topology={"name": "server"}))
    with pytest.raises(ConfigError, match="topology.weights"):
        Config.from_dict(_cfg(tiny_cfg, "dfedpgp", topology={"weights": "magic"}))
    with pytest.raises(ConfigError, match="metropolis"):
        fedpart.run(
            _cfg(tiny_cfg, "dfedpgp", topology={"neighbors": 2, "weights": "metropolis"}),
            write=False,
        )
    with pytest.raises(ConfigError, match="must be even"):
        fedpart.run(
            _cfg(
                tiny_cfg,
                "dfedavgm",
                partition={"num_clients": 5},
                topology={"name": "kregular", "neighbors": 3},
            ),
            write=False,
        )


def test_default_topology_adapts_to_small_federations(tiny_cfg):
    sim = Simulation(Config.from_dict(_cfg(tiny_cfg, "dfedavgm")))
    assert sim.topology.k == 5 and sim.topology.name == "kregular"
    sim = Simulation(Config.from_dict(_cfg(tiny_cfg, "dfedpgp")))
    assert sim.topology.k == 5 and sim.topology.name == "kout"
    assert np.all(sim.topology.graph(0).adj.sum(1) == 5)


def test_dfedpgp_sends_the_body_and_one_scalar_per_out_edge(tiny_cfg):
    res, body_bytes = _run_with_body_bytes(tiny_cfg, "dfedpgp")
    sim = res.simulation
    for rnd, row in enumerate(res.metrics):
        edges = len(sim.topology.graph(rnd).edges())
        assert edges == 6 * 2  # k out-edges per client, self-loops carry nothing
        assert row["messages"] == edges
        assert row["up_bytes"] == row["down_bytes"] == edges * (body_bytes + 8)  # μ in float64


def test_round_metrics_report_method_state(tiny_cfg):
    res = fedpart.run(_cfg(tiny_cfg, "dfedpgp", topology={"neighbors": 2}), write=False)
    for row in res.metrics:
        assert row["mu_min"] <= 1.0 <= row["mu_max"]
    res = fedpart.run(_cfg(tiny_cfg, "uapdfl", topology={"neighbors": 2}), write=False)
    assert res.metrics[0]["dropout_clients"] == 6  # identical initial models: every Div is 0
    assert all(0 <= r["dropout_clients"] <= 6 for r in res.metrics)
