"""The batched local-training backend equals the sequential reference ``train_client``."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from fedpart.config import Config
from fedpart.data import load_dataset
from fedpart.engine import batched_step
from fedpart.engine.batched import can_batch, train_clients_batched
from fedpart.engine.data import ClientData, FederatedData, build_federated_data
from fedpart.engine.recipe import LossTerm, Phase, Recipe, proximal
from fedpart.engine.training import TrainResult, TrainSettings, train_client
from fedpart.errors import TrainingError
from fedpart.models import build_model

ATOL = 1e-5


def _data(tmp_path, *, num_clients: int = 6, augment: str = "auto") -> FederatedData:
    cfg = Config.from_dict(
        {
            "seed": 3,
            "dataset": {"name": "digits", "augment": augment},
            "partition": {
                "kind": "dirichlet",
                "num_clients": num_clients,
                "alpha": 0.5,
                "min_size": 20,
            },
            "model": {"name": "mlp", "hidden": [32]},
            "algorithm": {"name": "fedavg"},
            "federation": {"rounds": 1, "batch_size": 16, "lr": 0.1},
            "output": {"dir": str(tmp_path / "run")},
        }
    )
    return build_federated_data(cfg, load_dataset("digits", None))


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> FederatedData:
    return _data(tmp_path_factory.mktemp("batched"))


def _model(name: str = "mlp", seed: int = 0):
    torch.manual_seed(seed)
    if name == "mlp":
        return build_model("mlp", num_classes=10, input_shape=(1, 8, 8), hidden=[32, 16])
    if name == "fedavgcnn":
        return build_model("fedavgcnn", num_classes=10, input_shape=(1, 8, 8), padding=2)
    return build_model(name, num_classes=10, input_shape=(1, 28, 28))


def _starts(model, n: int) -> list[dict[str, torch.Tensor]]:
    """Different start states per client (the model's state plus a client-specific shift)."""
    base = {k: v.detach().clone() for k, v in model.state_dict().items()}
    gen = torch.Generator().manual_seed(11)
    return [
        {k: v + 0.01 * torch.randn(v.shape, generator=gen) for k, v in base.items()}
        for _ in range(n)
    ]


def _settings(**over) -> TrainSettings:
    kw = dict(
        lr=0.05,
        momentum=0.9,
        weight_decay=1e-3,
        batch_size=16,
        local_epochs=2,
        drop_last=False,
        seed=7,
    )
    kw.update(over)
    return TrainSettings(**kw)


def _check(
    model, data, recipe, clients, settings, frozen=frozenset(), chunk=None, rnd=2
) -> list[TrainResult]:
    starts = _starts(model, len(clients))
    snapshot = [{k: v.clone() for k, v in s.items()} for s in starts]
    batched = train_clients_batched(
        model, starts, recipe, data, clients, rnd, settings, frozen, chunk=chunk
    )
    for s, before in zip(starts, snapshot, strict=True):  # starts not modified
        for k in s:
            assert torch.equal(s[k], before[k])
    assert len(batched) == len(clients)
    for start, client, got in zip(starts, clients, batched, strict=True):
        want = train_client(model, start, recipe, data, client, rnd, settings, frozen)
        assert got.samples == want.samples
        assert got.steps == want.steps
        assert got.phases == want.phases
        assert got.loss == pytest.approx(want.loss, abs=ATOL, rel=1e-5)
        assert list(got.state) == list(want.state)
        for k in want.state:
            torch.testing.assert_close(got.state[k], want.state[k], atol=ATOL, rtol=1e-5)
    return batched


@pytest.mark.parametrize("fused", [True, False])
def test_plain_recipe_momentum_weight_decay(data, fused, monkeypatch):
    monkeypatch.setattr(batched_step, "_FUSED_SGD", fused and batched_step._FUSED_SGD)
    sizes = [c.num_train for c in data.clients]
    assert len(set(sizes)) > 1  # the clients really differ in size
    out = _check(_model(), data, Recipe(), list(range(data.num_clients)), _settings())
    assert all(r.steps > 0 and r.loss > 0 for r in out)


def test_fedavgcnn_plain_recipe(data):
    _check(_model("fedavgcnn"), data, Recipe(), [0, 1, 2], _settings(local_epochs=1))


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("drop_last", [False, True])
def test_unequal_sizes_and_last_batches(data, drop_last, fused, monkeypatch):
    monkeypatch.setattr(batched_step, "_FUSED_SGD", fused and batched_step._FUSED_SGD)
    # batch 24 does not divide the client sizes: ragged last batches and unequal step counts
    clients = [5, 0, 3, 1]
    settings = _settings(batch_size=24, drop_last=drop_last, momentum=0.5)
    _check(_model(), data, Recipe(), clients, settings, chunk=3)


def test_client_smaller_than_batch(data):
    n = max(c.num_train for c in data.clients)
    settings = _settings(batch_size=n - 3, drop_last=True)  # the smallest clients take one step
    _check(_model(), data, Recipe(), list(range(data.num_clients)), settings)


def test_two_phase_fedrep_like(data):
    model = _model()
    recipe = Recipe(
        phases=(
            Phase(blocks=("classifier",), epochs=3, lr_scale=2.0, name="head"),
            Phase(blocks=("fc1", "fc2"), epochs=1, name="body"),
        )
    )
    out = _check(model, data, recipe, [4, 2, 0], _settings())
    head = ("classifier.weight", "classifier.bias")
    assert [p[0] for p in out[0].phases] == [
        head,
        ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"),
    ]


def test_frozen_blocks_and_skipped_phase(data):
    model = _model()
    recipe = Recipe(
        phases=(Phase(blocks=("fc1",), epochs=1), Phase(blocks=None, epochs=None, lr_scale=0.5))
    )
    out = _check(model, data, recipe, [1, 3], _settings(), frozen={"fc1"})
    start = _starts(model, 2)
    assert len(out[0].phases) == 1  # the fc1-only phase trains nothing and is not logged
    for r, s in zip(out, start, strict=True):
        for k in ("fc1.weight", "fc1.bias"):
            assert torch.equal(r.state[k], s[k])


def test_proximal_loss_term(data):
    model = _model()
    reference = {k: torch.zeros_like(v) for k, v in model.state_dict().items()}
    term = LossTerm("proximal", proximal(reference), weight=0.5)
    recipe = Recipe(phases=(Phase(loss_terms=(term,)),))
    _check(model, data, recipe, [0, 2, 5], _settings(batch_size=20))


def test_custom_criterion_grouped_by_batch_length(data):
    def smoothed(logits, y):
        return F.cross_entropy(logits, y, label_smoothing=0.1)

    recipe = Recipe(criterion=smoothed)
    _check(_model(), data, recipe, [0, 1, 2, 3], _settings(batch_size=24))


def test_objective(data):
    def objective(model, state, x, y):
        logits = torch.func.functional_call(model, state, (x,))
        return F.cross_entropy(logits, y) + 0.1 * logits.pow(2).mean()

    recipe = Recipe(objective=objective)
    _check(_model(), data, recipe, [3, 1, 4], _settings(batch_size=24, weight_decay=0.0))


def test_augmentation_draws_match(tmp_path):
    data = _data(tmp_path, num_clients=4, augment="crop_flip")
    _check(_model(), data, Recipe(), [0, 1, 2, 3], _settings(momentum=0.0, local_epochs=1))


def test_client_without_data(data):
    clients = list(data.clients)
    c = clients[1]
    clients[1] = ClientData(c.train[:0], c.val, c.test)
    empty = dataclasses.replace(data, clients=clients)
    out = _check(_model(), empty, Recipe(), [0, 1, 2], _settings())
    assert out[1].steps == 0 and out[1].loss == 0.0 and out[1].phases == []


def test_divergence_raises(data):
    model = _model()
    starts = _starts(model, 2)
    starts[1] = {k: v * float("nan") for k, v in starts[1].items()}
    with pytest.raises(TrainingError, match="non-finite loss at round 2 on client 4"):
        train_clients_batched(model, starts, Recipe(), data, [3, 4], 2, _settings())


def test_can_batch():
    mlp = _model()
    recipe = Recipe()
    assert can_batch(mlp, [recipe, recipe, Recipe()]) is None
    reason = can_batch(_model("lenet5"), [recipe])
    assert reason is not None and "buffers" in reason and "BatchNorm" in reason
    assert "\n" not in reason
    ref = {k: v.detach() for k, v in mlp.state_dict().items()}
    a = Recipe(phases=(Phase(loss_terms=(LossTerm("p", proximal(ref)),)),))
    b = Recipe(phases=(Phase(loss_terms=(LossTerm("p", proximal(ref)),)),))
    assert can_batch(mlp, [a, a]) is None
    # recipes are data: the same function and equal tensors make equal recipes
    assert a == b and hash(a) == hash(b) and can_batch(mlp, [a, b]) is None
    moved = {k: v + 1 for k, v in ref.items()}
    c = Recipe(phases=(Phase(loss_terms=(LossTerm("p", proximal(moved)),)),))
    reason = can_batch(mlp, [a, c])
    assert reason is not None and "recipe 1" in reason
    with pytest.raises(ValueError, match="buffers"):
        train_clients_batched(_model("lenet5"), [], recipe, None, [], 0, _settings())  # type: ignore[arg-type]
