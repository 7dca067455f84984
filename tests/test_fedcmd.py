"""Defining behaviours of FedCMD and of the engine pieces it rests on (observers, per-client
server aggregates, local BatchNorm statistics, FL-bench's participants evaluation)."""

import math

import numpy as np
import pytest
import torch
from scipy.stats import norm
from torch.func import functional_call

import fedpart
from fedpart.algorithms.fedcmd import (
    batch_vote,
    gaussian,
    majority,
    similarity_statistics,
    tally,
    transfer_scores,
    vote,
    w2_gaussian,
)
from fedpart.config import Config
from fedpart.engine.layer_selection import gaussians
from fedpart.engine.mixing import normalize_rows, tensor_bytes
from fedpart.engine.rounds import sample_clients
from fedpart.engine.simulation import Simulation
from fedpart.errors import ConfigError
from fedpart.models.base import batchnorm_keys
from resume_check import assert_resume_bit_identical


def base(rounds=5, **options):
    return {
        "seed": 2,
        "dataset": {"name": "digits"},
        "partition": {"kind": "dirichlet", "num_clients": 6, "alpha": 0.5, "min_size": 30},
        "model": {"name": "fedavgcnn", "padding": 2, "width": 4, "norm": "bn"},
        "algorithm": {"name": "fedcmd", "selection_rounds": 2, **options},
        "federation": {
            "rounds": rounds,
            "join_ratio": 0.5,
            "batch_size": 16,
            "lr": 0.05,
            "batchnorm_stats": "local",
        },
        "evaluation": {"participants": "both"},
    }


def sim_for(rounds=5, **options):
    return Simulation(Config.from_dict(base(rounds, **options)))


# ----------------------------------------------------------------------- the transfer score
def test_closed_form_w2_equals_numerical_w2_between_samples():
    n = 200_000
    q = norm.ppf((np.arange(n) + 0.5) / n)  # quantiles: the 1-D optimal coupling is sorted order
    for (m1, s1), (m2, s2) in [((0.2, 0.1), (0.5, 0.3)), ((0.7, 0.05), (0.1, 0.2))]:
        a, b = m1 + s1 * q, m2 + s2 * q
        numerical = math.sqrt(np.mean((np.sort(a) - np.sort(b)) ** 2))
        assert w2_gaussian((m1, s1), (m2, s2), "closed_form") == pytest.approx(numerical, rel=1e-3)
        assert w2_gaussian((m1, s1), (m2, s2), "mean_only") == pytest.approx(abs(m1 - m2))


def test_gaussian_fit_is_min_max_normalised_and_constant_tensors_score_zero():
    t = torch.tensor([2.0, 4.0, 6.0])
    mean, std = gaussian(t)
    assert mean == pytest.approx(0.5) and std == pytest.approx(0.5)
    assert gaussian(t * 10 + 3) == pytest.approx((mean, std))  # affine-invariant
    assert gaussian(torch.ones(5)) is None
    assert w2_gaussian(None, (0.1, 0.2), "closed_form") == 0.0


@pytest.mark.parametrize("fit", ["minmax", "raw"])
def test_a_batch_reads_its_fits_from_the_device_once(fit):
    """Eq. (6)'s Gaussians of x, y and every chain output are computed where the tensors are and
    read back at once (on a GPU each read waits for the queued kernels): one read for the whole
    batch, with the values of the per-tensor reads (three each) it replaces."""
    from fedpart.bench.dispatch import DispatchCounter

    g = torch.Generator().manual_seed(1)
    x, y = torch.rand(16, 10, generator=g), torch.randint(0, 10, (16,), generator=g)
    chain = [torch.rand(16, 8, generator=g) ** p for p in (1, 2, 3)] + [torch.ones(16, 8)]
    with DispatchCounter("cpu") as counter:
        scores = transfer_scores(x, y, chain, w2="closed_form", score="paper", fit=fit)
    assert counter.total_syncs == 1
    one_by_one = []
    for t in (x, y, *chain):  # the former per-tensor reads, as Python floats
        t = t.double().flatten()
        if fit == "raw":
            one_by_one.append((float(t.mean()), float(t.std())))
            continue
        lo, hi = t.min(), t.max()
        u = (t - lo) / (hi - lo)
        one_by_one.append((float(u.mean()), float(u.std())) if hi > lo else None)
    assert gaussians([x, y, *chain], fit) == one_by_one  # the same floats, bit for bit
    assert len(scores) == len(chain) - 1
    assert gaussians([torch.ones(1)], fit) == [None]


def test_eq6_paper_and_code_forms():
    g = torch.Generator().manual_seed(0)
    x, y = torch.rand(32, 10, generator=g), torch.randint(0, 10, (32,), generator=g)
    chain = [torch.rand(32, 8, generator=g) ** p for p in (1, 2, 3)]
    zx, zy = gaussian(x), gaussian(y)
    z = [gaussian(o) for o in chain]
    w = lambda a, b: w2_gaussian(a, b, "closed_form")  # noqa: E731
    paper = transfer_scores(x, y, chain, w2="closed_form", score="paper")
    code = transfer_scores(x, y, chain, w2="closed_form", score="code")
    for l in (1, 2):
        a_y, a_x, b_y, b_x = w(z[l], zy), w(z[l], zx), w(z[l - 1], zy), w(z[l - 1], zx)
        assert paper[l - 1] == pytest.approx(abs((a_y - a_x) - (b_y - b_x)))
        assert code[l - 1] == pytest.approx(abs(abs(a_y - b_y) - abs(a_x - b_x)))


def test_votes_and_majorities():
    assert vote([0.3, 0.1, 0.1], ("fc1", "fc2", "classifier"), "first") == 1
    assert vote([0.1, 0.1, 0.3], ("fc1", "fc2", "classifier"), "first") == 0
    assert vote([0.1, 0.1, 0.3], ("fc1", "fc2", "classifier"), "prefer_fc2") == 1
    assert majority(["fc2", "fc1", "fc2"], ["fc1", "fc2"]) == "fc2"
    assert majority(["fc2", "fc1"], ["fc1", "fc2"]) == "fc1"  # tie: earliest candidate


def test_the_fit_decides_whether_an_affine_layer_moves_the_distribution():
    # o1 = 10·o0 + 3: min–max scaling makes its Gaussian o0's (fc1 moves nothing, s ≈ 0, so fc1
    # wins); fitted to the raw values fc1 shifts the mean by about 8 and fc2, a small nonlinear
    # change of o1, wins instead
    g = torch.Generator().manual_seed(0)
    x, y = torch.rand(8, 4, generator=g), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    o0 = torch.rand(8, 5, generator=g)
    o1 = 10 * o0 + 3
    outputs = {"conv2": o0, "fc1": o1, "fc2": o1 + 0.05 * o1**2}
    kw = {"chain": ("conv2", "fc1", "fc2"), "w2": "closed_form", "score": "paper"}
    kw["tie_break"] = "first"
    assert transfer_scores(x, y, [o0, o1], w2="closed_form", score="paper")[0] < 1e-7
    assert batch_vote(x, y, outputs, **kw) == (0, False)  # minmax (default): fc1
    assert batch_vote(x, y, outputs, fit="raw", **kw) == (1, False)  # raw: fc2
    assert gaussian(torch.tensor([2.0, 4.0, 6.0]), "raw") == pytest.approx((4.0, 2.0))
    assert gaussian(torch.tensor([3.0]), "raw") is None  # one value: no std (the code's NaN)
    assert gaussian(torch.ones(4), "raw") == (1.0, 0.0)  # a constant is a Dirac, not undefined


def test_one_hot_labels_do_not_depend_on_how_the_classes_are_numbered():
    g = torch.Generator().manual_seed(0)
    x, o0 = torch.rand(8, 4, generator=g), torch.rand(8, 5, generator=g)
    chain = [o0, 2 * o0, o0**2]
    y, renamed = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1]), torch.tensor([2, 0, 1, 2, 0, 1, 2, 0])
    onehot = torch.nn.functional.one_hot
    for fit in ("minmax", "raw"):
        a = transfer_scores(x, onehot(y, 3), chain, w2="closed_form", score="paper", fit=fit)
        b = transfer_scores(x, onehot(renamed, 3), chain, w2="closed_form", score="paper", fit=fit)
        assert a == b
    a = transfer_scores(x, y, chain, w2="closed_form", score="paper", fit="raw")
    b = transfer_scores(x, renamed, chain, w2="closed_form", score="paper", fit="raw")
    assert a != b  # the class-index vector: another numbering, another score


def test_degenerate_batches_vote_or_abstain():
    g = torch.Generator().manual_seed(0)
    outputs = {b: torch.rand(4, 3, generator=g) for b in ("conv2", "fc1", "fc2")}
    x = torch.rand(4, 2, generator=g)
    kw = {"chain": ("conv2", "fc1", "fc2"), "w2": "closed_form", "score": "paper"}
    kw["tie_break"] = "first"
    one_class = torch.zeros(4, dtype=torch.long)
    assert batch_vote(x, one_class, outputs, **kw)[0] in (0, 1)  # scored without z^y (W2 = 0)
    assert batch_vote(x, one_class, outputs, degenerate="skip", **kw) == (-1, False)
    assert batch_vote(x, one_class, outputs, degenerate="skip_single", **kw)[0] in (0, 1)
    one = {b: o[:1] for b, o in outputs.items()}
    assert batch_vote(x[:1], one_class[:1], one, degenerate="skip", **kw) == (-1, False)
    assert batch_vote(x[:1], one_class[:1], one, degenerate="skip_single", **kw) == (-1, False)
    # every fit undefined (one sample, raw): every s_l is 0, a tie the batch rule breaks
    assert batch_vote(
        x[:1, :1], one_class[:1], {b: o[:1, :1] for b, o in outputs.items()}, fit="raw", **kw
    ) == (0, True)


def test_tie_rules_of_a_majority():
    order = ["fc1", "fc2", "classifier"]
    votes = ["classifier", "fc2", "fc2", "classifier"]  # fc2 and classifier tied, 2-2
    assert tally(votes, order, "first") == ("fc2", ["fc2", "classifier"])
    assert tally(votes, order, "first_seen")[0] == "classifier"
    assert tally(["fc1", "fc2"], order, "prefer_fc2")[0] == "fc2"
    assert tally(["fc1", "fc2"], order, "first")[0] == "fc1"
    assert tally(["fc1", "fc1", "fc2"], order, "prefer_fc2") == ("fc1", ["fc1"])  # no tie


# ------------------------------------------------------------------------------ the phases
def test_layer_is_common_and_fixed_after_selection_and_never_leaves_its_client():
    sim = sim_for(rounds=5)
    store = sim.store
    history = []
    for rnd in range(5):
        global_before = {k: v.clone() for k, v in store.global_state.items()}
        row = sim.run_round(rnd)
        row.update(sim.algorithm.round_metrics())
        history.append(row["fedcmd_layer"])
        layer = sim.algorithm.layer
        if rnd < 1:
            assert layer is None and "fedcmd_votes" in row
            assert sum(row["fedcmd_votes"].values()) == 3  # one vote per participant
            continue
        assert layer is not None  # fixed at the end of the last selection round (round 1)
        if rnd == 1:
            continue
        keys = [k for k in store.keys if sim.model.block_of(k) == layer]
        # l* is personal for every client, the server never changes it, never tailors it
        assert set(keys) <= set(store.personal_keys)
        assert all(torch.equal(store.global_state[k], global_before[k]) for k in keys)
        assert all(not (set(keys) & set(t)) for t in store.tailored.values())
        # download: everything but l* and the local BatchNorm statistics
        personal = set(store.personal_keys)
        expected = tensor_bytes({k: v for k, v in store.global_state.items() if k not in personal})
        assert row["down_bytes"] == expected * 3
        # layers before l* are the same on every client
        pre = [k for k in store.keys if k in sim.algorithm._keys(sim.algorithm.pre_blocks())]
        pre = [k for k in pre if k not in personal]
        states = [store.client_state(c) for c in range(6)]
        assert pre and all(torch.equal(s[k], states[0][k]) for s in states for k in pre)
    assert history[0] is None and len(set(history[1:])) == 1


def test_the_reading_of_the_vote_never_steers_the_selection_phase():
    # phase 1 is FedAvg whatever the vote's reading: the models after the K_p = 2 selection
    # rounds are the same bit for bit, so a full run's number depends on the reading only
    # through the layer it keeps
    readings = [
        {},
        {"fit": "raw", "labels": "onehot", "degenerate": "skip"},
        {"tie_break": "prefer_fc2", "round_tie": "first_seen", "granularity": "post_train"},
    ]
    states = []
    for reading in readings:
        sim = sim_for(rounds=2, **reading)
        sim.run()
        states.append({c: sim.store.client_state(c) for c in range(6)})
    for other in states[1:]:
        for c, state in states[0].items():
            assert all(torch.equal(state[k], other[c][k]) for k in state)


def test_personal_layer_values_are_the_clients_own_training():
    sim = sim_for(rounds=4, personal_layer="fc1")
    sim.run_round(0)
    rnd = 1
    clients = sample_clients(sim.cfg.seed, rnd, 6, 0.5)
    starts = {c: sim.algorithm.start_state(rnd, c) for c in clients}
    results = {c: sim.train(rnd, c, starts[c]) for c in clients}
    sim.run_round(rnd)  # the same training (counter-based seeds), then aggregation
    for c in clients:
        for k in ("fc1.weight", "fc1.bias"):
            assert torch.equal(sim.store.personal[c][k], results[c].state[k])


def test_similarity_matrix_and_per_client_weights():
    sim = sim_for(rounds=5, personal_layer="fc1")  # fc2 (the classifier) is after it
    sim.run()
    phi = sim.algorithm.mixer.matrix
    assert torch.equal(phi, phi.T) and torch.all(phi >= 0) and torch.all(phi.diagonal() == 1)
    assert (phi - torch.eye(6)).abs().sum() > 0  # some pair co-participated
    w = normalize_rows(phi, "linear")
    assert torch.all(w >= 0) and torch.allclose(w.sum(1), torch.ones(6, dtype=torch.float64))
    s = normalize_rows(phi, "softmax")
    assert torch.allclose(s.sum(1), torch.ones(6, dtype=torch.float64))


def test_layers_after_l_star_are_per_client_and_equal_under_the_ablation():
    for weighted in (True, False):
        sim = sim_for(rounds=6, personal_layer="fc1", weighted_aggregation=weighted)
        sim.run()
        post = ["fc2.weight", "fc2.bias"]
        states = [sim.store.client_state(c) for c in range(6)]
        equal = all(torch.equal(s[k], states[0][k]) for s in states for k in post)
        assert equal is (not weighted)


def test_code_variant_runs_and_switches_every_point():
    opts = Config.from_dict(base(variant="code")).algorithm.options
    from fedpart.algorithms.fedcmd import FedCMD

    o = FedCMD.parse_options(opts)
    assert [o.switch(s) for s in ("w2", "score", "similarity", "phi_norm", "phase1_weights")] == [
        "mean_only",
        "code",
        "weight_deltas",
        "softmax",
        "all_clients_uniform",
    ]
    res = fedpart.run(base(rounds=4, variant="code"), write=False)
    assert res.summary["fedcmd"]["layer"] in ("fc1", "fc2")
    res = fedpart.run(base(rounds=3, granularity="post_train"), write=False)
    assert res.summary["fedcmd"]["layer"] in ("fc1", "fc2")


@pytest.mark.parametrize("variant", ["paper", "code"])
def test_resume_is_bit_identical(tmp_path, variant):
    # stopped at round 2 of 4, in the middle of a 3-round selection phase
    cfg = base(rounds=4, variant=variant)
    cfg["algorithm"]["selection_rounds"] = 3
    tensors = assert_resume_bit_identical(cfg, tmp_path)
    assert "extra/phi" in tensors


def test_bad_options_are_one_line_errors():
    with pytest.raises(ConfigError, match="algorithm.variant"):
        fedpart.run(base(variant="nope"), write=False)
    with pytest.raises(ConfigError, match="algorithm.candidates"):
        fedpart.run(base(candidates=["fc2", "fc1"]), write=False)
    with pytest.raises(ConfigError, match="algorithm.phi_norm"):
        fedpart.run(base(phi_norm="cubic"), write=False)
    with pytest.raises(ConfigError, match="algorithm.personal_layer"):
        fedpart.run(base(personal_layer="conv9"), write=False)
    with pytest.raises(ConfigError, match="algorithm.round_tie"):
        fedpart.run(base(round_tie="last"), write=False)


# --------------------------------------------------------------------- engine pieces
def test_observer_reports_every_batch_and_leaves_no_hooks():
    sim = sim_for(rounds=3)
    recipe = sim.algorithm.recipe(0, 0)
    assert recipe.observe is not None
    result = sim.train(0, 0, sim.algorithm.start_state(0, 0))
    assert len(result.observations) == result.steps
    assert all(v in (0, 1) and isinstance(t, bool) for v, t in result.observations)
    assert not any(m._forward_hooks for m in sim.model.modules())
    plain = sim.train(0, 0, sim.algorithm.start_state(0, 0), recipe=fedpart.engine.recipe.Recipe())
    assert plain.observations == []
    for k in plain.state:  # observing changes nothing in the training itself
        assert torch.equal(plain.state[k], result.state[k])


def test_local_batchnorm_statistics_are_never_averaged():
    cfg = base(rounds=2)
    cfg["algorithm"] = {"name": "fedavg"}
    res = fedpart.run(cfg, write=False)
    store = res.simulation.store
    stats = batchnorm_keys(res.simulation.model)
    assert stats and set(stats) <= set(store.personal_keys)
    trained = sorted(store.personal)
    a, b = store.client_state(trained[0]), store.client_state(trained[1])
    assert not torch.equal(a["conv1.norm.running_mean"], b["conv1.norm.running_mean"])
    assert torch.equal(a["conv1.norm.weight"], b["conv1.norm.weight"])  # affine: averaged


def test_participants_before_is_the_received_model_on_their_test_splits():
    cfg = base(rounds=1)
    cfg["algorithm"] = {"name": "fedavg"}
    sim = Simulation(Config.from_dict(cfg))
    model = sim.model
    model.eval()
    clients = sample_clients(sim.cfg.seed, 0, 6, 0.5)
    correct = total = 0
    with torch.no_grad():
        for c in clients:
            x, y = sim.data.batch(sim.data.clients[c].test)
            pred = functional_call(model, sim.store.client_state(c), (x,)).argmax(1)
            correct += int((pred == y).sum())
            total += len(y)
    result = sim.run()
    assert result.metrics[0]["participants_accuracy_before"] == pytest.approx(correct / total)
    assert "participants_accuracy_after" in result.metrics[0]
    assert "participants_accuracy_before" in result.summary["protocols"]


def test_methods_needing_batchnorm_get_it_on_the_quick_start_model():
    res = fedpart.run(
        "configs/quickstart.yaml", ["algorithm.name=fedcmd", "federation.rounds=2"], write=False
    )
    assert res.summary["fedcmd"]["layer"] in ("fc1", "fc2")


def test_similarity_statistics_measure_the_distance_from_plain_averaging():
    eye = torch.eye(4, dtype=torch.float64)
    assert similarity_statistics(eye, "linear") == {"pairs": 0}  # no pair measured yet
    equal = torch.ones(4, 4, dtype=torch.float64)  # every client alike: Eq. 7 is a plain mean
    stats = similarity_statistics(equal, "linear")
    assert stats["pairs"] == 6 and stats["tv_from_uniform_max"] == pytest.approx(0.0)
    phi = eye.clone()
    phi[0, 1] = phi[1, 0] = 1.0  # client 0 and 1 alike, 2 and 3 unlike anyone
    phi[0, 2] = phi[2, 0] = 0.25
    stats = similarity_statistics(phi, "linear")
    # row 0 mixes clients 0, 1, 2 by 1, 1, 0.25 (TV from uniform 2/9); row 2 mixes clients 0
    # and 2 by 0.25 and 1, i.e. 0.2 and 0.8: TV 0.3, the largest
    assert stats["pairs"] == 2 and stats["phi_min"] == 0.25 and stats["phi_max"] == 1.0
    assert stats["tv_from_uniform_max"] == pytest.approx(0.3, abs=1e-12)
    soft = similarity_statistics(phi, "softmax")  # over all 4 clients, zeros included
    assert 0 < soft["tv_from_uniform_max"] < 0.5
