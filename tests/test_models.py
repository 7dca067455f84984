"""The model zoo: exact parameter counts from the specs, block structure, shapes, errors, vmap."""

from __future__ import annotations

import pytest
import torch
from torch.func import functional_call, stack_module_state, vmap

from fedpart.errors import ConfigError
from fedpart.models import MODELS, BlockModel, ModelInfo, build_model, count_parameters


def build(name: str, shape: tuple[int, ...], classes: int = 10, **options) -> BlockModel:
    return build_model(name, num_classes=classes, input_shape=shape, **options)


def tensor_sizes(model: BlockModel) -> dict[str, int]:
    return {k: p.numel() for k, p in model.named_parameters()}


# One configuration per model and input kind: (name, options, input shape, classes).
CASES = [
    ("fedavgcnn", {}, (1, 28, 28), 10),
    ("fedavgcnn", {}, (3, 32, 32), 100),
    ("fedavgcnn", {}, (3, 64, 64), 200),
    ("fedavgcnn", {"norm": "bn", "width": 4}, (1, 28, 28), 10),
    ("fedavgcnn", {"padding": 2}, (1, 8, 8), 10),
    ("uapdfl_cnn", {}, (3, 32, 32), 10),
    ("uapdfl_cnn", {}, (3, 28, 28), 9),
    ("lenet5", {}, (3, 32, 32), 10),
    ("lenet5", {"fc_layers": 1}, (1, 28, 28), 10),
    ("lenet5", {"fc_layers": 3}, (3, 64, 64), 200),
    ("pa3dfl_cnn", {}, (3, 32, 32), 100),
    ("pa3dfl_cnn", {}, (1, 28, 28), 10),
    ("resnet18", {}, (3, 32, 32), 10),
    ("resnet18", {"norm": "gn"}, (1, 28, 28), 10),
    ("resnet18", {"stem": "imagenet", "norm": "gn", "gn_groups": 32}, (3, 64, 64), 200),
    ("vgg11", {}, (3, 32, 32), 10),
    ("vgg11", {}, (3, 64, 64), 200),
    ("mlp", {}, (64,), 10),
    ("mlp", {"hidden": [32]}, (1, 28, 28), 10),
    ("mlp", {"hidden": []}, (3, 8, 8), 4),
]
CASE_IDS = [
    f"{n}-{'x'.join(map(str, s))}-{'-'.join(f'{k}={v}' for k, v in o.items())}"
    for n, o, s, _ in CASES
]


# --------------------------------------------------------------------------------- registry
def test_registry_lists_every_model_with_documented_options() -> None:
    expected = {"fedavgcnn", "uapdfl_cnn", "lenet5", "pa3dfl_cnn", "resnet18", "vgg11", "mlp"}
    assert set(MODELS) == expected
    for name, info in MODELS.items():
        assert isinstance(info, ModelInfo) and info.name == name and info.description
        assert all(isinstance(doc, str) and doc for doc in info.options.values())
    assert set(MODELS["fedavgcnn"].options) == {"padding", "width", "norm"}
    assert set(MODELS["lenet5"].options) == {"fc_layers"}
    assert set(MODELS["pa3dfl_cnn"].options) == {"variant"}
    assert set(MODELS["resnet18"].options) == {"stem", "norm", "gn_groups"}
    assert set(MODELS["mlp"].options) == {"hidden"}


# --------------------------------------------------------------------------------- fedavgcnn
def test_fedavgcnn_mnist_per_layer_counts_match_fedseqlayer_table3() -> None:
    model = build("fedavgcnn", (1, 28, 28))
    assert tensor_sizes(model) == {
        "conv1.weight": 800,
        "conv1.bias": 32,
        "conv2.weight": 51_200,
        "conv2.bias": 64,
        "fc1.weight": 524_288,
        "fc1.bias": 512,
        "fc2.weight": 5_120,
        "fc2.bias": 10,
    }
    assert count_parameters(model) == 582_026
    assert model.block_names == ("conv1", "conv2", "fc1", "fc2")
    assert model.head_names == ("fc2",)
    assert model.body_names() == ("conv1", "conv2", "fc1")
    assert model.feature_dim == 512


@pytest.mark.parametrize(
    "shape, classes, dim, blocks, total",
    [
        ((1, 28, 28), 10, 1024, (832, 51_264, 524_800, 5_130), 582_026),
        ((3, 32, 32), 10, 1600, (2_432, 51_264, 819_712, 5_130), 878_538),
        ((3, 32, 32), 100, 1600, (2_432, 51_264, 819_712, 51_300), 924_708),
        ((3, 64, 64), 200, 10_816, (2_432, 51_264, 5_538_304, 102_600), 5_694_600),
    ],
)
def test_fedavgcnn_per_block_counts_match_fedseqlayer(shape, classes, dim, blocks, total) -> None:
    model = build("fedavgcnn", shape, classes)
    assert model.fc1.in_features == dim
    assert tuple(count_parameters(model, [b]) for b in model.block_names) == blocks
    assert count_parameters(model) == total


def test_fedavgcnn_on_8x8_needs_padding_and_works_with_padding_2() -> None:
    with pytest.raises(ConfigError) as err:
        build("fedavgcnn", (1, 8, 8))
    assert err.value.key == "model.padding"
    assert "model.padding=2" in str(err.value)
    model = build("fedavgcnn", (1, 8, 8), padding=2)
    assert model.fc1.in_features == 64 * 2 * 2
    assert model(torch.zeros(5, 1, 8, 8)).shape == (5, 10)


# --------------------------------------------------------------------------------- uapdfl_cnn
def test_uapdfl_cnn_is_fedavgcnn_with_both_fc_layers_as_head() -> None:
    model = build("uapdfl_cnn", (3, 32, 32))
    reference = build("fedavgcnn", (3, 32, 32))
    assert tensor_sizes(model) == tensor_sizes(reference)
    assert count_parameters(model) == 878_538
    assert model.head_names == ("fc1", "fc2")
    assert model.body_names() == ("conv1", "conv2")
    assert model.feature_dim == 64 * 5 * 5
    # 28x28 PathMNIST: flatten dim 64*4*4 (UA-PDFL spec §3).
    assert build("uapdfl_cnn", (3, 28, 28), 9).feature_dim == 64 * 4 * 4


# --------------------------------------------------------------------------------- lenet5
def test_lenet5_cifar10_counts_match_fedcmd_section_3_4() -> None:
    model = build("lenet5", (3, 32, 32))
    sizes = tensor_sizes(model)

    def layer(prefix: str) -> int:
        return sizes[f"{prefix}.weight"] + sizes[f"{prefix}.bias"]

    assert layer("conv1.0") == 456
    assert layer("conv1.1") == 12  # bn1 affine
    assert layer("conv2.0") == 2_416
    assert layer("conv2.1") == 32  # bn2 affine
    assert layer("fc1.1") == 48_120
    assert layer("fc2.1") == 10_164
    assert layer("classifier") == 850
    assert count_parameters(model) == 62_050
    assert model.block_names == ("conv1", "conv2", "fc1", "fc2", "classifier")
    assert model.head_names == ("classifier",)
    # FedCMD [CODE] ModifiedLeNet5 module names, BN buffers included.
    keys = model.block_keys()
    assert keys["conv1"] == [
        "conv1.0.weight",
        "conv1.0.bias",
        "conv1.1.weight",
        "conv1.1.bias",
        "conv1.1.running_mean",
        "conv1.1.running_var",
        "conv1.1.num_batches_tracked",
    ]
    assert keys["fc1"] == ["fc1.1.weight", "fc1.1.bias"]
    assert keys["classifier"] == ["classifier.weight", "classifier.bias"]


@pytest.mark.parametrize(
    "shape, flatten_dim",
    [((1, 28, 28), 256), ((3, 32, 32), 400), ((3, 64, 64), 2704)],
)
def test_lenet5_flatten_dims_match_fedcmd_table(shape, flatten_dim) -> None:
    model = build("lenet5", shape)
    assert model.flatten_dim == flatten_dim
    assert model.fc1[1].in_features == flatten_dim


@pytest.mark.parametrize(
    "fc_layers, blocks, widths",
    [
        (1, ("conv1", "conv2", "fc1", "classifier"), (120,)),
        (2, ("conv1", "conv2", "fc1", "fc2", "classifier"), (120, 84)),
        (3, ("conv1", "conv2", "fc1", "fc2", "fc3", "classifier"), (120, 84, 64)),
    ],
)
def test_lenet5_variants_tables_xi_to_xiii(fc_layers, blocks, widths) -> None:
    model = build("lenet5", (3, 32, 32), fc_layers=fc_layers)
    assert model.block_names == blocks
    assert tuple(getattr(model, f"fc{i + 1}")[1].out_features for i in range(len(widths))) == widths
    assert model.classifier.in_features == widths[-1] == model.feature_dim


# --------------------------------------------------------------------------------- pa3dfl_cnn
def test_pa3dfl_cifar100_cnn_matches_table4_and_section_3_5() -> None:
    model = build("pa3dfl_cnn", (3, 32, 32), 100)
    assert model.variant == "cifar100"
    assert model.block_names == ("conv1", "conv2", "fc1", "fc2", "head")
    assert model.head_names == ("head",)
    weights = {k: v for k, v in tensor_sizes(model).items() if k.endswith(".weight")}
    assert weights == {
        "conv1.weight": 4_800,
        "conv2.weight": 102_400,  # Conv(64, 64, 5, 5)
        "fc1.weight": 614_400,  # Linear(1600, 384)
        "fc2.weight": 73_728,
        "head.weight": 19_200,
    }
    assert model.fc1.in_features == 1600
    assert (model.fc1.out_features, model.fc2.out_features) == (384, 192)


def test_pa3dfl_fmnist_cnn_matches_table4() -> None:
    model = build("pa3dfl_cnn", (1, 28, 28))
    assert model.variant == "fmnist"
    assert model.conv1.padding == (2, 2) and model.conv2.padding == (2, 2)
    assert model.fc1.in_features == 3136
    assert model.fc1.weight.numel() == 1_605_632
    assert model.fc2.weight.numel() == 65_536
    assert (model.fc1.out_features, model.fc2.out_features) == (512, 128)
    assert model.head.in_features == 128
    # The variant can be forced regardless of the input shape.
    assert build("pa3dfl_cnn", (3, 32, 32), variant="fmnist").fc1.in_features == 64 * 8 * 8


# --------------------------------------------------------------------------------- resnet18
def test_resnet18_cifar_stem_count() -> None:
    model = build("resnet18", (3, 32, 32))
    assert count_parameters(model) == 11_173_962
    assert model.block_names == ("stem", "layer1", "layer2", "layer3", "layer4", "fc")
    assert model.head_names == ("fc",)
    assert model.feature_dim == 512


def test_resnet18_imagenet_stem_matches_torchvision_count() -> None:
    model = build("resnet18", (3, 64, 64), 1000, stem="imagenet")
    assert count_parameters(model) == 11_689_512
    assert count_parameters(model, ["fc"]) == 513_000


def test_resnet18_gn_conv_weights_match_pa3dfl_count() -> None:
    # Pa3dFL's ResNet18-GN on CIFAR10 (7x7 stem): "original weights = 11,166,912" (all convs).
    model = build("resnet18", (3, 32, 32), stem="imagenet", norm="gn")
    conv = sum(p.numel() for k, p in model.named_parameters() if p.dim() == 4)
    assert conv == 11_166_912
    assert all(not k.endswith(("running_mean", "running_var")) for k in model.state_dict())
    assert count_parameters(model) == 11_689_512 - 513_000 + 5_130


@pytest.mark.parametrize("options", [{}, {"norm": "gn"}, {"stem": "imagenet"}])
def test_resnet18_has_60_parameter_tensors_before_fc(options) -> None:
    # UA-PDFL A5: g = the first 60 named_parameters tensors = all conv + norm.
    names = [k for k, _ in build("resnet18", (3, 32, 32), **options).named_parameters()]
    assert names.index("fc.weight") == 60
    assert names[60:] == ["fc.weight", "fc.bias"]
    assert sum(".shortcut." in k for k in names) == 9


def test_resnet18_gn_groups_option() -> None:
    model = build("resnet18", (3, 32, 32), norm="gn")
    assert model.stem.norm.num_groups == 2
    assert build("resnet18", (3, 32, 32), norm="gn", gn_groups=32).stem.norm.num_groups == 32


# --------------------------------------------------------------------------------- vgg11
def test_vgg11_four_tensors_per_conv_and_uapdfl_split() -> None:
    model = build("vgg11", (3, 32, 32))
    assert model.block_names == (*(f"conv{i}" for i in range(1, 9)), "classifier")
    names = [k for k, _ in model.named_parameters()]
    assert len(names) == 34  # 8 convs x (weight, bias, bn weight, bn bias) + classifier
    assert names[:4] == ["conv1.conv.weight", "conv1.conv.bias", "conv1.bn.weight", "conv1.bn.bias"]
    # UA-PDFL A5: the first 28 tensors are exactly the blocks conv1..conv7.
    assert {model.block_of(k) for k in names[:28]} == {f"conv{i}" for i in range(1, 8)}
    assert {model.block_of(k) for k in names[28:]} == {"conv8", "classifier"}
    assert model.classifier.in_features == 512
    assert count_parameters(model) == 9_231_114  # derived: CIFAR VGG11-BN, 10 classes


def test_vgg11_refuses_inputs_below_32_pixels() -> None:
    with pytest.raises(ConfigError, match="32x32"):
        build("vgg11", (3, 28, 28))


# --------------------------------------------------------------------------------- mlp
def test_mlp_blocks_and_inputs() -> None:
    model = build("mlp", (64,))
    assert model.block_names == ("fc1", "fc2", "classifier")
    assert model.head_names == ("classifier",)
    assert count_parameters(model) == 64 * 200 + 200 + 200 * 200 + 200 + 200 * 10 + 10
    assert model(torch.zeros(3, 64)).shape == (3, 10)
    image = build("mlp", (1, 28, 28), hidden=[32])
    assert image.fc1.in_features == 784
    assert image(torch.zeros(3, 1, 28, 28)).shape == (3, 10)
    linear = build("mlp", (64,), hidden=[])
    assert linear.block_names == ("classifier",) and linear.body_names() == ()
    assert linear.feature_dim == 64


# --------------------------------------------------------------------------------- every model
@pytest.mark.parametrize("name, options, shape, classes", CASES, ids=CASE_IDS)
def test_block_structure_and_shapes(name, options, shape, classes) -> None:
    model = build(name, shape, classes, **options)
    assert model.training
    names = model.block_names
    assert names == tuple(n for n, _ in model.named_children())
    assert model.head_names and names[-len(model.head_names) :] == model.head_names
    assert model.body_names() == names[: len(names) - len(model.head_names)]
    state_keys = list(model.state_dict())
    assert [model.block_of(k) for k in state_keys]  # never raises
    keys = model.block_keys()
    assert list(keys) == list(names)
    # Each state_dict key lies in exactly one block, and blocks keep state_dict order.
    assert [k for block in names for k in keys[block]] == state_keys
    assert all(keys[b] for b in names)  # no empty block
    assert all(model.block_of(k) == b for b, ks in keys.items() for k in ks)
    assert count_parameters(model) == sum(count_parameters(model, [b]) for b in names)

    model.eval()
    x = torch.rand(4, *shape)
    with torch.no_grad():
        z = model.features(x)
        logits = model(x)
        outputs = model.block_outputs(x)
    assert z.shape == (4, model.feature_dim)
    assert logits.shape == (4, classes)
    assert torch.equal(model.classify(z), logits)
    assert list(outputs) == list(names)
    assert torch.equal(outputs[names[-1]], logits)
    if model.body_names():
        assert torch.equal(outputs[model.body_names()[-1]], z)


def test_construction_is_seeded_and_leaves_batchnorm_statistics_untouched() -> None:
    states = []
    for _ in range(2):
        torch.manual_seed(7)
        states.append(build("lenet5", (3, 32, 32)).state_dict())
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])
    assert torch.equal(states[0]["conv1.1.running_var"], torch.ones(6))
    assert int(states[0]["conv1.1.num_batches_tracked"]) == 0
    torch.manual_seed(8)
    other = build("lenet5", (3, 32, 32)).state_dict()
    assert not torch.equal(states[0]["fc1.1.weight"], other["fc1.1.weight"])


def test_functional_call_vmap_over_three_fedavgcnn_copies() -> None:
    models = []
    for seed in range(3):
        torch.manual_seed(seed)
        models.append(build("fedavgcnn", (1, 28, 28)))
    params, buffers = stack_module_state(models)
    base = models[0]
    x = torch.rand(6, 1, 28, 28)

    def run(p: dict, b: dict) -> torch.Tensor:
        return functional_call(base, (p, b), (x,))

    batched = vmap(run)(params, buffers)
    assert batched.shape == (3, 6, 10)
    for i, m in enumerate(models):
        torch.testing.assert_close(batched[i], m(x), rtol=1e-5, atol=1e-6)


def test_functional_call_vmap_with_batchnorm_in_eval_mode() -> None:
    models = []
    for seed in range(3):
        torch.manual_seed(seed)
        models.append(build("lenet5", (1, 28, 28)).eval())
    params, buffers = stack_module_state(models)
    x = torch.rand(4, 1, 28, 28)
    batched = vmap(lambda p, b: functional_call(models[0], (p, b), (x,)))(params, buffers)
    for i, m in enumerate(models):
        torch.testing.assert_close(batched[i], m(x), rtol=1e-5, atol=1e-6)


def test_vmap_in_train_mode_updates_stacked_batchnorm_statistics() -> None:
    models = []
    for seed in range(3):
        torch.manual_seed(seed)
        models.append(build("lenet5", (1, 28, 28)))
    params, buffers = stack_module_state(models)
    x = torch.rand(3, 8, 1, 28, 28)
    batched = vmap(lambda p, b, xi: functional_call(models[0], (p, b), (xi,)))(params, buffers, x)
    for i, m in enumerate(models):
        torch.testing.assert_close(batched[i], m(x[i]), rtol=1e-5, atol=1e-6)
        for key, value in m.named_buffers():
            torch.testing.assert_close(buffers[key][i], value)


# --------------------------------------------------------------------------------- errors
def test_unknown_model_name() -> None:
    with pytest.raises(ConfigError) as err:
        build("resnet50", (3, 32, 32))
    assert err.value.key == "model.name"
    assert "unknown model 'resnet50'; valid choices:" in str(err.value)
    assert "fedavgcnn" in str(err.value) and "vgg11" in str(err.value)


@pytest.mark.parametrize(
    "name, shape, options, key",
    [
        ("fedavgcnn", (1, 28, 28), {"width": 3}, "model.width"),
        ("vgg11", (3, 32, 32), {"padding": 1}, "model.padding"),
        ("fedavgcnn", (1, 28, 28), {"padding": -1}, "model.padding"),
        ("fedavgcnn", (1, 28, 28), {"padding": "2"}, "model.padding"),
        ("fedavgcnn", (1, 28, 28), {"padding": True}, "model.padding"),
        ("lenet5", (3, 32, 32), {"fc_layers": 4}, "model.fc_layers"),
        ("lenet5", (3, 32, 32), {"fc_layers": True}, "model.fc_layers"),
        ("pa3dfl_cnn", (3, 32, 32), {"variant": "cifar10"}, "model.variant"),
        ("resnet18", (3, 32, 32), {"stem": "tiny"}, "model.stem"),
        ("resnet18", (3, 32, 32), {"norm": "ln"}, "model.norm"),
        ("resnet18", (3, 32, 32), {"norm": "gn", "gn_groups": 3}, "model.gn_groups"),
        ("resnet18", (3, 32, 32), {"gn_groups": 0}, "model.gn_groups"),
        ("mlp", (64,), {"hidden": [0]}, "model.hidden"),
        ("mlp", (64,), {"hidden": "200"}, "model.hidden"),
        ("lenet5", (64,), {}, "model.name"),
    ],
)
def test_invalid_options(name, shape, options, key) -> None:
    with pytest.raises(ConfigError) as err:
        build(name, shape, **options)
    assert err.value.key == key
    assert "valid" in str(err.value) or "mlp" in str(err.value)


def test_block_helpers_reject_unknown_names() -> None:
    model = build("fedavgcnn", (1, 28, 28))
    with pytest.raises(KeyError):
        model.block_of("fc3.weight")
    with pytest.raises(KeyError):
        count_parameters(model, ["fc3"])
    assert count_parameters(model, "fc2") == 5_130


def test_cnn_width_option_scales_the_same_architecture():
    from fedpart.models import build_model

    m = build_model("fedavgcnn", num_classes=10, input_shape=(1, 28, 28), width=4)
    assert sum(p.numel() for p in m.parameters()) == 37_610
    assert (
        m.block_names
        == build_model("fedavgcnn", num_classes=10, input_shape=(1, 28, 28)).block_names
    )
    with pytest.raises(ConfigError, match="model.width"):
        build_model("uapdfl_cnn", num_classes=10, input_shape=(1, 28, 28), width=3)
