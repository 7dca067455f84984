"""Pa3dFL and pFedHN: decomposed shapes, the hyper-network, the test-model line search, bytes
per width, resume and the quick start."""

import json
from pathlib import Path

import pytest
import torch

from fedpart.algorithms.pa3dfl import block_p_min, factorized_model, line_search
from fedpart.config import Config
from fedpart.engine.evaluation import evaluate_samples
from fedpart.engine.hypernetwork import HyperNetwork, hypernetwork_step
from fedpart.engine.mixing import tensor_bytes
from fedpart.engine.simulation import Simulation
from fedpart.errors import ConfigError
from fedpart.models.cnn import Pa3dFLCNN
from fedpart.models.factorized import FactorizedCNN
from resume_check import assert_resume_bit_identical, run_quickstart_uniform

QUICKSTART = Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml"

# spec §3.5: (|θ_u| shape, |θ_v| numel) per layer, p_min = 1/16
SHAPES = {
    "fmnist": (
        (1, 28, 28),
        {"conv1": ((50, 25), 400), "conv2": ((100, 32), 16384)}
        | {"fc1": ((32, 32), 1605632), "fc2": ((8, 8), 65536)},
    ),
    "cifar100": (
        (3, 32, 32),
        {"conv1": ((100, 25), 1200), "conv2": ((100, 64), 65536)}
        | {"fc1": ((24, 24), 614400), "fc2": ((12, 12), 73728)},
    ),
}


def _cfg(tiny_cfg, algorithm="pa3dfl", rounds=1, options=None, **federation):
    return {
        **tiny_cfg,
        "partition": {**tiny_cfg["partition"], "split": [0.6, 0.2, 0.2]},
        "model": {"name": "fedavgcnn", "padding": 2, "width": 4},
        "algorithm": {"name": algorithm, **(options or {})},
        "federation": {
            **tiny_cfg["federation"],
            "rounds": rounds,
            "momentum": 0.0,
            "capacity": "uniform",
            **federation,
        },
    }


@pytest.mark.parametrize("variant", sorted(SHAPES))
def test_general_and_personal_shapes_are_the_spec_tables(variant):
    shape, layers = SHAPES[variant]
    classes = 10 if variant == "fmnist" else 100
    model = factorized_model(Pa3dFLCNN(classes, shape, variant=variant), shape, 1 / 16, "pa3dfl")
    state = model.state_dict()
    for name, (u_shape, v_numel) in layers.items():
        assert tuple(state[f"general.{name}_u"].shape) == u_shape
        assert state[f"personal.{name}_v"].numel() == v_numel
    assert state["head.weight"].shape == state["local_head.weight"].shape
    assert model.personal_keys() == [f"personal.{n}_v" for n in layers]


def test_block_p_min_is_the_smallest_width_that_tiles_all():
    assert block_p_min([1 / 16, 0.5, 1.0]) == 1 / 16
    assert block_p_min([0.5, 0.75]) == 0.25
    assert block_p_min([1.0, 1.0]) == 1.0


def _hn(num_clients, attention, seed=0):
    targets = {"a.weight": (4, 3), "a.bias": (4,), "b.v": (2, 5)}
    init = {
        k: torch.randn(s, generator=torch.Generator().manual_seed(1)) for k, s in targets.items()
    }
    return HyperNetwork(
        num_clients,
        targets,
        embed_dim=6,
        hidden_dim=8,
        depth=3,
        attention=attention,
        layers={"a.weight": "a", "a.bias": "a", "b.v": "b"},
        init=init,
        seed=seed,
    )


def test_attention_weights_of_each_client_sum_to_one(tiny_cfg):
    hn = _hn(7, attention=True)
    with torch.no_grad():
        hn.log_tau.copy_(torch.tensor([-1.0, 2.0]))  # two different temperatures
    w = hn.attention_weights([0, 3, 6])
    assert w.shape == (2, 3, 7)
    assert torch.allclose(w.sum(-1), torch.ones(2, 3))
    assert (w > 0).all() and not torch.allclose(w[0], w[1])
    # and the method's own hyper-network: one temperature per decomposed layer and the local head
    sim = Simulation(Config.from_dict(_cfg(tiny_cfg)))
    hn = sim.algorithm.hn
    assert hn.layer_names == ["conv1", "conv2", "fc1", "local_head"]
    assert torch.allclose(hn.attention_weights(range(6)).sum(-1), torch.ones(4, 6))


def test_single_client_attention_is_identity_and_the_update_is_pfedhns():
    with_attention, plain = _hn(1, attention=True), _hn(1, attention=False)
    assert torch.equal(with_attention.attention_weights([0]), torch.ones(2, 1, 1))
    a, b = with_attention([0]), plain([0])
    assert all(torch.equal(a[k], b[k]) for k in a)
    trained = [{k: v[0].detach() + 0.1 for k, v in b.items()}]
    for hn in (with_attention, plain):
        hypernetwork_step(hn, [0], trained, None, lr=0.5)
    sa, sb = with_attention.state_dict(), plain.state_dict()
    assert all(torch.allclose(sa[k], sb[k], atol=1e-7) for k in sb)
    # pFedHN's rule written out: φ ← φ − lr · (∂h/∂φ)ᵀ (h − θ)
    ref = _hn(1, attention=False)
    out = ref([0])
    params = [p for p in ref.parameters() if p.requires_grad]
    grads = torch.autograd.grad(
        [out[k] for k in out], params, [out[k] - trained[0][k] for k in out]
    )
    expected = [p.detach() - 0.5 * g for p, g in zip(params, grads, strict=True)]
    got = [p for p in plain.parameters() if p.requires_grad]
    assert all(torch.allclose(e, g, atol=1e-7) for e, g in zip(expected, got, strict=True))


def test_hn_step_reaches_unsampled_embeddings_only_through_attention():
    for attention in (True, False):
        hn = _hn(4, attention=attention)
        before = hn.embeddings.detach().clone()
        out = hn([1])
        trained = [{k: v[0].detach() + 1.0 for k, v in out.items()}]
        hypernetwork_step(hn, [1], trained, None, lr=0.1)
        moved = (hn.embeddings.detach() != before).any(1)
        assert moved[1]
        assert bool(moved[[0, 2, 3]].all()) == attention


def test_line_search_is_at_least_as_good_as_both_ends(tiny_cfg):
    sim = Simulation(Config.from_dict(_cfg(tiny_cfg)))
    algo = sim.algorithm
    algo.download_keys(0)
    client = max(range(6), key=lambda c: sim.data.clients[c].val.numel())
    received = algo.start_state(0, client)
    trained = sim.train(0, client, received).state
    m1 = {**trained, "head.weight": trained["local_head.weight"]}
    m1["head.bias"] = trained["local_head.bias"]
    model = algo.model_for(client)
    val = sim.data.clients[client].val

    def score(state):
        ok, losses = evaluate_samples(model, state, sim.data, val, 256)
        return float(ok.double().mean()), -float(losses.double().mean())

    alpha, chosen = line_search(model, received, m1, sim.data, val, 10, 256)
    assert 0.0 <= alpha <= 1.0
    assert score(chosen) >= score(received) and score(chosen) >= score(m1)


def test_local_head_step_scale_moves_only_the_local_head_by_that_factor(tiny_cfg):
    """``local_head_lr_scale``: one local epoch moves the local head by exactly that factor of
    its move at scale 1 in the first step; every other tensor follows the same trajectory
    (the local head gets gradient from L_c only, on detached features)."""
    moves = {}
    for scale in (1.0, 0.25):
        cfg = _cfg(
            tiny_cfg, options={"local_head_lr_scale": scale}, batch_size=10**6, local_epochs=1
        )
        sim = Simulation(Config.from_dict(cfg))
        algo = sim.algorithm
        algo.download_keys(0)
        start = algo.start_state(0, 0)
        trained = sim.train(0, 0, start).state  # one full batch: a single SGD step
        moves[scale] = {k: trained[k] - start[k] for k in start if k in trained}
    for key, move in moves[1.0].items():
        if key.startswith("local_head."):
            assert move.abs().sum() > 0
            assert torch.allclose(moves[0.25][key], 0.25 * move, rtol=1e-5, atol=1e-8)
        else:
            assert torch.equal(moves[0.25][key], move)


def test_a_client_never_receives_more_than_its_width(tiny_cfg):
    sim = Simulation(Config.from_dict(_cfg(tiny_cfg)))
    algo = sim.algorithm
    keys = algo.download_keys(0)
    full = tensor_bytes({k: sim.store.global_state[k] for k in keys})
    assert not any(k.startswith("head.") for k in keys)  # the frozen global head is never sent
    for c in range(6):
        narrow = {k: v for k, v in algo.model_for(c).state_dict().items() if k in keys}
        assert algo.download_bytes(0, c, keys) == tensor_bytes(narrow)
        start = algo.start_state(0, c)
        assert all(start[k].shape == narrow[k].shape for k in keys)
        if algo.width(c) < 1:
            assert tensor_bytes(narrow) < full
    row = sim.run_round(0)
    assert 0 < row["up_bytes"] == row["down_bytes"]


def test_general_parameters_are_averaged_uniformly(tiny_cfg):
    sim = Simulation(Config.from_dict(_cfg(tiny_cfg, join_ratio=1.0)))
    algo = sim.algorithm
    algo.download_keys(0)
    results = {c: algo.local_update(0, c) for c in range(6)}
    uploads = {c: algo.upload(0, c, r.state) for c, r in results.items()}
    algo.aggregate(0, uploads, {c: float(c + 1) for c in range(6)})  # data weights are ignored
    key = "general.conv2_u"
    mean = torch.stack([uploads[c][key] for c in range(6)]).mean(0)
    assert torch.allclose(sim.store.global_state[key], mean, atol=1e-6)


def test_resume_is_bit_identical(tiny_cfg, tmp_path):
    tensors = assert_resume_bit_identical(_cfg(tiny_cfg), tmp_path)
    assert any(k.startswith("extra/hn/") for k in tensors)
    assert any(k.startswith("extra/test/") for k in tensors)


@pytest.mark.parametrize(
    "options",
    [
        {"hn_aggregation": False},
        {"decomposition": "flanc"},
        {"decomposition": "flanc", "flanc_ranks": "flanc"},
        {"test_model": "trained"},
    ],
)
def test_ablations_run(tiny_cfg, options):
    sim = Simulation(Config.from_dict(_cfg(tiny_cfg, options=options)))
    result = sim.run()
    assert result.metrics[-1]["accuracy"] is not None
    if options.get("hn_aggregation") is False:  # θ_v and the local head stay on the clients
        assert sim.algorithm.hn is None
        assert sim.store.personal and "personal.fc1_v" in sim.store.personal_keys


def test_pfedhn_trains_the_p_min_model_and_evaluates_generated_models(tiny_cfg):
    sim = Simulation(Config.from_dict(_cfg(tiny_cfg, "pfedhn", join_ratio=1.0)))
    algo = sim.algorithm
    assert sim.model.state_dict()["conv1.weight"].shape[0] == 1  # 8 channels at p_min = 1/16
    before = {k: v.clone() for k, v in algo.hn.state_dict().items()}
    row = sim.run_round(0)
    assert row["up_bytes"] == row["down_bytes"] == 6 * tensor_bytes(sim.store.global_state)
    assert any(not torch.equal(before[k], v) for k, v in algo.hn.state_dict().items())
    generated = algo.hn.generate([2])[0]
    assert all(torch.equal(algo.eval_state(2)[k], v) for k, v in generated.items())


def test_unsupported_model_and_bad_options_are_one_line_errors(tiny_cfg):
    with pytest.raises(ConfigError, match="model.name"):
        Simulation(Config.from_dict({**_cfg(tiny_cfg), "model": {"name": "mlp"}}))
    with pytest.raises(ConfigError, match="algorithm.decomposition"):
        Simulation(Config.from_dict(_cfg(tiny_cfg, options={"decomposition": "svd"})))
    with pytest.raises(ConfigError, match="algorithm.flanc_ranks"):
        Simulation(Config.from_dict(_cfg(tiny_cfg, options={"flanc_ranks": "t4"})))
    with pytest.raises(ConfigError, match="algorithm.local_head_lr_scale"):
        Simulation(Config.from_dict(_cfg(tiny_cfg, options={"local_head_lr_scale": -1})))


@pytest.mark.parametrize("algorithm", ["pa3dfl", "pfedhn"])
def test_quickstart_with_uniform_capacity(algorithm, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = run_quickstart_uniform(algorithm, tmp_path / "run")
    assert code in (0, None)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["rounds_completed"] == 2


def test_test_models_script_reproduces_the_reported_client_accuracies(tiny_cfg, tmp_path, capsys):
    """``benchmarks/pa3dfl/test_models.py`` rebuilds every client's test model from the last
    checkpoint: its ``test`` column equals the accuracies the run reported, client by client;
    a record with another number of clients is a one-line error (exit 2)."""
    from fedpart import api

    script = _bench_script("test_models")
    cfg = _cfg(tiny_cfg, rounds=2)
    cfg["output"] = {"dir": str(tmp_path / "run"), "checkpoint_every": 1}
    api.run(cfg)
    reported = json.loads((tmp_path / "run/clients.json").read_text())["client_accuracy"]
    rows, done = script.client_accuracies(tmp_path / "run")
    assert done == 2
    assert [r["test"] for r in rows] == pytest.approx([100 * a for a in reported], abs=1e-9)
    assert {r["group"] for r in rows} <= set(range(5))
    record = tmp_path / "other.json"
    record.write_text(json.dumps({"clients": {"accuracy": [0.5] * len(rows)}}))
    assert script.main([str(tmp_path / "run"), "--against", str(record), "--fitted-head"]) == 0
    out = capsys.readouterr().out
    assert "| received, fitted head |" in out.splitlines()[2]
    assert "| all | 6 |" in out and "| 50.00 |" in out
    record.write_text(json.dumps({"clients": {"accuracy": [0.5]}}))
    assert script.main([str(tmp_path / "run"), "--against", str(record)]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_replay_round_script_replays_the_next_round_and_names_a_divergence(
    tiny_cfg, tmp_path, capsys
):
    """``benchmarks/pa3dfl/replay_round.py`` replays the round after the last checkpoint: with
    the run's settings it trains, a huge step size diverges and is named, a step limit keeps it
    finite and counts the clipped steps; no checkpoint is a one-line error."""
    from fedpart import api

    script = _bench_script("replay_round")
    cfg = _cfg(tiny_cfg, rounds=2)
    cfg["output"] = {"dir": str(tmp_path / "run"), "checkpoint_every": 1}
    api.run(cfg)
    run = str(tmp_path / "run")
    assert script.main([run, "federation.rounds=3", "--client", "0", "--received"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("round 2: trained, train loss ") and "(no limit)" in out
    assert "| median CE global head |" in out and "client 0, loss of its first steps:" in out
    assert script.main([run, "federation.rounds=3", "federation.lr=1e30"]) == 0
    assert "round 2: training diverged: non-finite loss" in capsys.readouterr().out
    limited = [run, "federation.rounds=3", "federation.lr=1e30", "federation.max_grad_norm=1e-31"]
    assert script.main(limited) == 0
    out = capsys.readouterr().out
    assert "round 2: trained" in out and "clipped steps" in out and "(limit 1e-31)" in out
    assert script.main([str(tmp_path / "nothing")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def _bench_script(name: str):  # noqa: ANN202 - a module
    """``benchmarks/pa3dfl/<name>.py`` loaded as a module."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / f"benchmarks/pa3dfl/{name}.py"
    spec = importlib.util.spec_from_file_location(f"pa3dfl_{name}", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


@pytest.mark.parametrize("kind", ["pa3dfl", "flanc"])
@pytest.mark.parametrize("kernel", [5, 0])
def test_decompositions_script_reads_a_weight_in_either_layout(kind, kernel):
    """``decompositions.py``'s ``to_columns`` inverts ``compose``'s reshape for both layouts, at
    the full width and at a narrowed one."""
    from fedpart.models.factorization import Factorization

    script = _bench_script("decompositions")
    torch.manual_seed(0)
    geo = Factorization(kind, 8, 12, kernel, 4 if kind == "pa3dfl" else 2, 6)
    for g in (geo, geo.narrow(8, 4 if kind == "pa3dfl" else 6)):
        w = torch.randn(g.weight_shape)
        cols = script.to_columns(g, w)
        assert cols.shape[0] == g.u_shape[0]
        assert torch.equal(g.compose(torch.eye(cols.shape[0]), cols), w)
        u, v = torch.randn(g.u_shape), torch.randn(g.r2, cols.shape[1])
        assert torch.allclose(script.to_columns(g, g.compose(u, v)), u @ v)


def test_decompositions_script_moves_models_between_layouts():
    """Moving models that share θ_u to their own layout keeps every weight; to the other layout, a layer whose
    θ_u there is square moves exactly and a layer of lower rank loses part of a generic weight."""
    script = _bench_script("decompositions")
    spec = {"channels": (16, 16), "padding": 2, "fc": (32,)}
    torch.manual_seed(0)
    models = [
        FactorizedCNN(10, (1, 28, 28), decomposition="pa3dfl", spec=spec, p_min=1 / 4, width=w)
        for w in (0.25, 1.0)
    ]
    states = [{k: torch.randn_like(v) for k, v in m.state_dict().items()} for m in models]
    for k in models[0].general_keys():  # θ_u is general: one for every client
        states[1][k] = states[0][k]
    same, moved, errors = script.move(models, states, "pa3dfl")
    assert max(errors.values()) < 1e-6
    x = torch.randn(3, 1, 28, 28)
    for m, s, t, ms in zip(models, states, same, moved, strict=True):
        ref = torch.func.functional_call(m, s, (x,))
        # outputs of order 1e6 (random weights): float32 rounding of the sums is relative to
        # that scale (0.44 at most, 4e-7 of it, where MKL's AVX2 kernels compute them:
        # MKL_ENABLE_INSTRUCTIONS=AVX2); a weight lost in the move changes them by ~1e5
        got = torch.func.functional_call(t, ms, (x,))
        assert (got - ref).abs().max() <= 1e-5 * ref.abs().max()
    targets, _, errors = script.move(models, states, "flanc")
    square = [n for n in errors if len(set(targets[0].layer_geometry(n).u_shape)) == 1]
    assert square and all(errors[n] < 1e-6 for n in square)
    assert any(errors[n] > 0.05 for n in errors if n not in square)
    assert all(t.decomposition == "flanc" and t.ranks == "eq5" for t in targets)


def test_decompositions_script_reproduces_the_received_models(tiny_cfg, tmp_path, capsys):
    """On a finished run the models moved to their own layout score as the run's own, client
    by client; no checkpoint is a one-line error (exit 2)."""
    from fedpart import api

    script = _bench_script("decompositions")
    cfg = _cfg(tiny_cfg, rounds=2)
    cfg["output"] = {"dir": str(tmp_path / "run"), "checkpoint_every": 1}
    api.run(cfg)
    rows, done, layers = script.client_accuracies(tmp_path / "run")
    assert done == 2 and len(layers) == 2 + 2 * 2 * 3  # two models, two layouts, three layers
    assert [r["received as pa3dfl"] for r in rows] == [r["received"] for r in rows]
    assert script.main([str(tmp_path / "run")]) == 0
    assert "| all | 6 |" in capsys.readouterr().out
    assert script.main([str(tmp_path / "nothing")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
