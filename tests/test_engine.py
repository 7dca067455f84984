import json

import pytest
import torch

import fedpart
from fedpart.config import Config
from fedpart.engine.mixing import mix, weighted_average
from fedpart.engine.rounds import sample_clients
from fedpart.engine.simulation import Simulation
from fedpart.errors import TrainingError
from resume_check import assert_resume_bit_identical


def test_sampling_is_seeded_and_method_independent():
    a = sample_clients(0, 5, 100, 0.1)
    assert a == sample_clients(0, 5, 100, 0.1)
    assert len(a) == 10 and len(set(a)) == 10
    assert a != sample_clients(0, 6, 100, 0.1)
    assert sample_clients(0, 0, 7, 1.0) == list(range(7))


def test_mixing_rank_one_is_weighted_average():
    states = [{"w": torch.full((2, 2), float(i))} for i in range(3)]
    avg = weighted_average(states, [1.0, 1.0, 2.0], ["w"])
    assert torch.allclose(avg["w"], torch.full((2, 2), (0 + 1 + 4) / 4))
    W = torch.eye(3)
    stacked = torch.stack([s["w"] for s in states])
    assert torch.equal(mix(stacked, W), stacked)


def test_fedavg_aggregate_is_weighted_mean_of_uploads(tiny_cfg):
    cfg = Config.from_dict({**tiny_cfg, "federation": {**tiny_cfg["federation"], "rounds": 1}})
    sim = Simulation(cfg)
    algo = sim.algorithm
    participants = sample_clients(cfg.seed, 0, 6, cfg.federation.join_ratio)
    results = {c: sim.train(0, c, algo.start_state(0, c)).state for c in participants}
    sizes = {c: sim.data.clients[c].num_train for c in participants}
    sim.run_round(0)
    for key, value in sim.store.global_state.items():
        if not value.is_floating_point():
            continue
        expect = sum(results[c][key] * sizes[c] for c in participants) / sum(sizes.values())
        assert torch.allclose(value, expect, atol=1e-6), key


def test_run_writes_outputs(tiny_cfg, tmp_path):
    res = fedpart.run(tiny_cfg)
    out = tmp_path / "run"
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 4
    for key in (
        "round",
        "accuracy",
        "accuracy_weighted",
        "loss",
        "up_bytes",
        "down_bytes",
        "wall_seconds",
    ):
        assert key in rows[0]
    summary = json.loads((out / "summary.json").read_text())
    for key in ("algorithm", "dataset", "num_clients", "rounds_completed", "wall_seconds"):
        assert key in summary
    for key in ("final", "best", "best_round", "last10_mean"):
        assert 0.0 <= summary["accuracy"][key] <= 1.0 if key != "best_round" else True
    assert summary["accuracy_weighted"]["final"] is not None
    assert summary["communication"]["up_bytes"] > 0 and summary["communication"]["down_bytes"] > 0
    assert summary == res.summary | {"wall_seconds": summary["wall_seconds"]}
    assert (out / "config.yaml").is_file() and (out / "checkpoint" / "state.safetensors").is_file()
    # FedAvg learns something on digits in 4 rounds
    assert summary["accuracy"]["final"] > 0.3


def test_communication_counts_what_is_sent(tiny_cfg):
    res = fedpart.run(tiny_cfg, write=False)
    sim = res.simulation
    model_bytes = sum(v.numel() * v.element_size() for v in sim.store.global_state.values())
    per_round = 3  # 6 clients * join_ratio 0.5
    assert res.metrics[0]["up_bytes"] == per_round * model_bytes
    assert res.metrics[0]["down_bytes"] == per_round * model_bytes
    local = fedpart.run({**tiny_cfg, "algorithm": {"name": "local"}}, write=False)
    assert local.summary["communication"] == {"up_bytes": 0, "down_bytes": 0}


def test_local_keeps_clients_apart(tiny_cfg):
    res = fedpart.run({**tiny_cfg, "algorithm": {"name": "local"}}, write=False)
    store = res.simulation.store
    assert set(store.personal_keys) == set(store.keys)
    trained = sorted(store.personal)
    a, b = store.personal[trained[0]], store.personal[trained[1]]
    assert any(not torch.equal(a[k], b[k]) for k in a)
    # the server model never moves
    init = Simulation(Config.from_dict(tiny_cfg)).store.global_state
    assert all(torch.equal(init[k], store.global_state[k]) for k in init)


def test_same_seed_same_numbers(tiny_cfg):
    a = fedpart.run(tiny_cfg, write=False).summary
    b = fedpart.run(tiny_cfg, write=False).summary
    a.pop("wall_seconds"), b.pop("wall_seconds")
    assert a == b


@pytest.mark.parametrize("algorithm", ["fedavg", "local"])
def test_resume_is_bit_identical(tiny_cfg, tmp_path, algorithm):
    assert_resume_bit_identical({**tiny_cfg, "algorithm": {"name": algorithm}}, tmp_path)


def test_resume_after_crash(tiny_cfg, tmp_path, monkeypatch):
    """A run killed mid-way continues from its last checkpoint to the same end."""
    cfg = {**tiny_cfg, "federation": {**tiny_cfg["federation"], "rounds": 5}}
    straight = fedpart.run({**cfg, "output": {"dir": str(tmp_path / "a"), "checkpoint_every": 2}})
    crash_cfg = {**cfg, "output": {"dir": str(tmp_path / "b"), "checkpoint_every": 2}}
    original = Simulation.run_round

    def crashing(self, rnd):
        if rnd == 3:
            raise KeyboardInterrupt
        return original(self, rnd)

    monkeypatch.setattr(Simulation, "run_round", crashing)
    with pytest.raises(KeyboardInterrupt):
        fedpart.run(crash_cfg)
    monkeypatch.setattr(Simulation, "run_round", original)
    resumed = fedpart.resume(tmp_path / "b")
    assert resumed.summary["accuracy"] == straight.summary["accuracy"]
    rows = (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["round"] for r in rows] == [0, 1, 2, 3, 4]


def test_refuses_to_overwrite_a_run(tiny_cfg):
    fedpart.run(tiny_cfg)
    with pytest.raises(fedpart.FedpartError, match="already holds a run"):
        fedpart.run(tiny_cfg)


def test_nan_loss_is_a_clear_error(tiny_cfg):
    cfg = {**tiny_cfg, "federation": {**tiny_cfg["federation"], "lr": 1e30}}
    with pytest.raises(TrainingError, match="non-finite loss"):
        fedpart.run(cfg, write=False)


def test_official_test_split_and_global_accuracy(tiny_cfg):
    pytest.importorskip("sklearn")
    cfg = {
        **tiny_cfg,
        "dataset": {"name": "synthetic"},
        "model": {"name": "mlp"},
        "partition": {
            "kind": "iid",
            "num_clients": 4,
            "split": [0.8, 0.2, 0.0],
            "test_source": "official",
        },
    }
    cfg["dataset"]["merge_test"] = False
    res = fedpart.run(cfg, write=False)
    assert res.summary["global_accuracy"]["final"] is not None
    sim = res.simulation
    tests = torch.cat([c.test for c in sim.data.clients])
    assert len(set(tests.tolist())) == tests.numel()
    assert (tests >= sim.data.bundle.train_y.numel()).all()


@pytest.mark.parametrize("algorithm", ["fedavg", "fedper", "fedrod", "lgfedavg", "dfedavgmp"])
def test_shared_body_evaluation_equals_per_client(tiny_cfg, algorithm):
    """One body pass for clients that share it gives each client's own evaluation exactly."""
    from fedpart.engine.evaluation import evaluate_clients, evaluate_samples

    cfg = {**tiny_cfg, "algorithm": {"name": algorithm}}
    if algorithm.startswith("dfed"):
        cfg["topology"] = {"neighbors": 2}
    sim = fedpart.run(
        {**cfg, "federation": {**tiny_cfg["federation"], "rounds": 2}}, write=False
    ).simulation
    states = [sim.algorithm.eval_state(c) for c in range(6)]
    index = [c.test for c in sim.data.clients]
    together = evaluate_clients(sim.model, states, index, sim.data, 7)
    for c in range(6):
        ok, loss = evaluate_samples(sim.model, states[c], sim.data, index[c], 64)
        assert torch.equal(together[c][0], ok)
        torch.testing.assert_close(together[c][1], loss, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("shape", [(37, 11), (128, 512)])
def test_averaging_is_the_same_sum_whatever_the_layout(shape):
    """An average is Σ_j w_j·x_j accumulated in client order, one rounding per product and per
    sum: every coordinate's value depends on that coordinate alone, so averaging a tensor, its
    column blocks one at a time, or its transpose gives the same bits on any machine (a BLAS
    product's sum order may depend on the shape: MKL on Intel CPUs differs from AMD)."""
    from fedpart.engine.mixing import weighted_average

    gen = torch.Generator().manual_seed(0)
    n = 23 if shape == (37, 11) else 300
    states = [
        {"w": torch.randn(*shape, generator=gen), "n": torch.randint(0, 9, (5,), generator=gen)}
        for _ in range(n)
    ]
    weights = torch.rand(n, generator=gen, dtype=torch.float64).tolist()
    whole = weighted_average(states, weights, ["w", "n"])
    w = torch.tensor(weights, dtype=torch.float64)
    w32 = (w / w.sum()).float()
    expected = states[0]["w"] * w32[0]
    for j in range(1, n):
        expected = expected + states[j]["w"] * w32[j]
    assert torch.equal(whole["w"], expected)
    columns = 5
    blocks = torch.cat(
        [
            weighted_average([{"w": s["w"][:, a : a + columns]} for s in states], weights, ["w"])[
                "w"
            ]
            for a in range(0, shape[1], columns)
        ],
        dim=1,
    )
    assert torch.equal(whole["w"], blocks)
    transposed = weighted_average([{"w": s["w"].t().contiguous()} for s in states], weights, ["w"])
    assert torch.equal(whole["w"], transposed["w"].t())
    ints = torch.stack([s["n"] for s in states]).double()
    assert torch.equal(whole["n"], ((w / w.sum()) @ ints).round().long())
    assert whole["w"].shape == shape
    assert not torch.equal(whole["w"], states[0]["w"])  # something was mixed
