"""The batched backend gives the sequential backend's numbers (up to float rounding).

The models here are MLPs: with max-pooling on zero-padded 8x8 digits, exact ties between pooled
values make the trajectory jump by ~1e-4 under a 1e-7 perturbation of the start (the sequential
backend itself does so between thread counts), which would hide real differences.
"""

import pytest
import torch

import fedpart
from fedpart.config import Config
from fedpart.engine.backends import resolve_backend
from fedpart.engine.simulation import Simulation
from fedpart.errors import FedpartError

METHODS = [
    ("fedavg", {}),
    ("fedper", {}),
    ("fedrep", {}),
    ("fedprox", {"mu": 0.1}),
    ("fedbabu", {"finetune_epochs": 1}),
    ("fedseqlayer", {"mode": "anti", "unfreeze_rounds": [0], "finetune_epochs": 1}),
    ("dfedavgm", {}),
    ("dfedavgmp", {}),
    ("dfedavg", {}),
    ("dfedpgp", {}),
    ("osgp", {}),
]


def _run(tiny_cfg, algorithm, options, backend):
    cfg = {
        **tiny_cfg,
        "algorithm": {"name": algorithm, **options},
        "federation": {**tiny_cfg["federation"], "rounds": 3, "weight_decay": 1e-3},
        "topology": {"neighbors": 2}
        if algorithm in ("osgp",) or algorithm.startswith("dfed")
        else {},
        "engine": {"backend": backend},
    }
    return fedpart.run(cfg, write=False)


def test_batched_cnn_round_matches(tiny_cfg):
    """One round of a CNN: identical up to rounding where no pooling tie intervenes."""
    cfg = {
        **tiny_cfg,
        "model": {"name": "fedavgcnn", "padding": 2, "width": 4},
        "federation": {**tiny_cfg["federation"], "rounds": 1, "momentum": 0.0, "lr": 0.01},
    }
    seq = fedpart.run({**cfg, "engine": {"backend": "sequential"}}, write=False)
    bat = fedpart.run({**cfg, "engine": {"backend": "batched"}}, write=False)
    for key, value in seq.simulation.store.global_state.items():
        torch.testing.assert_close(
            value, bat.simulation.store.global_state[key], atol=1e-5, rtol=1e-4
        )
    assert seq.summary["accuracy"]["final"] == pytest.approx(
        bat.summary["accuracy"]["final"], abs=1e-2
    )


@pytest.mark.parametrize(("algorithm", "options"), METHODS)
def test_batched_equals_sequential(tiny_cfg, algorithm, options):
    seq = _run(tiny_cfg, algorithm, options, "sequential")
    bat = _run(tiny_cfg, algorithm, options, "batched")
    assert seq.simulation.backend == "sequential" and bat.simulation.backend == "batched"
    for c in range(6):
        a = seq.simulation.algorithm.eval_state(c)
        b = bat.simulation.algorithm.eval_state(c)
        for key in a:
            torch.testing.assert_close(a[key], b[key], atol=1e-4, rtol=1e-4)
    for key in ("accuracy", "accuracy_weighted"):
        assert seq.summary[key]["final"] == pytest.approx(bat.summary[key]["final"], abs=1e-2)
    for r1, r2 in zip(seq.metrics, bat.metrics, strict=True):
        assert r1["train_loss"] == pytest.approx(r2["train_loss"], rel=1e-4)
        assert r1["up_bytes"] == r2["up_bytes"] and r1["compute_proxy"] == r2["compute_proxy"]


def test_auto_picks_the_fastest_exact_backend(tiny_cfg):
    from fedpart.algorithms import ALGORITHMS
    from fedpart.models import build_model

    def backend(algo, engine="auto", model="mlp", device="cpu"):
        cfg = Config.from_dict(
            {
                **tiny_cfg,
                "algorithm": {"name": algo},
                "engine": {"backend": engine, "device": device},
            }
        )
        net = build_model(model, num_classes=10, input_shape=(1, 28, 28))
        return resolve_backend(cfg, ALGORITHMS[algo].__new__(ALGORITHMS[algo]), net)

    assert backend("fedper") == "sequential"  # on the CPU the reference is the fastest
    assert backend("fedper", engine="batched") == "batched"
    assert backend("ditto") == "sequential"
    assert backend("dfedpgp", engine="batched") == "batched"
    assert backend("fedper", engine="sequential") == "sequential"
    assert backend("fedper", device="cuda") == "batched"  # resolved only; nothing runs
    assert backend("fedper", device="cuda", model="lenet5") == "sequential"  # BatchNorm
    with pytest.raises(FedpartError, match="supports sequential"):
        backend("ditto", engine="batched")
    with pytest.raises(FedpartError, match="BatchNorm"):
        backend("fedper", engine="batched", model="lenet5")
    assert Simulation(Config.from_dict(tiny_cfg)).backend == "sequential"


def test_auto_runs_worker_processes_only_where_a_round_pays_for_them(tiny_cfg, monkeypatch):
    """``auto`` on a CPU with several cores: processes for a round of at least
    ``PARALLEL_MIN_MACS`` multiply-adds, sequential below it, for a method without the process
    backend, with one core, or inside a parallel sweep (``FEDPART_AUTO_WORKERS=0``)."""
    import fedpart.engine.backends as backends
    import fedpart.engine.parallel as parallel

    def backend(algo="fedper"):
        cfg = Config.from_dict({**tiny_cfg, "algorithm": {"name": algo}})
        return Simulation(cfg, quiet=True).backend

    monkeypatch.setattr(parallel, "default_workers", lambda: 2)
    monkeypatch.setenv("FEDPART_AUTO_WORKERS", "1")  # as the command line sets it
    cfg = Config.from_dict({**tiny_cfg, "algorithm": {"name": "fedper"}})
    sim = Simulation(cfg, quiet=True)
    macs, per_client = backends.round_macs(cfg, sim.algorithm, sim.model, sim.data)
    # 3 of 6 clients, ~40 samples each, one epoch of a 64·32 + 32·10 MLP: about 3·40·3·2.4k
    assert 1e5 < macs < 1e7
    assert per_client == pytest.approx(macs / 3)
    assert backend() == "sequential"  # the tiny round does not pay for workers
    monkeypatch.setattr(backends, "PARALLEL_MIN_MACS", macs)
    assert backend() == "sequential"  # ... nor does each client's share
    monkeypatch.setattr(backends, "PARALLEL_MIN_CLIENT_MACS", per_client)
    assert backend() == "processes"
    assert backend("ditto") == "sequential"  # its own local update: no process backend
    monkeypatch.setenv("FEDPART_AUTO_WORKERS", "0")  # a parallel sweep's run
    assert backend() == "sequential"
    monkeypatch.delenv("FEDPART_AUTO_WORKERS")  # Python API: the caller's main may be unguarded
    assert backend() == "sequential"
    monkeypatch.setenv("FEDPART_AUTO_WORKERS", "1")
    monkeypatch.setattr(parallel, "default_workers", lambda: 1)
    assert backend() == "sequential"
