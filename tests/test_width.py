"""Width-sliced submodels and holder averaging (``fedpart.models.width``)."""

from __future__ import annotations

import copy

import pytest
import torch

from fedpart.engine.mixing import weighted_average
from fedpart.models import BlockModel, build_model
from fedpart.models.width import (
    embed_state,
    holder_average,
    index_masks,
    masked_average,
    narrow_model,
    slice_state,
    submodel_state,
)
from fedpart.models.width_plan import width_plan


def build(name: str, shape: tuple[int, ...], classes: int = 10, **options) -> BlockModel:
    torch.manual_seed(0)
    return build_model(name, num_classes=classes, input_shape=shape, **options).eval()


def zeroed_full_model(model: BlockModel, sub: dict, index: dict) -> BlockModel:
    """The full model holding ``sub`` at its positions and zero everywhere else."""
    zero = {k: torch.zeros_like(v) for k, v in model.state_dict().items()}
    full = copy.deepcopy(model)
    full.load_state_dict(embed_state(zero, sub, index))
    return full


# Models the paper uses first (both Pa3dFL CNNs), then the rest of the chain models and ResNet.
CASES = [
    ("pa3dfl_cnn", (3, 32, 32), 100, {}),
    ("pa3dfl_cnn", (1, 28, 28), 10, {}),
    ("fedavgcnn", (1, 28, 28), 10, {"norm": "bn"}),
    ("lenet5", (3, 32, 32), 10, {}),
    ("mlp", (20,), 10, {}),
    ("resnet18", (3, 8, 8), 10, {}),
]


@pytest.mark.parametrize(("name", "shape", "classes", "options"), CASES)
@pytest.mark.parametrize(("p", "kind"), [(1 / 16, "prefix"), (1 / 2, "prefix"), (1 / 4, "rolling")])
def test_submodel_equals_full_model_with_pruned_channels_zeroed(
    name: str, shape: tuple, classes: int, options: dict, p: float, kind: str
) -> None:
    model = build(name, shape, classes, **options)
    index = width_plan(model).index_sets(p=p, kind=kind, offset=5)
    sub = slice_state(model.state_dict(), index)
    narrow = narrow_model(model, p, kind=kind, offset=5)
    narrow.load_state_dict(sub)  # same keys, the client's shapes
    x = torch.randn(3, *shape)
    with torch.no_grad():
        expected = zeroed_full_model(model, sub, index)(x)
        got = narrow(x)
    assert got.shape == (3, classes)
    assert torch.allclose(got, expected, atol=1e-5, rtol=1e-5)
    assert narrow.feature_dim == narrow.features(x).shape[1]


@pytest.mark.parametrize(("name", "shape", "classes", "options"), CASES)
def test_width_one_is_the_full_model(name: str, shape: tuple, classes: int, options: dict) -> None:
    model = build(name, shape, classes, **options)
    sub, _ = submodel_state(model, model.state_dict(), 1.0)
    for key, value in model.state_dict().items():
        assert torch.equal(sub[key], value)
    narrow = narrow_model(model, 1.0)
    x = torch.randn(2, *shape)
    with torch.no_grad():
        assert torch.equal(narrow(x), model(x))


def test_pa3dfl_cifar100_slice_shapes() -> None:
    model = build("pa3dfl_cnn", (3, 32, 32), 100)
    sub, _ = submodel_state(model, model.state_dict(), 1 / 4)
    shapes = {k: tuple(v.shape) for k, v in sub.items()}
    assert shapes == {
        "conv1.weight": (16, 3, 5, 5),  # the image channels stay whole
        "conv1.bias": (16,),
        "conv2.weight": (16, 16, 5, 5),
        "conv2.bias": (16,),
        "fc1.weight": (96, 400),  # the flattened features of 16 kept channels: 16 · 5 · 5
        "fc1.bias": (96,),
        "fc2.weight": (48, 96),
        "fc2.bias": (48,),
        "head.weight": (100, 48),  # the classes stay whole
        "head.bias": (100,),
    }


def test_flatten_keeps_the_features_of_the_kept_channels() -> None:
    model = build("pa3dfl_cnn", (3, 32, 32), 100)
    channels = {g: torch.arange(n) for g, n in width_plan(model).groups.items()}
    channels["conv2"] = torch.tensor([2, 7])
    index = width_plan(model).index_sets(channels)
    fc1 = index["fc1.weight"][1]
    assert fc1 is not None
    assert fc1.tolist() == list(range(50, 75)) + list(range(175, 200))


def test_explicit_channel_sets() -> None:
    model = build("pa3dfl_cnn", (1, 28, 28), 10)
    plan = width_plan(model)
    gen = torch.Generator().manual_seed(1)
    channels = {g: torch.randperm(n, generator=gen)[: n // 3] for g, n in plan.groups.items()}
    index = plan.index_sets(channels)
    sub = slice_state(model.state_dict(), index)
    narrow = narrow_model(model, channels=channels)
    narrow.load_state_dict(sub)
    x = torch.randn(2, 1, 28, 28)
    with torch.no_grad():
        assert torch.allclose(narrow(x), zeroed_full_model(model, sub, index)(x), atol=1e-5)


def test_resnet_groupnorm_slices() -> None:
    model = build("resnet18", (3, 8, 8), 10, norm="gn")
    plan = width_plan(model)
    assert plan.groups["stem"] == 64 and plan.groups["layer4"] == 512
    for p in (1 / 16, 1 / 2):
        narrow = narrow_model(model, p)
        assert narrow.get_submodule("layer4.1.norm2").num_channels == int(512 * p)
        assert narrow(torch.randn(2, 3, 8, 8)).shape == (2, 10)
    with pytest.raises(ValueError, match="GroupNorm"):
        narrow_model(model, 1 / 64)  # one stem channel cannot form two groups


def test_unsliceable_model_is_refused() -> None:
    conv = torch.nn.Conv2d(4, 4, 3, groups=2)
    with pytest.raises(ValueError, match="grouped"):
        width_plan(torch.nn.Sequential(conv))


# --------------------------------------------------------------------------------- averaging
def _two_clients() -> tuple[BlockModel, list, list, list]:
    model = build("pa3dfl_cnn", (1, 28, 28), 10)
    plan = width_plan(model)
    full = model.state_dict()
    index = [plan.index_sets(p=1 / 4), plan.index_sets(p=1 / 2, kind="rolling", offset=3)]
    subs = [
        {k: v + 1.0 + i for k, v in slice_state(full, ix).items()} for i, ix in enumerate(index)
    ]
    return model, index, subs, [1.0, 3.0]


def test_holder_average_per_coordinate() -> None:
    model, index, subs, w = _two_clients()
    full = model.state_dict()
    new = holder_average(full, subs, index, w)
    masks = [index_masks(full, ix) for ix in index]
    for key, value in full.items():
        m0, m1 = masks[0][key], masks[1][key]
        v0 = embed_state(full, subs[0], index[0])[key]
        v1 = embed_state(full, subs[1], index[1])[key]
        both = m0 & m1
        assert torch.allclose(new[key][both], (1.0 * v0 + 3.0 * v1)[both] / 4.0)
        assert torch.allclose(new[key][m0 & ~m1], v0[m0 & ~m1])
        assert torch.allclose(new[key][m1 & ~m0], v1[m1 & ~m0])
        assert torch.equal(new[key][~(m0 | m1)], value[~(m0 | m1)])  # unheld: unchanged
    # the classes and the image channels are held by everyone
    assert bool(masks[0]["head.bias"].all()) and bool(masks[1]["conv1.weight"][:, 0].any())
    assert not bool((masks[0]["fc1.weight"] | masks[1]["fc1.weight"]).all())


def test_masked_form_gives_the_same_average() -> None:
    model, index, subs, w = _two_clients()
    full = model.state_dict()
    dense = [embed_state(full, s, ix) for s, ix in zip(subs, index, strict=True)]
    masks = [index_masks(full, ix) for ix in index]
    a = holder_average(full, subs, index, w)
    b = masked_average(full, dense, masks, w)
    for key in full:
        assert torch.allclose(a[key], b[key])


def test_holder_average_of_full_models_is_fedavg() -> None:
    model = build("lenet5", (3, 32, 32), 10)
    states = []
    for i in range(3):
        s = {k: v.clone() for k, v in model.state_dict().items()}
        for v in s.values():
            if v.is_floating_point():
                v.add_(torch.randn_like(v) * (i + 1))
            else:
                v.fill_(i * 5)
        states.append(s)
    w = [2.0, 1.0, 7.0]
    keys = list(model.state_dict())
    ours = holder_average(model.state_dict(), states, [{}, {}, {}], w)
    ref = weighted_average(states, w, keys)
    for key in keys:
        assert torch.allclose(ours[key], ref[key], atol=1e-6), key
        assert ours[key].dtype == ref[key].dtype


def test_zero_weight_clients_hold_nothing() -> None:
    model, index, subs, _ = _two_clients()
    full = model.state_dict()
    new = holder_average(full, subs, index, [0.0, 0.0])
    for key, value in full.items():
        assert torch.equal(new[key], value)
    with pytest.raises(ValueError):
        holder_average(full, subs, index, [1.0])


def test_a_key_a_client_did_not_send_is_not_held() -> None:
    model, index, subs, w = _two_clients()
    full = model.state_dict()
    subs[1] = {k: v for k, v in subs[1].items() if not k.startswith("head.")}
    new = holder_average(full, subs, index, w)
    assert torch.allclose(new["head.bias"], full["head.bias"] + 1.0)  # client 0's alone
