"""Client faults: every method under 30 % client failure (methods with a server) or 30 % link
loss (decentralized methods) keeps finite metrics, counts only the bytes that were sent, and
resumes bit-identically; stragglers, empty rounds and non-finite updates."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import fedpart
from fedpart.algorithms import ALGORITHMS
from fedpart.algorithms.base import Algorithm
from fedpart.config import Config
from fedpart.engine.mixing import tensor_bytes
from fedpart.engine.rounds import sample_clients
from fedpart.engine.simulation import Simulation
from fedpart.errors import ConfigError, TrainingError

SERVER_METHODS = sorted(n for n, c in ALGORITHMS.items() if c.setting != "decentralized")
DECENTRALIZED = sorted(n for n, c in ALGORITHMS.items() if c.setting == "decentralized")


#: options a method needs to run on the two-hidden-layer MLP
MLP_OPTIONS = {"fedseqlayer": {"unfreeze_rounds": [0, 2]}}
#: smaller settings of the slowest methods (the test is about faults, not their accuracy)
FAST_OPTIONS = {
    "fedbabu": {"finetune_epochs": 1},
    "fedseqlayer": {"finetune_epochs": 1},
    "pa3dfl": {"line_search": 2, "depth": 1, "embed_dim": 8, "hidden_dim": 8},
}


def base(algorithm: str, tmp_path, **federation) -> dict:
    """Five clients on the bundled digits, a tiny MLP (a small CNN where the method needs one)."""
    cfg = {
        "seed": 2,
        "dataset": {"name": "digits"},
        "partition": {"kind": "dirichlet", "num_clients": 5, "alpha": 0.5, "min_size": 30},
        "model": {"name": "mlp", "hidden": [16, 16]},
        "algorithm": {
            "name": algorithm,
            **FAST_OPTIONS.get(algorithm, {}),
            **MLP_OPTIONS.get(algorithm, {}),
        },
        "federation": {"rounds": 4, "join_ratio": 1.0, "batch_size": 32, "lr": 0.05, **federation},
        "output": {"dir": str(tmp_path / "run"), "checkpoint_every": 2},
    }
    try:
        Simulation(Config.from_dict({**cfg, "federation": {"rounds": 1}}))
    except ConfigError:  # e.g. FedBN and FedAP need BatchNorm layers
        cfg["model"] = {"name": "fedavgcnn", "padding": 2, "width": 8}
        cfg["algorithm"] = {"name": algorithm, **FAST_OPTIONS.get(algorithm, {})}
    return cfg


def assert_resume_identical(cfg: dict, tmp_path, monkeypatch) -> None:
    """A run interrupted in round 3 (checkpoint after round 2) and resumed ends bit-identical to
    the same run uninterrupted (the same config throughout: methods whose schedule depends on
    federation.rounds are compared fairly)."""
    fedpart.run({**cfg, "output": {"dir": str(tmp_path / "straight"), "checkpoint_every": 2}})
    run_round = Simulation.run_round

    def interrupted(self, rnd):
        if rnd == 3:
            raise KeyboardInterrupt
        return run_round(self, rnd)

    monkeypatch.setattr(Simulation, "run_round", interrupted)
    with pytest.raises(KeyboardInterrupt):
        fedpart.run({**cfg, "output": {"dir": str(tmp_path / "stopped"), "checkpoint_every": 2}})
    monkeypatch.setattr(Simulation, "run_round", run_round)
    fedpart.resume(tmp_path / "stopped")
    s1, s2 = (
        json.loads((tmp_path / d / "summary.json").read_text()) for d in ("straight", "stopped")
    )
    s1.pop("wall_seconds"), s2.pop("wall_seconds")
    assert s1 == s2
    p1, p2 = (
        load_file(str(tmp_path / d / "checkpoint" / "state.safetensors"))
        for d in ("straight", "stopped")
    )
    assert p1.keys() == p2.keys() and all(torch.equal(p1[k], p2[k]) for k in p1)


def assert_finite(rows: list[dict]) -> None:
    for row in rows:
        for key, value in row.items():
            if isinstance(value, float):
                assert math.isfinite(value), (row["round"], key, value)


@pytest.mark.parametrize("name", SERVER_METHODS)
def test_every_server_method_under_30_percent_client_failure(name, tmp_path, monkeypatch):
    cfg = base(name, tmp_path, client_failure=0.3)
    sent: dict[int, list[tuple[int, int]]] = {}
    upload = ALGORITHMS[name].upload

    def spy(self, rnd, client, state, job=None):
        out = upload(self, rnd, client, state, job)
        sent.setdefault(rnd, []).append((client, tensor_bytes(out)))
        return out

    own_bytes: set[int] = set()  # rounds whose bytes the method counts itself
    round_metrics = ALGORITHMS[name].round_metrics

    def metrics_spy(self):
        out = round_metrics(self)
        if "up_bytes" in out:
            own_bytes.add(self.ctx.rounds_completed)
        return out

    monkeypatch.setattr(ALGORITHMS[name], "upload", spy)
    monkeypatch.setattr(ALGORITHMS[name], "round_metrics", metrics_spy)
    res = fedpart.run(cfg, write=False)
    monkeypatch.undo()
    sim = res.simulation
    assert_finite(res.metrics)
    assert res.summary["accuracy"]["final"] is not None
    failed_total = 0
    for row in res.metrics:
        rnd = row["round"]
        participants = sample_clients(cfg["seed"], rnd, 5, 1.0)
        failed = sim.failed_clients(rnd, participants)
        failed_total += len(failed)
        assert row["failed"] == len(failed)
        # a failed client sends nothing; the bytes are those of the uploads that were made
        assert not failed & {c for c, _ in sent.get(rnd, [])}
        if rnd not in own_bytes:  # FedAP's sequential pre-training passes the model along
            assert row["up_bytes"] == sum(b for _, b in sent.get(rnd, []))
    assert failed_total > 0
    assert_resume_identical(cfg, tmp_path, monkeypatch)


@pytest.mark.parametrize("name", DECENTRALIZED)
def test_every_decentralized_method_under_30_percent_link_loss(name, tmp_path, monkeypatch):
    cfg = base(name, tmp_path)
    cfg["topology"] = {"neighbors": 2, "drop_prob": 0.3}
    res = fedpart.run(cfg, write=False)
    assert_finite(res.metrics)
    reliable = fedpart.run({**cfg, "topology": {"neighbors": 2}}, write=False)
    lossy = sum(r["up_bytes"] for r in res.metrics)
    assert lossy < sum(r["up_bytes"] for r in reliable.metrics)  # lost links carry nothing
    assert_resume_identical(cfg, tmp_path, monkeypatch)


def test_decentralized_methods_refuse_client_failure(tmp_path):
    with pytest.raises(ConfigError, match="topology.drop_prob"):
        fedpart.run(base("dfedavg", tmp_path, client_failure=0.3), write=False)


def test_a_round_where_nobody_returns_keeps_the_model(tmp_path):
    cfg = base("fedavg", tmp_path, rounds=2, client_failure_schedule=[[1, c] for c in range(5)])
    sim = Simulation(Config.from_dict(cfg))
    sim.run_round(0)
    after_0 = {k: v.clone() for k, v in sim.store.global_state.items()}
    row = sim.run_round(1)
    assert row["failed"] == 5 and row["up_bytes"] == 0 and row["down_bytes"] > 0
    assert all(torch.equal(after_0[k], v) for k, v in sim.store.global_state.items())
    assert row["compute_proxy"] == 0  # nobody trained


def test_stragglers_arrive_one_round_late(tmp_path, monkeypatch):
    cfg = base("fedavg", tmp_path, client_failure=0.4, client_failure_mode="straggle")
    res = fedpart.run(cfg, write=False)
    rows = res.metrics
    assert_finite(rows)
    assert sum(r["late_applied"] for r in rows) > 0
    # a straggler trained and sent: its bytes count in the round it sent them
    model = sum(tensor_bytes({k: v}) for k, v in res.simulation.store.global_state.items())
    assert all(r["up_bytes"] == 5 * model for r in rows)
    assert rows[0]["late_applied"] == 0
    assert_resume_identical(cfg, tmp_path, monkeypatch)  # late updates travel in the checkpoint


def test_skip_client_discards_a_nonfinite_update_and_counts_it(tmp_path, monkeypatch):
    cfg = base("fedavg", tmp_path, rounds=2, on_nonfinite="skip_client")
    local_update = Algorithm.local_update

    def diverging(self, rnd, client):
        if (rnd, client) == (1, 3):
            raise TrainingError(f"training diverged: non-finite loss at round {rnd} on client 3")
        return local_update(self, rnd, client)

    monkeypatch.setattr(Algorithm, "local_update", diverging)
    res = fedpart.run(cfg, write=False)
    assert [r["skipped_nonfinite"] for r in res.metrics] == [0, 1]
    model = sum(tensor_bytes({k: v}) for k, v in res.simulation.store.global_state.items())
    assert res.metrics[1]["up_bytes"] == 4 * model


def test_skip_client_keeps_a_diverging_run_finite(tmp_path):
    cfg = base("fedavg", tmp_path, rounds=2, lr=1e30, on_nonfinite="skip_client")
    res = fedpart.run(cfg, write=False)
    assert [r["skipped_nonfinite"] for r in res.metrics] == [5, 5]
    assert_finite(res.metrics)


def test_stop_keeps_what_was_written_and_names_client_and_round(tmp_path, monkeypatch):
    cfg = base("fedavg", tmp_path, rounds=4)
    local_update = Algorithm.local_update

    def diverging(self, rnd, client):
        if (rnd, client) == (2, 1):
            raise TrainingError(f"training diverged: non-finite loss at round {rnd} on client 1")
        return local_update(self, rnd, client)

    monkeypatch.setattr(Algorithm, "local_update", diverging)
    with pytest.raises(TrainingError, match="round 2 on client 1"):
        fedpart.run(cfg)
    run = tmp_path / "run"
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [0, 1]
    assert json.loads((run / "checkpoint" / "meta.json").read_text())["rounds_completed"] == 2
    monkeypatch.setattr(Algorithm, "local_update", local_update)
    resumed = fedpart.resume(run, ["federation.on_nonfinite=skip_client"])
    assert resumed.summary["rounds_completed"] == 4


def test_late_updates_with_method_signals_resume(tmp_path, monkeypatch):
    """FedCMD's uploads carry similarity signals beside model tensors; pending ones are
    checkpointed with them."""
    cfg = base("fedcmd", tmp_path, client_failure=0.4, client_failure_mode="straggle")
    assert_resume_identical(cfg, tmp_path, monkeypatch)


@pytest.mark.parametrize("name", DECENTRALIZED)
def test_skip_client_in_a_decentralized_round(name, tmp_path, monkeypatch):
    """A decentralized client whose loss goes non-finite is skipped, not the run: it keeps its
    model (a method that mixes after training: the one it ended the previous round with) and
    takes no part in the round's exchange; the others go on."""
    local_update = Algorithm.local_update
    reference = fedpart.run(base(name, tmp_path / "one", rounds=1), write=False)
    cls = ALGORITHMS[name]

    def diverging(self, rnd, client):
        if (rnd, client) == (1, 3):
            raise TrainingError(f"training diverged: non-finite loss at round {rnd} on client 3")
        return local_update(self, rnd, client)

    monkeypatch.setattr(cls, "local_update", diverging)
    cfg = base(name, tmp_path / "two", rounds=2, on_nonfinite="skip_client")
    res = fedpart.run(cfg, write=False)
    assert [r["skipped_nonfinite"] for r in res.metrics] == [0, 1]
    assert_finite(res.metrics)
    if not cls.mix_first:
        before = reference.simulation.store.client_state(3)
        after = res.simulation.store.client_state(3)
        assert before.keys() == after.keys()
        assert all(torch.equal(before[k], after[k]) for k in before)
    # with stop (the default) the same failure ends the run, naming client and round
    monkeypatch.setattr(cls, "local_update", diverging)
    with pytest.raises(TrainingError, match="round 1 on client 3"):
        fedpart.run(base(name, tmp_path / "three", rounds=2), write=False)


def test_an_isolated_client_neither_sends_nor_receives():
    from fedpart.topology.graphs import Topology

    graph = Topology("exponential", 8, 3, seed=0).graph(0)
    cut = graph.isolated([2, 5])
    assert not cut.adj[[2, 5], :].any() and not cut.adj[:, [2, 5]].any()
    keep = [i for i in range(8) if i not in (2, 5)]
    assert (cut.adj[np.ix_(keep, keep)] == graph.adj[np.ix_(keep, keep)]).all()
    for kind in ("uniform", "push"):
        w = cut.weights(kind)
        assert w[2, 2] == 1 and w[5, 5] == 1  # their models are left as they were
    assert graph.isolated([]) is graph
