"""Factorized layers (FLANC Eq. 3, Pa3dFL Eq. 4) and the factorized Pa3dFL CNNs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call

from fedpart.models import build_model
from fedpart.models.factorization import (
    Factorization,
    flanc_eq5_ranks,
    offdiagonal_gram_penalty,
    pa3dfl_ranks,
)
from fedpart.models.factorized import FactorizedCNN, FactorizedConv2d, FactorizedLinear
from fedpart.models.width import (
    embed_state,
    holder_average,
    model_index_sets,
    narrow_model,
    slice_state,
)


def conv(decomposition: str, **kw) -> FactorizedConv2d:
    torch.manual_seed(0)
    return FactorizedConv2d(8, 16, 3, decomposition=decomposition, p_min=1 / 4, padding=1, **kw)


def linear(decomposition: str) -> FactorizedLinear:
    torch.manual_seed(0)
    return FactorizedLinear(24, 16, decomposition=decomposition, p_min=1 / 4)


@pytest.mark.parametrize("decomposition", ["pa3dfl", "flanc"])
def test_full_width_layer_computes_with_its_composed_weight(decomposition: str) -> None:
    c, lin = conv(decomposition), linear(decomposition)
    x = torch.randn(3, 8, 6, 6)
    assert c.weight().shape == (16, 8, 3, 3)
    assert torch.allclose(c(x), F.conv2d(x, c.weight(), c.bias, padding=1), atol=1e-5)
    z = torch.randn(3, 24)
    assert lin.weight().shape == (16, 24)
    assert torch.allclose(lin(z), F.linear(z, lin.weight(), lin.bias), atol=1e-5)


def test_pa3dfl_output_channel_ij_is_u_i_times_v_j() -> None:
    layer = conv("pa3dfl")
    geo = layer.geometry
    r1, r2, k, s = geo.r1, geo.r2, 3, 8
    assert (r1, r2) == (4, 9)  # R1 = T·p_min = 16/4; R2 = max(min(S, T), k²) = max(8, 9)
    u = layer.u.detach().view(r1, k * k, r2)
    v = layer.v.detach().view(r2, 16 // r1, s)
    w = layer.weight().detach()
    for i in range(r1):
        for j in range(16 // r1):
            kernel = (u[i] @ v[:, j, :]).t().reshape(s, k, k)  # u_i v_j ∈ R^{k²×S}
            assert torch.allclose(w[j * r1 + i], kernel, atol=1e-6)  # j-major channel order


def test_flanc_output_channel_is_its_consecutive_columns() -> None:
    layer = conv("flanc")
    geo = layer.geometry
    r1, r2, k, groups = geo.r1, geo.r2, 3, 8 // geo.r1
    assert (r1, r2) == (2, 4)  # R1 = S·p_min, R2 = T/4
    theta = layer.u.detach() @ layer.v.detach()  # columns (o, g): o-major
    w = layer.weight().detach()
    for o in range(16):
        for g in range(groups):
            column = theta[:, o * groups + g].view(r1, k, k)
            assert torch.allclose(w[o, g * r1 : (g + 1) * r1], column, atol=1e-6)


@pytest.mark.parametrize("decomposition", ["pa3dfl", "flanc"])
@pytest.mark.parametrize("p", [1 / 4, 1 / 2, 1.0])
def test_pruning_keeps_a_prefix_of_the_full_weight(decomposition: str, p: float) -> None:
    for layer in (conv(decomposition), linear(decomposition)):
        small = layer.narrow(p)
        t, s = int(16 * p), int(layer.geometry.in_channels * p)
        assert small.u.shape == layer.u.shape  # θ_u is never pruned
        full = layer.weight().detach()
        assert torch.allclose(small.weight().detach(), full[:t, :s], atol=1e-6)
        assert small.v.numel() == layer.v.numel() * t * s // (16 * layer.geometry.in_channels)
    first = conv(decomposition, first=True).narrow(p, first=True)
    assert first.geometry.in_channels == 8  # a first layer keeps its image channels


def test_geometry_errors() -> None:
    with pytest.raises(ValueError, match="divide"):
        Factorization("pa3dfl", 8, 10, 3, 4, 9)
    with pytest.raises(ValueError, match="whole"):
        pa3dfl_ranks(3, 24, 5, 1 / 16, conv=True)
    with pytest.raises(ValueError, match="whole"):
        FactorizedCNN(10, (1, 28, 28), variant="fmnist", width=0.3)


# Spec §3.5: (S, T, k, R1, R2, |θ_u|, |θ_v| full) per layer, p_min = 1/16.
SHAPES = {
    "cifar100": {
        "conv1": (3, 64, 5, 4, 25, 2_500, 1_200),
        "conv2": (64, 64, 5, 4, 64, 6_400, 65_536),
        "fc1": (1600, 384, 0, 24, 24, 576, 614_400),
        "fc2": (384, 192, 0, 12, 12, 144, 73_728),
    },
    "fmnist": {
        "conv1": (1, 32, 5, 2, 25, 1_250, 400),
        "conv2": (32, 64, 5, 4, 32, 3_200, 16_384),
        "fc1": (3136, 512, 0, 32, 32, 1_024, 1_605_632),
        "fc2": (512, 128, 0, 8, 8, 64, 65_536),
    },
}


@pytest.mark.parametrize(
    ("variant", "shape", "classes"), [("cifar100", (3, 32, 32), 100), ("fmnist", (1, 28, 28), 10)]
)
def test_factorized_pa3dfl_cnn_shapes_match_the_spec_table(
    variant: str, shape: tuple, classes: int
) -> None:
    model = FactorizedCNN(classes, shape, variant=variant)
    state = model.state_dict()
    for name, (s, t, k, r1, r2, nu, nv) in SHAPES[variant].items():
        geo = model.layer_geometry(name)
        assert (geo.in_channels, geo.out_channels, geo.kernel_size) == (s, t, k)
        assert (geo.r1, geo.r2) == (r1, r2)
        assert state[f"general.{name}_u"].numel() == nu
        assert state[f"personal.{name}_v"].numel() == nv
        assert state[f"general.{name}_bias"].shape == (t,)
    hidden = SHAPES[variant]["fc2"][1]
    assert state["head.weight"].shape == (classes, hidden)  # the head is not decomposed
    assert model.block_names == ("general", "personal", "head")
    assert set(model.general_keys()) | set(model.personal_keys()) < set(state)


def test_resnet18_decomposition_totals_match_the_spec() -> None:
    resnet = build_model(
        "resnet18", num_classes=10, input_shape=(3, 32, 32), stem="imagenet", norm="gn"
    )
    nu = nv = 0
    for module in resnet.modules():
        if isinstance(module, torch.nn.Conv2d):
            s, t, k = module.in_channels, module.out_channels, module.kernel_size[0]
            r1, r2 = pa3dfl_ranks(s, t, k, 1 / 16, conv=True)
            nu += k * k * r1 * r2
            nv += r2 * (t // r1) * s
    assert (nu, nv) == (706_948, 19_532_080)


@pytest.mark.parametrize("decomposition", ["pa3dfl", "flanc"])
def test_factorized_cnn_at_full_width_is_the_plain_cnn_with_composed_weights(
    decomposition: str,
) -> None:
    torch.manual_seed(0)
    model = FactorizedCNN(100, (3, 32, 32), decomposition=decomposition).eval()
    plain = build_model("pa3dfl_cnn", num_classes=100, input_shape=(3, 32, 32)).eval()
    weights = model.composed_weights()
    state = {}
    for name in ("conv1", "conv2", "fc1", "fc2"):
        state[f"{name}.weight"] = weights[name].detach()
        state[f"{name}.bias"] = model.general[f"{name}_bias"].detach()
    state["head.weight"], state["head.bias"] = model.head.weight, model.head.bias
    plain.load_state_dict(state)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.allclose(model(x), plain(x), atol=1e-5)


@pytest.mark.parametrize(
    ("decomposition", "ranks"), [("pa3dfl", "flanc"), ("flanc", "flanc"), ("flanc", "eq5")]
)
@pytest.mark.parametrize("p", [1 / 16, 1 / 2])
def test_narrow_factorized_cnn_is_the_full_one_with_pruned_factors_zeroed(
    decomposition: str, ranks: str, p: float
) -> None:
    torch.manual_seed(1)
    kw = {"variant": "fmnist", "decomposition": decomposition, "ranks": ranks}
    model = FactorizedCNN(10, (1, 28, 28), **kw).eval()
    index = model_index_sets(model, p)
    sub = slice_state(model.state_dict(), index)
    small = narrow_model(model, p)
    assert {k: tuple(v.shape) for k, v in small.state_dict().items()} == {
        k: tuple(v.shape) for k, v in sub.items()
    }
    for key in model.general_keys():
        assert torch.equal(sub[key], model.state_dict()[key])  # θ_u whole at every width
    zero = {k: torch.zeros_like(v) for k, v in model.state_dict().items()}
    masked = FactorizedCNN(10, (1, 28, 28), **kw).eval()
    masked.load_state_dict(embed_state(zero, sub, index))
    x = torch.randn(2, 1, 28, 28)
    with torch.no_grad():
        assert torch.allclose(small(x), masked(x), atol=1e-5)


def test_flanc_layout_with_eq5_ranks_has_about_pa3dfl_s_personal_size() -> None:
    # Table 3's "FLANC decomposition" read as a change of layout only: Eq. 5's R2, FLANC's R1
    assert flanc_eq5_ranks(32, 64, 5, 1 / 16) == (2, 32)  # R2 = max(min(S, T), k²)
    assert flanc_eq5_ranks(1, 32, 5, 1 / 16, first=True) == (1, 25)
    assert flanc_eq5_ranks(3136, 512, 0, 1 / 16) == (196, 196)  # linear: R2 = R1

    def sizes(decomposition: str, ranks: str) -> tuple[int, int]:
        model = FactorizedCNN(
            10, (1, 28, 28), variant="fmnist", decomposition=decomposition, ranks=ranks
        )
        state = model.state_dict()
        return sum(state[k].numel() for k in model.general_keys()), sum(
            state[k].numel() for k in model.personal_keys()
        )

    assert sizes("pa3dfl", "flanc") == (5_538, 1_687_952)
    assert sizes("flanc", "flanc") == (27_112, 1_130_752)
    assert sizes("flanc", "eq5") == (41_665, 1_704_736)
    with pytest.raises(ValueError, match="rank rule"):
        FactorizedCNN(10, (1, 28, 28), variant="fmnist", ranks="svd")


def test_holder_average_of_factorized_clients_averages_theta_u_uniformly() -> None:
    torch.manual_seed(2)
    model = FactorizedCNN(10, (1, 28, 28), variant="fmnist", local_head=True)
    full = model.state_dict()
    widths = [1 / 16, 1 / 4, 1.0]
    index = [model_index_sets(model, p) for p in widths]
    subs = [{k: v + i for k, v in slice_state(full, ix).items()} for i, ix in enumerate(index)]
    new = holder_average(full, subs, index, [1.0, 1.0, 1.0])
    for key in model.general_keys():  # Eq. (6): the plain mean of the three clients
        assert torch.allclose(new[key], full[key] + 1.0)
    bias = new["general.fc1_bias"] - full["general.fc1_bias"]
    assert torch.allclose(bias[:32], torch.full((32,), 1.0))  # all three hold the first p_min·T
    assert torch.allclose(bias[128:], torch.full((384,), 2.0))  # only the full-width client


def test_functional_call_and_gradients_reach_both_factors() -> None:
    torch.manual_seed(3)
    model = FactorizedCNN(10, (1, 28, 28), variant="fmnist", width=1 / 4)
    params = {k: v.detach().clone().requires_grad_(True) for k, v in model.state_dict().items()}
    x, y = torch.randn(4, 1, 28, 28), torch.randint(0, 10, (4,))
    loss = F.cross_entropy(functional_call(model, params, (x,)), y)
    loss.backward()
    for key, value in params.items():
        assert value.grad is not None and value.grad.abs().sum() > 0, key
    assert torch.allclose(functional_call(model, params, (x,)), model(x))


def test_orthogonality_penalty() -> None:
    q, _ = torch.linalg.qr(torch.randn(25, 8))
    assert offdiagonal_gram_penalty(q) < 1e-10
    u = torch.ones(4, 2)
    assert offdiagonal_gram_penalty(u) == 2 * 16.0


@pytest.mark.parametrize("decomposition", ["pa3dfl", "flanc"])
def test_vmap_over_stacked_clients(decomposition: str) -> None:
    from torch.func import stack_module_state, vmap

    torch.manual_seed(4)
    models = [
        FactorizedCNN(10, (1, 28, 28), variant="fmnist", decomposition=decomposition, width=1 / 4)
        for _ in range(2)
    ]
    params, _ = stack_module_state(models)
    x = torch.randn(2, 3, 1, 28, 28)
    out = vmap(lambda p, xb: functional_call(models[0], p, (xb,)))(params, x)
    for i, model in enumerate(models):
        assert torch.allclose(out[i], model(x[i]), atol=1e-6)
