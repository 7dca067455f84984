"""Dis-PFL: ERK masks, masked training, aggregation over holders, prune/regrow, bytes, resume."""

import math

import pytest
import torch

import fedpart
from fedpart.algorithms.dispfl import drop_fraction, erk_densities, next_mask
from fedpart.config import Config
from fedpart.engine.decentralized import Exchange
from fedpart.engine.simulation import Simulation
from fedpart.errors import ConfigError
from resume_check import assert_resume_bit_identical


def _cfg(rounds=2, model=None, topology=None, **options):
    return {
        "seed": 3,
        "dataset": {"name": "digits"},
        "partition": {"kind": "dirichlet", "num_clients": 6, "alpha": 0.5, "min_size": 20},
        "model": model or {"name": "mlp", "hidden": [64, 32]},
        "algorithm": {"name": "dispfl", **options},
        "topology": {"neighbors": 2, **(topology or {})},
        "federation": {"rounds": rounds, "batch_size": 16, "lr": 0.1, "momentum": 0.5},
    }


def _sim(**kwargs):
    return Simulation(Config.from_dict(_cfg(**kwargs)))


def _off_mask_is_zero(state, masks):
    return all(bool((state[k][~m] == 0).all()) for k, m in masks.items())


# ------------------------------------------------------------------------------ masks at start
def test_erk_layer_densities_and_initial_masks():
    sim = _sim(model={"name": "fedavgcnn", "padding": 2})
    algo = sim.algorithm
    init = sim.store.global_state
    assert algo.prunable == ["conv1.weight", "conv2.weight", "fc1.weight", "fc2.weight"]
    numel = {k: init[k].numel() for k in algo.prunable}
    raw = {k: sum(init[k].shape) / numel[k] for k in algo.prunable}
    dens = algo.densities
    # ERK: one ε for every sparse layer, layers that would exceed 1 are dense, total = 0.5
    sparse = [k for k in dens if dens[k] < 1]
    dense = [k for k in dens if dens[k] == 1]
    assert sparse == ["conv2.weight", "fc1.weight"] and dense == ["conv1.weight", "fc2.weight"]
    eps = {dens[k] / raw[k] for k in sparse}
    assert max(eps) - min(eps) < 1e-9 * max(eps)
    assert min(raw[k] for k in dense) > max(raw[k] for k in sparse)
    total = sum(numel.values())
    assert math.isclose(sum(dens[k] * numel[k] for k in numel), 0.5 * total, rel_tol=1e-12)
    # every client: per-layer counts at the ERK densities, overall density 0.5, w = w0 ⊙ m
    masks = algo.masks
    for c in range(6):
        for k in algo.prunable:
            assert int(masks[c][k].sum()) == round(dens[k] * numel[k])
        active = sum(int(masks[c][k].sum()) for k in algo.prunable)
        assert abs(active / total - 0.5) <= len(numel) / total
        state = sim.store.client_state(c)
        for k in algo.prunable:
            assert torch.equal(state[k], init[k] * masks[c][k])
        assert torch.equal(state["fc1.bias"], init["fc1.bias"])  # biases are dense
    # masks differ across clients (on every sparse layer)
    for a in range(6):
        for b in range(a + 1, 6):
            assert all(not torch.equal(masks[a][k], masks[b][k]) for k in sparse)
    # the uniform distribution gives every layer dense_ratio
    uni = _sim(model={"name": "fedavgcnn", "padding": 2}, distribution="uniform").algorithm
    assert all(int(uni.masks[0][k].sum()) == round(0.5 * numel[k]) for k in uni.prunable)


def test_erk_function_edge_cases():
    shapes = {"a": (10, 20), "b": (3, 3, 8, 16)}
    assert erk_densities(shapes, 1.0) == {"a": 1.0, "b": 1.0}
    flat = erk_densities(shapes, 0.3, power_scale=0.0)  # power 0: uniform
    assert all(math.isclose(d, 0.3) for d in flat.values())


# ------------------------------------------------------------------------- mask search
def test_next_mask_prunes_smallest_and_regrows_largest_gradient():
    mask = torch.tensor([1, 1, 0, 1, 1, 0, 0, 1], dtype=torch.bool)
    weight = torch.tensor([0.5, -0.1, 0.0, 0.3, 2.0, 0.0, 0.0, -0.05])
    score = torch.tensor([9.0, 0.2, 0.7, 9.0, 9.0, -0.9, 0.1, 5.0])
    # ⌈0.4 · 5⌉ = 2: drop 7 (|w| .05) and 1 (.1); regrow 7 (|g| 5) and 5 (.9)
    new = next_mask(mask, weight, 0.4, score)
    assert new.tolist() == [True, False, False, True, True, True, False, True]
    assert int(new.sum()) == int(mask.sum())
    assert torch.equal(next_mask(mask, weight, 0.0, score), mask)
    gen = torch.Generator().manual_seed(0)
    rnd = next_mask(mask, weight, 0.4, None, gen)
    assert int(rnd.sum()) == 5 and rnd[[0, 3, 4]].all()  # the three kept weights stay
    assert math.isclose(drop_fraction(0.5, 0, 10), 0.5)
    assert math.isclose(drop_fraction(0.5, 5, 10), 0.25)
    assert math.isclose(drop_fraction(0.5, 9, 10), 0.25 * (1 + math.cos(0.9 * math.pi)))


@pytest.mark.parametrize("regrow", ["gradient", "random"])
def test_training_keeps_masks_sparse_and_mask_updates_keep_counts(regrow):
    sim = _sim(regrow=regrow)
    algo = sim.algorithm
    before = [dict(m) for m in algo.masks]
    for rnd in range(2):
        sim.run_round(rnd)
        for c in range(6):
            state = sim.store.client_state(c)
            # after training the model lives on the mask it was trained under
            assert algo.support[c] is not algo.masks[c]
            assert _off_mask_is_zero(state, algo.support[c])
            assert any(bool((state[k] != 0).any()) for k in algo.prunable)
            for k in algo.prunable:
                assert int(algo.masks[c][k].sum()) == algo.active[k]
    changed = sum(
        not torch.equal(before[c][k], algo.masks[c][k]) for c in range(6) for k in algo.prunable
    )
    assert changed > 0
    # after the aggregation every model lives on its own (new) mask
    sim.exchange = Exchange(6)
    algo.communicate(2, sim.topology.graph(2))
    for c in range(6):
        assert _off_mask_is_zero(sim.store.client_state(c), algo.masks[c])


def test_static_masks_with_zero_anneal_factor():
    sim = _sim(anneal_factor=0.0)
    before = [dict(m) for m in sim.algorithm.masks]
    sim.run_round(0)
    assert all(
        torch.equal(before[c][k], sim.algorithm.masks[c][k])
        for c in range(6)
        for k in sim.algorithm.prunable
    )


# --------------------------------------------------------------------------- aggregation
def test_aggregation_averages_each_coordinate_over_its_holders():
    sim = _sim()
    algo = sim.algorithm
    sim.run_round(0)  # masks now differ from the supports the models were trained under
    store = sim.store
    for c in range(6):  # client c holds the value c + 1 on its support, everywhere dense
        state = store.client_state(c)
        new = {k: torch.full_like(v, float(c + 1)) for k, v in state.items()}
        new.update({k: new[k] * algo.support[c][k] for k in algo.prunable})
        store.set_personal(c, new)
    graph = sim.topology.graph(1)
    sim.exchange = Exchange(6)
    algo.communicate(1, graph)
    gen = torch.Generator().manual_seed(0)
    for k in range(6):
        senders = [k, *graph.in_neighbors(k)]
        state = store.client_state(k)
        mean = sum(j + 1 for j in senders) / len(senders)
        assert torch.allclose(state["fc1.bias"], torch.full_like(state["fc1.bias"], mean))
        for key in algo.prunable:
            flat = state[key].flatten()
            own = algo.masks[k][key].flatten()
            for p in torch.randint(0, flat.numel(), (40,), generator=gen).tolist():
                holders = [j for j in senders if algo.support[j][key].flatten()[p]]
                expected = sum(j + 1 for j in holders) / len(holders) if holders else 0.0
                assert math.isclose(float(flat[p]), expected * bool(own[p]), rel_tol=1e-6)


# -------------------------------------------------------------------------- communication
@pytest.mark.parametrize("bitmap", [True, False])
def test_bytes_are_the_sparse_payload_per_directed_edge(bitmap):
    sim = _sim(mask_bitmap=bitmap)
    algo = sim.algorithm
    init = sim.store.global_state

    def payload(c):
        total = 0
        for key, value in init.items():
            if key in algo.prunable:
                total += int(algo.support[c][key].sum()) * value.element_size()
                total += math.ceil(value.numel() / 8) if bitmap else 0
            else:
                total += value.numel() * value.element_size()
        return total

    sizes = [payload(c) for c in range(6)]  # round 0 sends the initial sparse models
    row = sim.run_round(0)
    edges = sim.topology.graph(0).edges()
    assert row["messages"] == len(edges) == 6 * 2  # kpull: every client pulls 2 peers
    assert row["up_bytes"] == row["down_bytes"] == sum(sizes[j] for j, _ in edges)
    dense = sum(v.numel() * v.element_size() for v in init.values())
    assert max(sizes) < 0.6 * dense
    assert sim.topology.name == "kpull"


# -------------------------------------------------------------------------------- engine
def test_unreliable_links_run_without_nans():
    res = fedpart.run(_cfg(topology={"neighbors": 3, "drop_prob": 0.3}), write=False)
    assert all(math.isfinite(r["train_loss"]) for r in res.metrics)
    assert res.summary["accuracy"]["final"] > 0.2
    store = res.simulation.store
    assert all(
        bool(torch.isfinite(v).all()) for c in range(6) for v in store.client_state(c).values()
    )


def test_resume_is_bit_identical(tmp_path):
    # the schedule's T pinned, so rounds may be extended on resume
    tensors = assert_resume_bit_identical(_cfg(rounds=4, anneal_rounds=4), tmp_path)
    assert "extra/mask/fc1.weight" in tensors and "extra/support/fc1.weight" in tensors


def test_options_are_checked():
    for bad in ({"dense_ratio": 0.0}, {"anneal_factor": 1.5}, {"regrow": "magic"}):
        with pytest.raises(ConfigError, match="algorithm."):
            _sim(**bad)
