"""Dropout drawn by the engine from each client's own stream (:mod:`fedpart.engine.dropout`):
the batched backend trains a dropout model with the sequential trainer's masks."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fedpart.config import Config
from fedpart.data import load_dataset
from fedpart.engine import dropout
from fedpart.engine.batched import can_batch, train_clients_batched
from fedpart.engine.data import build_federated_data
from fedpart.engine.recipe import Recipe
from fedpart.engine.training import TrainSettings, train_client
from fedpart.models.base import BlockModel


class DropNet(BlockModel):
    """Two dropout calls a forward (one after the convolution, one in the head)."""

    def __init__(self, p1: float = 0.25, p2: float = 0.5, kind: type = nn.Dropout) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), kind(p1), nn.Flatten())
        self.head = nn.Sequential(nn.Linear(4 * 6 * 6, 16), nn.ReLU(), nn.Dropout(p2))
        self.out = nn.Linear(16, 10)

    def forward(self, x):
        return self.out(self.head(self.body(x)))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    cfg = Config.from_dict(
        {
            "seed": 3,
            "dataset": {"name": "digits", "augment": "none"},
            "partition": {"kind": "dirichlet", "num_clients": 5, "alpha": 0.5, "min_size": 20},
            "model": {"name": "mlp"},
            "algorithm": {"name": "fedavg"},
            "federation": {"rounds": 1, "batch_size": 16, "lr": 0.1},
            "output": {"dir": str(tmp_path_factory.mktemp("dropout") / "run")},
        }
    )
    return build_federated_data(cfg, load_dataset("digits", None))


def _settings() -> TrainSettings:
    return TrainSettings(
        lr=0.1,
        momentum=0.9,
        weight_decay=0.0,
        batch_size=16,
        local_epochs=2,
        drop_last=False,
        seed=7,
    )


def _start(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_a_dropout_model_trains_batched_with_the_sequential_masks(data):
    torch.manual_seed(0)
    model = DropNet()
    assert can_batch(model, [Recipe()]) is None
    clients = list(range(data.num_clients))
    start = _start(model)
    settings = _settings()
    batched = train_clients_batched(
        model, [start] * len(clients), Recipe(), data, clients, 1, settings
    )
    for c, got in zip(clients, batched, strict=True):
        want = train_client(model, start, Recipe(), data, c, 1, settings)
        assert got.steps == want.steps and got.samples == want.samples
        assert got.loss == pytest.approx(want.loss, rel=1e-5, abs=1e-5)
        for k in want.state:
            torch.testing.assert_close(got.state[k], want.state[k], atol=1e-5, rtol=1e-5)
    # the masks are drawn: without them (dropout off) the states would differ
    model.body[2].p = model.head[2].p = 0.0
    plain = train_client(model, start, Recipe(), data, 0, 1, settings)
    assert not torch.allclose(plain.state["out.weight"], batched[0].state["out.weight"])


def test_every_client_draws_its_own_masks_at_the_modules_rate():
    model = DropNet(p1=0.25, p2=0.5)
    x = torch.randn(16, 1, 8, 8)
    with dropout.explicit(model):
        sites = dropout.probe(model, _start(model), x)
    assert sites is not None and sites.calls == ((0.25, (4, 6, 6)), (0.5, (16,)))
    a = dropout.draw(dropout.stream(1, 2, 0, 0, torch.device("cpu")), 16, sites)
    b = dropout.draw(dropout.stream(1, 2, 1, 0, torch.device("cpu")), 16, sites)
    again = dropout.draw(dropout.stream(1, 2, 0, 0, torch.device("cpu")), 16, sites)
    assert torch.equal(a, again) and not torch.equal(a, b)
    first, second = dropout.noise(a, sites, torch.device("cpu"), torch.float32)
    assert first.shape == (16, 4, 6, 6) and second.shape == (16, 16)
    assert set(first.unique().tolist()) == {0.0, torch.tensor(1 / 0.75).item()}
    assert (first == 0).float().mean().item() == pytest.approx(0.25, abs=0.05)
    assert (second == 0).float().mean().item() == pytest.approx(0.5, abs=0.1)


def test_outside_a_fed_step_the_modules_are_nn_dropout():
    model = DropNet()
    x = torch.randn(4, 1, 8, 8)
    with dropout.explicit(model):
        model.eval()
        assert torch.equal(model(x), model(x))  # evaluation: no dropout
        model.train()
        torch.manual_seed(5)
        fed_off = model(x)
    torch.manual_seed(5)
    assert torch.equal(fed_off, model(x))  # nn.Dropout's own draws
    assert "forward" not in vars(model.head[2])  # restored


def test_a_forward_must_take_every_probed_noise():
    model = DropNet()
    x = torch.randn(2, 1, 8, 8)
    with dropout.explicit(model), pytest.raises(RuntimeError, match="called dropout 2 times"):
        with dropout.feeding([torch.ones(2, 4, 6, 6), torch.ones(2, 16), torch.ones(2, 16)]):
            model(x)


def test_other_dropout_modules_keep_a_model_sequential():
    reason = can_batch(DropNet(kind=nn.Dropout2d), [Recipe()])
    assert reason is not None and "Dropout2d" in reason
