"""``federation.max_grad_norm``: local SGD steps clipped to a global gradient norm, a step under
the limit unchanged bit for bit, the clipped steps counted per round."""

from __future__ import annotations

import math

import pytest
import torch

import fedpart
from fedpart.config import Config
from fedpart.engine.simulation import Simulation
from fedpart.engine.training import clip_gradient
from fedpart.errors import ConfigError, FedpartError, TrainingError


def cfg(tmp_path, name: str, **federation) -> dict:
    return {
        "seed": 3,
        "dataset": {"name": "digits"},
        "partition": {"kind": "dirichlet", "num_clients": 4, "alpha": 0.5, "min_size": 30},
        "model": {"name": "mlp", "hidden": [16]},
        "algorithm": {"name": "fedavg"},
        "federation": {"rounds": 3, "batch_size": 32, "lr": 0.05, **federation},
        "engine": {"backend": "sequential"},
        "output": {"dir": str(tmp_path / name), "checkpoint_every": 0},
    }


def test_clip_gradient_scales_only_above_the_limit():
    grads = (torch.tensor([3.0, 0.0]), torch.tensor([[4.0]]))  # global norm 5
    same, over = clip_gradient(grads, 5.5)
    assert int(over) == 0 and all(torch.equal(a, b) for a, b in zip(same, grads, strict=True))
    clipped, over = clip_gradient(grads, 1.0)
    assert int(over) == 1
    norm = math.sqrt(sum(float(g.pow(2).sum()) for g in clipped))
    assert norm == pytest.approx(1.0, rel=1e-5)
    assert torch.allclose(clipped[0] / clipped[0][0], grads[0] / grads[0][0])  # direction kept


def test_a_limit_never_reached_changes_nothing_and_a_low_one_clips(tmp_path):
    off = fedpart.run(cfg(tmp_path, "off"))
    high = fedpart.run(cfg(tmp_path, "high", max_grad_norm=1e9))
    low = fedpart.run(cfg(tmp_path, "low", max_grad_norm=1e-3))
    strip = ("wall_seconds", "clipped_steps")
    rows = [
        [{k: v for k, v in r.items() if k not in strip} for r in x.metrics] for x in (off, high)
    ]
    assert rows[0] == rows[1]
    assert off.client_accuracy == high.client_accuracy
    assert all("clipped_steps" not in r for r in off.metrics)
    assert [r["clipped_steps"] for r in high.metrics if "round" in r][:3] == [0, 0, 0]
    assert all(r["clipped_steps"] > 0 for r in low.metrics if r.get("train_loss") is not None)
    assert low.metrics[-1]["train_loss"] > off.metrics[-1]["train_loss"]  # steps of norm 1e-3


def test_clipping_keeps_a_too_large_step_size_finite(tmp_path):
    with pytest.raises(TrainingError, match="non-finite loss"):
        fedpart.run(cfg(tmp_path, "diverges", lr=1e30))
    clipped = fedpart.run(cfg(tmp_path, "clipped", lr=1e30, max_grad_norm=1e-31))
    assert all(math.isfinite(r["train_loss"]) for r in clipped.metrics if "train_loss" in r)


def test_the_batched_backend_refuses_a_limit_and_a_negative_one_is_one_line(tmp_path):
    bad = cfg(tmp_path, "batched", max_grad_norm=1.0)
    bad["engine"] = {"backend": "batched"}
    with pytest.raises(
        FedpartError, match="batched is not possible here: federation.max_grad_norm"
    ):
        Simulation(Config.from_dict(bad))
    with pytest.raises(ConfigError, match="federation.max_grad_norm"):
        Simulation(Config.from_dict(cfg(tmp_path, "negative", max_grad_norm=-1.0)))
