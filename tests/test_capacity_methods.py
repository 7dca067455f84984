"""Capacity heterogeneity in a run, and the width-sliced methods HeteroFL and FedRolex."""

import json

import pytest
import torch
from safetensors.torch import load_file

import fedpart
from fedpart.config import Config, load_config
from fedpart.engine.mixing import tensor_bytes
from fedpart.engine.simulation import Simulation
from fedpart.errors import ConfigError
from fedpart.models.width import model_index_sets
from fedpart.models.width_plan import kept_count
from resume_check import assert_resume_bit_identical, run_quickstart_uniform


def _cfg(tiny_cfg, algorithm, rounds=1, **federation):
    fed = {**tiny_cfg["federation"], "rounds": rounds, **federation}
    return {**tiny_cfg, "algorithm": {"name": algorithm}, "federation": fed}


def test_config_keys_are_checked(tmp_path):
    with pytest.raises(ConfigError, match="federation.capacity_values"):
        load_config("configs/quickstart.yaml", ["federation.capacity=list"])
    with pytest.raises(ConfigError, match=r"federation.capacity_values\[1\]"):
        load_config(
            "configs/quickstart.yaml",
            ["federation.capacity=list", f"federation.capacity_values=[1.0,2.0{',1.0' * 18}]"],
        )
    with pytest.raises(ConfigError, match="federation.capacity:"):
        load_config("configs/quickstart.yaml", ["federation.capacity=half"])
    with pytest.raises(ConfigError, match="federation.p_min"):
        load_config("configs/quickstart.yaml", ["federation.p_min=0"])


def test_unaware_method_trains_the_p_min_model(tiny_cfg):
    values = [1.0, 1.0, 0.25, 1.0, 1.0, 1.0]  # p = 1/2 for client 2: p_min = 1/2
    sim = Simulation(
        Config.from_dict(_cfg(tiny_cfg, "fedavg", capacity="list", capacity_values=values))
    )
    assert sim.capacity.p_min == 0.5
    assert sim.model.state_dict()["fc1.weight"].shape[0] == kept_count(32, 0.5)
    assert sim.store.global_state["fc1.weight"].shape[0] == 16


def test_unheld_coordinates_keep_their_value(tiny_cfg):
    values = [0.25] * 6  # every client at width 1/2: hidden units 16..31 are held by nobody
    sim = Simulation(
        Config.from_dict(_cfg(tiny_cfg, "heterofl", capacity="list", capacity_values=values))
    )
    init = {k: v.clone() for k, v in sim.store.global_state.items()}
    sim.run_round(0)
    new = sim.store.global_state
    assert new["fc1.weight"].shape == init["fc1.weight"].shape  # the server keeps full shapes
    assert torch.equal(new["fc1.weight"][16:], init["fc1.weight"][16:])
    assert torch.equal(new["classifier.weight"][:, 16:], init["classifier.weight"][:, 16:])
    assert not torch.equal(new["fc1.weight"][:16], init["fc1.weight"][:16])


def test_a_client_never_receives_or_sends_more_than_its_width(tiny_cfg):
    sim = Simulation(Config.from_dict(_cfg(tiny_cfg, "heterofl", capacity="uniform")))
    algo = sim.algorithm
    keys = algo.download_keys(0)
    full = tensor_bytes(sim.store.global_state)
    for c in range(6):
        narrow = algo.model_for(c)
        own = tensor_bytes(narrow.state_dict())
        assert algo.download_bytes(0, c, keys) == own
        start = algo.start_state(0, c)
        assert {k: v.shape for k, v in start.items()} == {
            k: v.shape for k, v in narrow.state_dict().items()
        }
        if algo.width(c) < 1:
            assert own < full
    row = sim.run_round(0)
    from fedpart.engine.rounds import sample_clients

    part = sample_clients(sim.cfg.seed, 0, 6, sim.cfg.federation.join_ratio)
    expected = sum(tensor_bytes(algo.model_for(c).state_dict()) for c in part)
    assert row["down_bytes"] == expected
    assert row["up_bytes"] == expected


def test_fedrolex_window_moves_by_one_each_round(tiny_cfg):
    sim = Simulation(
        Config.from_dict(_cfg(tiny_cfg, "fedrolex", capacity="list", capacity_values=[0.25] * 6))
    )
    algo = sim.algorithm
    rows = [algo.index_sets(r, 0)["fc1.weight"][0] for r in range(40)]
    assert rows[0].tolist() == list(range(16))
    for r in range(39):
        assert torch.equal(rows[r + 1], (rows[r] + 1) % 32)
    # the classifier's inputs follow the hidden units, its outputs stay whole
    assert torch.equal(algo.index_sets(5, 0)["classifier.weight"][1], rows[5])
    assert algo.index_sets(5, 0)["classifier.weight"][0] is None


def test_heterofl_scaler_divides_training_outputs_by_width(tiny_cfg):
    sim = Simulation(
        Config.from_dict(_cfg(tiny_cfg, "heterofl", capacity="list", capacity_values=[0.25] * 6))
    )
    narrow = sim.algorithm.model_for(0)
    x = torch.randn(3, 64)
    layer = narrow.get_submodule("fc1")
    layer.train()
    scaled = layer(x)
    layer.eval()
    assert torch.allclose(scaled * 0.5, layer(x))
    head = narrow.get_submodule("classifier")  # the classifier is never scaled
    head.train()
    assert torch.equal(
        head(torch.ones(1, 16)),
        torch.nn.functional.linear(torch.ones(1, 16), head.weight, head.bias),
    )
    assert model_index_sets(sim.model, 0.5)["fc1.weight"][0].numel() == 16


def test_ideal_heterofl_is_fedavg(tiny_cfg, tmp_path):
    out = {}
    for name in ("fedavg", "heterofl"):
        cfg = _cfg(tiny_cfg, name, rounds=2)
        cfg["output"] = {"dir": str(tmp_path / name), "checkpoint_every": 2}
        out[name] = fedpart.run(cfg)
    assert out["fedavg"].client_accuracy == out["heterofl"].client_accuracy
    a = load_file(str(tmp_path / "fedavg" / "checkpoint" / "state.safetensors"))
    b = load_file(str(tmp_path / "heterofl" / "checkpoint" / "state.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_fedrolex_resume_is_bit_identical(tiny_cfg, tmp_path):
    assert_resume_bit_identical(_cfg(tiny_cfg, "fedrolex", capacity="uniform"), tmp_path)


@pytest.mark.parametrize("algorithm", ["fedavg", "heterofl", "fedrolex"])
def test_quickstart_with_uniform_capacity(algorithm, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = run_quickstart_uniform(algorithm, tmp_path / "run")
    assert code in (0, None)
    clients = json.loads((tmp_path / "run" / "clients.json").read_text())
    assert len(clients["width"]) == 20 and min(clients["width"]) == 1 / 16
    assert len(clients["capacity_groups"]) == 20


def test_batched_backend_groups_clients_by_width(tiny_cfg):
    values = [0.25, 0.25, 0.25, 1.0, 1.0, 0.01]  # widths 1/2, 1/2, 1/2, 1, 1, 1/16
    states = {}
    for backend in ("sequential", "batched"):
        cfg = _cfg(tiny_cfg, "fedrolex", rounds=2, capacity="list", capacity_values=values)
        cfg["federation"]["join_ratio"] = 1.0
        cfg["engine"] = {"backend": backend}
        states[backend] = fedpart.run(cfg, write=False).simulation.store.global_state
    for k, v in states["sequential"].items():
        assert torch.allclose(v, states["batched"][k], atol=1e-6)
