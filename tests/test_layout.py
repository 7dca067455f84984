"""Convolution layout (``engine.conv_layout``) and the pool-then-ReLU order of ``ConvBlock``."""

import pytest
import torch
import torch.nn.functional as F

import fedpart
from fedpart.config import Config
from fedpart.engine.build import channels_last
from fedpart.errors import ConfigError
from fedpart.models import build_model


def _images(n: int = 24) -> torch.Tensor:
    """MNIST-like inputs: a zero background (exact ties inside pooling windows) and a patch."""
    g = torch.Generator().manual_seed(0)
    x = torch.zeros(n, 1, 28, 28)
    x[:, :, 6:22, 6:22] = torch.rand(n, 1, 16, 16, generator=g)
    return x


def _relu_then_pool(model, x):
    for conv in (model.conv1, model.conv2):
        x = F.max_pool2d(F.relu(F.conv2d(x, conv.weight, conv.bias)), 2)
    return model.fc2(model.fc1(x))


def test_pool_then_relu_is_bit_identical_to_relu_then_pool():
    torch.manual_seed(0)
    model = build_model("fedavgcnn", num_classes=10, input_shape=(1, 28, 28))
    x, y = _images(), torch.arange(24) % 10
    params = list(model.parameters())
    want = _relu_then_pool(model, x)
    got = model(x)
    assert torch.equal(want, got)
    g_want = torch.autograd.grad(F.cross_entropy(want, y), params)
    g_got = torch.autograd.grad(F.cross_entropy(got, y), params)
    assert all(torch.equal(a, b) for a, b in zip(g_want, g_got, strict=True))


def test_channels_last_changes_the_layout_not_the_function():
    torch.manual_seed(0)
    model = build_model("fedavgcnn", num_classes=10, input_shape=(1, 28, 28))
    x, y = _images(), torch.arange(24) % 10
    params = list(model.parameters())
    assert not model.channels_last
    ref = model(x)
    g_ref = torch.autograd.grad(F.cross_entropy(ref, y), params)
    model.set_channels_last(True)
    assert model.channels_last
    # the convolution really runs channels-last (a 1-channel input included)
    out = model.conv1._conv_forward(
        x.to(memory_format=torch.channels_last),
        model.conv1.weight.to(memory_format=torch.channels_last),
        model.conv1.bias,
    )
    assert out.is_contiguous(memory_format=torch.channels_last) and not out.is_contiguous()
    got = model(x)
    g_got = torch.autograd.grad(F.cross_entropy(got, y), params)
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    for a, b in zip(g_got, g_ref, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    # parameters and state dict keep their layout
    assert all(p.is_contiguous() for p in model.parameters())
    model.set_channels_last(False)
    assert not model.channels_last and torch.equal(model(x), ref)


def test_conv_layout_option(tiny_cfg):
    def cfg(**engine):
        return Config.from_dict({**tiny_cfg, "engine": engine})

    cnn = build_model("fedavgcnn", num_classes=10, input_shape=(1, 28, 28))
    lenet = build_model("lenet5", num_classes=10, input_shape=(1, 28, 28))
    assert channels_last(cfg(), cnn) is True  # auto on the CPU
    assert channels_last(cfg(), lenet) is False  # measured slower for LeNet5
    assert channels_last(cfg(conv_layout="channels_last"), lenet) is True
    assert channels_last(cfg(conv_layout="contiguous"), cnn) is False
    assert channels_last(cfg(device="cuda", conv_layout="auto"), cnn) is False
    assert channels_last(cfg(device="cuda", conv_layout="channels_last"), cnn) is True
    with pytest.raises(ConfigError, match="engine.conv_layout"):
        cfg(conv_layout="nhwc")


def test_runs_in_both_layouts_agree(tiny_cfg):
    """The same run in both layouts: the same trajectory up to float rounding, and the batched
    backend (which computes NCHW under vmap) leaves the model's layout as it found it."""
    base = {
        **tiny_cfg,
        "model": {"name": "fedavgcnn", "padding": 2, "width": 4},
        "algorithm": {"name": "fedper"},
        "federation": {**tiny_cfg["federation"], "rounds": 1, "momentum": 0.0, "lr": 0.01},
    }
    runs = {
        layout: fedpart.run({**base, "engine": {"conv_layout": layout}}, write=False)
        for layout in ("contiguous", "channels_last")
    }
    assert runs["channels_last"].simulation.model.channels_last
    assert not runs["contiguous"].simulation.model.channels_last
    a, b = (runs[k].simulation.store.global_state for k in ("contiguous", "channels_last"))
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-5, rtol=1e-4)
    batched = fedpart.run(
        {**base, "engine": {"conv_layout": "channels_last", "backend": "batched"}}, write=False
    )
    assert batched.simulation.model.channels_last
    for key in a:
        torch.testing.assert_close(
            batched.simulation.store.global_state[key], b[key], atol=1e-5, rtol=1e-4
        )


@pytest.mark.parametrize(
    ("name", "shape", "options"),
    [
        ("uapdfl_cnn", (1, 28, 28), {}),
        ("lenet5", (1, 28, 28), {}),
        ("pa3dfl_cnn", (3, 32, 32), {}),
        ("vgg11", (3, 32, 32), {}),
        ("resnet18", (3, 32, 32), {"norm": "gn"}),
    ],
)
def test_every_conv_model_computes_the_same_function_channels_last(name, shape, options):
    torch.manual_seed(0)
    model = build_model(name, num_classes=10, input_shape=shape, **options)
    x = torch.randn(4, *shape)
    model.eval()
    ref = model(x)
    model.set_channels_last(True)
    assert model.channels_last
    torch.testing.assert_close(model(x), ref, atol=1e-4, rtol=1e-4)
    assert all(p.is_contiguous() for p in model.parameters())
