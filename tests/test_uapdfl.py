"""UA-PDFL (Algorithm 2): divergence, client-wise dropout, layer-wise personalization, Eq. (12)."""

import math

import numpy as np
import pytest
import torch

import fedpart
from fedpart.algorithms.uapdfl import client_dropout, divergence, similar
from fedpart.config import Config
from fedpart.data import load_dataset
from fedpart.engine.data import ClientData, FederatedData
from fedpart.engine.decentralized import Exchange, keys_bytes
from fedpart.engine.mixing import weighted_average
from fedpart.engine.recipe import Phase, Recipe
from fedpart.engine.simulation import Simulation
from fedpart.errors import ConfigError
from fedpart.topology import Graph
from resume_check import assert_resume_bit_identical


def cfg_dict(rounds=2, num_clients=4, **options):
    return {
        "seed": 5,
        "dataset": {"name": "digits"},
        "partition": {
            "kind": "dirichlet",
            "num_clients": num_clients,
            "alpha": 0.5,
            "min_size": 30,
        },
        "model": {"name": "uapdfl_cnn", "padding": 2},
        "algorithm": {"name": "uapdfl", **options},
        "topology": {"neighbors": 3},
        "federation": {"rounds": rounds, "batch_size": 50, "lr": 0.05, "momentum": 0.5},
    }


# ------------------------------------------------------------------------------ pure helpers
def test_divergence_is_eq6_symmetric_and_zero_on_identical():
    p = torch.tensor([0.7, 0.2, 0.1])
    q = torch.tensor([0.1, 0.3, 0.6])
    assert divergence(p, p) == 0.0
    assert divergence(p, q) == divergence(q, p) > 0
    pd, qd = p.double(), q.double()
    kl = lambda a, b: float((a * (a / b).log()).sum())  # noqa: E731
    assert math.isclose(divergence(p, q), 0.5 * kl(pd, qd) + 0.5 * kl(qd, pd), rel_tol=1e-9)
    # finite for a zero probability (ε in the logs)
    assert math.isfinite(divergence(torch.tensor([1.0, 0.0]), torch.tensor([0.5, 0.5])))


def test_decision_rules():
    assert client_dropout([0.0, 0.1, 0.05], 0.1)  # all ≤ th_I (Alg. 2 line 10)
    assert not client_dropout([0.0, 0.1001, 0.05], 0.1)  # one above
    assert not client_dropout([], 0.1)  # nobody to copy
    assert similar([0.0, 0.1, 0.2], 0.1) == [True, False, False]  # strict < (line 15)


def test_options_are_checked():
    with pytest.raises(ConfigError, match="algorithm.threshold"):
        Simulation(Config.from_dict(cfg_dict(threshold=-1.0)))
    with pytest.raises(ConfigError, match="algorithm.mu"):
        Simulation(Config.from_dict(cfg_dict(mu=-0.5)))


# ----------------------------------------------------------------- communicate, by hand
def distinct_sim(**options):
    """4 clients with distinct models; only client 0 has a queue, Q_0 = {1, 2, 3}."""
    sim = Simulation(Config.from_dict(cfg_dict(**options)))
    gen = torch.Generator().manual_seed(0)
    for c in range(4):
        state = sim.store.client_state(c)
        sim.store.set_personal(
            c, {k: v + torch.randn(v.shape, generator=gen) for k, v in state.items()}
        )
    sim.exchange = Exchange(4)
    adj = np.zeros((4, 4), dtype=bool)
    adj[[1, 2, 3], 0] = True  # j sends to 0
    return sim, Graph(adj)


def set_units(sim, rows):
    """Give the clients chosen unit representations I (padded with zeros to all classes)."""
    unit = torch.tensor(rows, dtype=torch.float32)
    sim.algorithm.unit = torch.nn.functional.pad(unit, (0, sim.data.num_classes - len(rows[0])))


A = [0.5, 0.5, 0.0]
B = [0.1, 0.1, 0.8]


def run_comm(sim, graph):
    before = [dict(s) for s in sim.algorithm.states()]
    sim.algorithm.communicate(1, graph)
    return before, sim.algorithm.states()


def parts(sim):
    algo = sim.algorithm
    return algo.g_keys, algo.h_keys


def sizes(sim, members):
    return [sim.data.clients[u].num_train for u in members]


def expected_bytes(sim, state, n_queue, g_from, h_from, full=False):
    algo = sim.algorithm
    rep = 4 * (1 + sim.data.num_classes + (algo.aux.shape[1] if algo.aux_term else 0))
    g, h = parts(sim)
    if full:
        return n_queue * rep + keys_bytes(state, list(state))
    return n_queue * rep + g_from * keys_bytes(state, g) + h_from * keys_bytes(state, h)


def test_dropout_copies_one_neighbour_when_all_within_threshold():
    sim, graph = distinct_sim(threshold=0.1)
    set_units(sim, [A, A, A, A])  # every Div = 0 ≤ th_I
    before, after = run_comm(sim, graph)
    pick = sim.algorithm.decisions[0].copied_from
    assert pick in (1, 2, 3)
    assert all(torch.equal(after[0][k], before[pick][k]) for k in before[0])
    assert sim.exchange.received[0] == expected_bytes(sim, before[0], 3, 0, 0, full=True)
    assert sim.exchange.messages == 3 + 1
    # clients with an empty queue keep their model and receive nothing
    for c in (1, 2, 3):
        assert all(torch.equal(after[c][k], before[c][k]) for k in before[c])
        assert sim.exchange.received[c] == 0


def test_dropout_uses_le_and_head_sharing_uses_lt():
    sim, graph = distinct_sim()
    set_units(sim, [A, B, B, B])
    d = divergence(sim.algorithm.unit[0], sim.algorithm.unit[1])
    sim.algorithm.options.threshold = d  # every Div == th_I: dropout fires
    run_comm(sim, graph)
    assert sim.algorithm.decisions[0].copied_from is not None
    sim, graph = distinct_sim(dropout=False)
    set_units(sim, [A, B, B, B])
    sim.algorithm.options.threshold = d  # ... but no neighbour is "similar" (strict <)
    run_comm(sim, graph)
    assert sim.algorithm.decisions[0].head_from == []


def test_one_dissimilar_neighbour_blocks_dropout_and_its_head():
    sim, graph = distinct_sim(threshold=0.1)
    set_units(sim, [A, A, B, A])  # client 2 dissimilar
    before, after = run_comm(sim, graph)
    dec = sim.algorithm.decisions[0]
    assert dec.copied_from is None and dec.head_from == [1, 3]
    g, h = parts(sim)
    g_avg = weighted_average([before[u] for u in (0, 1, 2, 3)], sizes(sim, (0, 1, 2, 3)), g)
    h_avg = weighted_average([before[u] for u in (0, 1, 3)], sizes(sim, (0, 1, 3)), h)
    assert all(torch.equal(after[0][k], g_avg[k]) for k in g)
    assert all(torch.equal(after[0][k], h_avg[k]) for k in h)
    assert sim.exchange.received[0] == expected_bytes(sim, before[0], 3, 3, 2)
    assert sim.exchange.messages == 3 + 3  # representations, then g (+h) per neighbour


def test_no_similar_neighbour_keeps_head_bit_identical():
    sim, graph = distinct_sim(threshold=0.1)
    set_units(sim, [A, B, B, B])
    before, after = run_comm(sim, graph)
    g, h = parts(sim)
    assert sim.algorithm.decisions[0].head_from == []
    assert all(torch.equal(after[0][k], before[0][k]) for k in h)  # bit-identical
    assert all(not torch.equal(after[0][k], before[0][k]) for k in g)
    assert sim.exchange.received[0] == expected_bytes(sim, before[0], 3, 3, 0)


def test_without_client_dropout_never_copies():
    sim, graph = distinct_sim(threshold=0.1, dropout=False)
    set_units(sim, [A, A, A, A])
    before, after = run_comm(sim, graph)
    dec = sim.algorithm.decisions[0]
    assert dec.copied_from is None and dec.head_from == [1, 2, 3]
    full = weighted_average(before, sizes(sim, range(4)), list(before[0]))
    assert all(torch.equal(after[0][k], full[k]) for k in full)
    assert sim.exchange.received[0] == expected_bytes(sim, before[0], 3, 3, 3)


def test_without_layerwise_personalization_averages_head_over_all():
    sim, graph = distinct_sim(threshold=0.1, layerwise=False)
    set_units(sim, [A, A, B, A])
    before, after = run_comm(sim, graph)
    assert sim.algorithm.decisions[0].head_from == [1, 2, 3]
    full = weighted_average(before, sizes(sim, range(4)), list(before[0]))
    assert all(torch.equal(after[0][k], full[k]) for k in full)
    assert sim.algorithm.recipe(1, 0).phases[0].loss_terms == ()  # no μ-term without LP
    assert sim.exchange.received[0] == expected_bytes(sim, before[0], 3, 3, 3)


# -------------------------------------------------------------------------- full rounds
def test_round0_all_identical_then_representations_follow_training():
    sim = Simulation(Config.from_dict(cfg_dict()))
    algo = sim.algorithm
    assert torch.equal(algo.unit, algo.unit[:1].expand_as(algo.unit))  # common w^0
    row = sim.run_round(0)
    assert all(d.copied_from is not None for d in algo.decisions.values())  # all Div = 0
    total = 0
    for i, d in algo.decisions.items():
        assert d.divs == [0.0] * len(d.queue)
        state = sim.store.client_state(i)
        total += expected_bytes(sim, state, len(d.queue), 0, 0, full=True)
        unit, aux = algo.representations(state)  # lines 24-25: from the trained model
        assert torch.equal(algo.unit[i], unit[0]) and torch.equal(algo.aux[i], aux[0])
    assert row["down_bytes"] == total
    # round 1: bytes follow each client's decision
    row = sim.run_round(1)
    state = sim.store.client_state(0)
    total = sum(
        expected_bytes(
            sim,
            state,
            len(d.queue),
            len(d.queue),
            len(d.head_from),
            full=d.copied_from is not None,
        )
        for d in algo.decisions.values()
    )
    assert row["down_bytes"] == row["up_bytes"] == total


def test_aux_term_is_eq12_on_g_only_towards_the_stale_mean():
    sim = Simulation(Config.from_dict(cfg_dict(mu=0.3)))
    sim.run_round(0)
    algo, model = sim.algorithm, sim.model
    stale = algo.aux.clone()
    graph = sim.topology.graph(1)
    sim.exchange = Exchange(4)
    algo.communicate(1, graph)
    queue = graph.in_neighbors(2)
    assert torch.allclose(algo.targets[2], stale[[2, *queue]].mean(0))
    (term,) = algo.recipe(1, 2).phases[0].loss_terms
    assert term.weight == 0.3
    state = sim.store.client_state(2)
    params = {k: v.detach().requires_grad_(True) for k, v in state.items()}
    value = term.fn(params)
    live = algo.representations(state)[1][0]
    assert torch.allclose(value, ((live - algo.targets[2]) ** 2).sum())
    grads = torch.autograd.grad(value, list(params.values()), allow_unused=True)
    by_key = dict(zip(params, grads, strict=True))
    assert all(by_key[k] is None for k in algo.h_keys)
    assert any(by_key[k] is not None and by_key[k].abs().sum() > 0 for k in algo.g_keys)
    assert model.training  # the eval-mode forward of X_unit restored the mode


def test_round_metrics_count_dropouts_similar_peers_and_div_percentiles():
    sim, graph = distinct_sim(threshold=0.1)
    set_units(sim, [A, A, B, B])  # Div(0, 1) = 0 < th_I; Div(0, 2) = Div(0, 3) > th_I
    run_comm(sim, graph)
    divs = sim.algorithm.decisions[0].divs
    row = sim.algorithm.round_metrics()
    assert row["dropout_clients"] == 0
    assert row["similar_neighbors_mean"] == 1 / 4  # client 0 shares h with 1; 1-3 have no queue
    assert row["div_p50"] == sorted(divs)[1] > 0.1
    assert row["div_p10"] == pytest.approx(0.2 * sorted(divs)[1])  # between 0 and the median
    assert row["div_p90"] == pytest.approx(sorted(divs)[1] + 0.8 * (max(divs) - sorted(divs)[1]))


def test_link_failures_run_without_nan():
    cfg = cfg_dict(rounds=3, num_clients=6)
    cfg["topology"] = {"neighbors": 2, "drop_prob": 0.3}
    res = fedpart.run(cfg, write=False)
    for row in res.metrics:
        assert math.isfinite(row["train_loss"]) and math.isfinite(row["accuracy"])
    assert all(torch.isfinite(v).all() for v in res.simulation.algorithm.unit)


def test_resume_is_bit_identical(tmp_path):
    tensors = assert_resume_bit_identical(cfg_dict(rounds=4, num_clients=5), tmp_path)
    assert {"extra/unit", "extra/aux"} <= set(tensors)


# ---------------------------------------------------------------- the toy experiment (§3.2)
def test_toy_unit_representation_separates_label_distributions():
    """Clients 1, 2 hold classes {0, 1}, client 3 holds {2, 3}; after local training
    Div(1, 2) is far below Div(1, 3) and Div(2, 3) (paper: 0.02 vs 0.61)."""
    bundle = load_dataset("digits", None, download=False)
    y = bundle.train_y.numpy()
    rng = np.random.default_rng(0)
    a = rng.permutation(np.flatnonzero(y <= 1))
    b = rng.permutation(np.flatnonzero((y == 2) | (y == 3)))
    halves = [a[: len(a) // 2], a[len(a) // 2 :], b]

    def client(idx):
        cut = int(0.8 * len(idx))
        return ClientData(
            torch.as_tensor(np.sort(idx[:cut])),
            torch.tensor([], dtype=torch.long),
            torch.as_tensor(np.sort(idx[cut:])),
        )

    data = FederatedData(
        bundle, bundle.train_x, bundle.train_y, [client(i) for i in halves], None, "none"
    )
    cfg = cfg_dict(num_clients=3)
    cfg["model"] = {"name": "mlp", "hidden": [32]}
    cfg["topology"] = {"neighbors": 2}
    cfg["federation"] = {"rounds": 1, "batch_size": 16, "lr": 0.05}
    sim = Simulation(Config.from_dict(cfg), data=data)
    algo = sim.algorithm
    recipe = Recipe(phases=(Phase(epochs=5),))
    reps = []
    for c in range(3):
        state = sim.train(0, c, sim.store.client_state(c), recipe=recipe).state
        sim.store.set_personal(c, state)
        reps.append(algo.representations(state)[0][0])
    acc = sim.evaluate()["accuracy"]
    assert acc > 0.9  # as the paper's toy models (> 90% local validation accuracy)
    d12, d13, d23 = (
        divergence(reps[0], reps[1]),
        divergence(reps[0], reps[2]),
        divergence(reps[1], reps[2]),
    )
    assert d12 < 0.25 * min(d13, d23)


def test_g_blocks_moves_the_split():
    sim = Simulation(Config.from_dict(cfg_dict(g_blocks=1)))  # g = conv1, h = conv2, fc1, fc2
    algo = sim.algorithm
    assert {sim.model.block_of(k) for k in algo.g_keys} == {"conv1"}
    assert {sim.model.block_of(k) for k in algo.h_keys} == {"conv2", "fc1", "fc2"}
    assert algo.aux.shape[1] == 32 * 4 * 4  # conv1's pooled 4x4 map of the 8x8 X_unit
    sim.run_round(0)
    assert Simulation(Config.from_dict(cfg_dict())).algorithm.aux.shape[1] == 64 * 2 * 2
    with pytest.raises(ConfigError, match="algorithm.g_blocks"):
        Simulation(Config.from_dict(cfg_dict(g_blocks=4)))


def test_divergences_are_read_from_the_device_once_per_round():
    """Eq. (6) for every (client, neighbour) pair of the round is computed on the device and read
    back at once (on a GPU each read waits for every queued kernel), not once per pair."""
    from fedpart.bench.dispatch import DispatchCounter

    sim, _ = distinct_sim(threshold=0.1)
    set_units(sim, [A, B, A, B])
    graph = Graph(~np.eye(4, dtype=bool))  # every client pulls the other three: 12 pairs
    with DispatchCounter("cpu") as counter:
        sim.algorithm.communicate(1, graph)
    assert counter.total_syncs == 1, counter.summary()
