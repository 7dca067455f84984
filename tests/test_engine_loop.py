"""The engine's run loop calls its observers in a fixed order, and a backend that hands the
engine results trained elsewhere gets exactly those results accounted."""

import torch

from fedpart.config import Config
from fedpart.engine.backends import BACKENDS, Delivered, make_backend
from fedpart.engine.loop import Observer, run_loop
from fedpart.engine.rounds import sample_clients
from fedpart.engine.simulation import Simulation


class Recorder(Observer):
    def __init__(self):
        self.calls = []

    def start(self, sim):
        self.calls.append("start")

    def round_start(self, sim, rnd):
        self.calls.append(f"round_start {rnd}")

    def round_end(self, sim, row):
        self.calls.append(f"round_end {row['round']} {sim.rounds_completed}")

    def final(self, sim, row):
        self.calls.append(f"final {row['stage']}")

    def close(self, sim):
        self.calls.append("close")

    def end(self, sim, result):
        self.calls.append(f"end {len(result.metrics)}")


def test_observers_see_the_run_in_order(tiny_cfg):
    # fedbabu fine-tunes after the last round, so the run has a final evaluation
    cfg = Config.from_dict(
        {
            **tiny_cfg,
            "algorithm": {"name": "fedbabu", "finetune_epochs": 1},
            "federation": {**tiny_cfg["federation"], "rounds": 2},
        }
    )
    recorder = Recorder()
    result = run_loop(Simulation(cfg), [recorder])
    assert recorder.calls == [
        "start",
        "round_start 0",
        "round_end 0 1",
        "round_start 1",
        "round_end 1 2",
        "final final",
        "close",
        "end 2",
    ]
    assert result.simulation.finished and result.summary["rounds_completed"] == 2


def test_backends_are_chosen_once_by_name(tiny_cfg):
    sim = Simulation(Config.from_dict(tiny_cfg))
    assert type(sim.executor) is BACKENDS["sequential"] and sim.backend == "sequential"
    assert {name: make_backend(name, sim).name for name in BACKENDS} == {
        name: name for name in BACKENDS
    }


def test_delivered_results_are_accounted_without_training_again(tiny_cfg):
    """What Flower's server does with its nodes' results: the engine's accounting, the store
    and the method's ``trained`` hook see them, and no client trains in the driver."""
    sim = Simulation(Config.from_dict({**tiny_cfg, "algorithm": {"name": "fedper"}}))
    clients = sample_clients(sim.cfg.seed, 0, sim.data.num_clients, sim.cfg.federation.join_ratio)
    elsewhere = {c: sim.train(0, c, sim.algorithm.start_state(0, c)) for c in clients}

    def refuse(rnd, client):
        raise AssertionError("trained in the driver")

    sim.algorithm.local_update = refuse
    results, stats = sim.train_clients(0, clients, backend=Delivered("elsewhere", elsewhere))
    assert results == elsewhere and stats["participants"] == len(clients)
    assert sim.store.personal_keys  # FedPer's head
    for c in clients:
        stored = sim.store.client_state(c)
        assert all(torch.equal(stored[k], elsewhere[c].state[k]) for k in sim.store.personal_keys)
