"""Small CNNs of the papers fedpart reproduces: FedAvg-CNN, UA-PDFL CNN, LeNet5, Pa3dFL CNNs."""

from __future__ import annotations

from typing import Any

from torch import nn

from fedpart.models.base import (
    BlockModel,
    ConvBlock,
    DenseBlock,
    LayoutConv2d,
    choice_option,
    dry_forward,
    flat_size,
    image_shape,
    int_option,
)
from fedpart.models.registry import register_model

__all__ = ["FedAvgCNN", "LeNet5", "Pa3dFLCNN"]


class FedAvgCNN(BlockModel):
    """The McMahan et al. FedAvg CNN (PFLlib ``FedAvgCNN``).

    Blocks: ``conv1`` Conv(C→32, 5×5)+ReLU+MaxPool2, ``conv2`` Conv(32→64, 5×5)+ReLU+MaxPool2,
    ``fc1`` Linear(dim→512)+ReLU, ``fc2`` Linear(512→classes). ``head`` picks the head blocks:
    ``("fc2",)`` for FedAvg-CNN, ``("fc1", "fc2")`` for the UA-PDFL split (g = convs, h = FCs).
    ``width`` divides the channels and the hidden width (32/w, 64/w, 512/w): ``width=1`` is the
    papers' model; larger values give the same architecture at CPU-friendly cost.
    ``norm="bn"`` adds a BatchNorm2d after each convolution (for FedBN/FedAP-style methods).
    """

    def __init__(
        self,
        num_classes: int,
        input_shape: tuple[int, ...],
        *,
        padding: int = 0,
        head: tuple[str, ...] = ("fc2",),
        name: str = "fedavgcnn",
        width: int = 1,
        norm: str = "none",
    ) -> None:
        super().__init__()
        c, h, w = image_shape(name, input_shape)
        self.head_names = head
        c1, c2, hidden = 32 // width, 64 // width, 512 // width
        bn = norm == "bn"
        self.conv1 = ConvBlock(c, c1, 5, padding=padding, batchnorm=bn)
        self.conv2 = ConvBlock(c1, c2, 5, padding=padding, batchnorm=bn)
        hint = "set model.padding=2" if padding < 2 else ""
        out = dry_forward(
            lambda x: self.conv2(self.conv1(x)),
            [self.conv1, self.conv2],
            (c, h, w),
            model=name,
            key="model.padding",
            hint=hint,
        )
        self.fc1 = DenseBlock(flat_size(out.shape[1:]), hidden)
        self.fc2 = DenseBlock(hidden, num_classes, relu=False)
        self._finalize(input_shape)


_PADDING_DOC = "zero padding of both 5x5 convs (int >= 0, default 0; use 2 for 8x8 inputs)"
_WIDTH_DOC = "divide channels and hidden units by this (1, 2, 4, 8; default 1 = the papers' model)"
_NORM_DOC = "none (default: the papers' model) or bn (BatchNorm2d after each convolution)"


@register_model(
    "fedavgcnn",
    "FedAvg CNN (McMahan et al.; FedSeqLayer): conv1, conv2, fc1 | head fc2",
    {"padding": _PADDING_DOC, "width": _WIDTH_DOC, "norm": _NORM_DOC},
)
def _build_fedavgcnn(
    *,
    num_classes: int,
    input_shape: tuple[int, ...],
    padding: Any = 0,
    width: Any = 1,
    norm: Any = "none",
) -> BlockModel:
    return FedAvgCNN(
        num_classes,
        input_shape,
        padding=int_option("padding", padding),
        width=choice_option("width", width, (1, 2, 4, 8)),
        norm=choice_option("norm", norm, ("none", "bn")),
    )


@register_model(
    "uapdfl_cnn",
    "UA-PDFL 2-conv/2-FC CNN (= fedavgcnn layers): body conv1, conv2 | head fc1, fc2",
    {"padding": _PADDING_DOC, "width": _WIDTH_DOC},
)
def _build_uapdfl_cnn(
    *, num_classes: int, input_shape: tuple[int, ...], padding: Any = 0, width: Any = 1
) -> BlockModel:
    return FedAvgCNN(
        num_classes,
        input_shape,
        padding=int_option("padding", padding),
        head=("fc1", "fc2"),
        name="uapdfl_cnn",
        width=choice_option("width", width, (1, 2, 4, 8)),
    )


# --------------------------------------------------------------------------------- LeNet5
LENET5_FC_WIDTHS: dict[int, tuple[int, ...]] = {1: (120,), 2: (120, 84), 3: (120, 84, 64)}
"""Hidden FC widths of FedCMD's LeNet5 variants: Table XII (1), Table XI (2), Table XIII (3)."""


class LeNet5(BlockModel):
    """FedCMD's LeNet5 (FL-bench ``LeNet5`` / ``ModifiedLeNet5``), with its module names.

    Blocks ``conv1``, ``conv2`` = Sequential(Conv 5×5, BatchNorm2d, ReLU, MaxPool2) (6 and 16
    channels), ``fc1``.. = Sequential(Flatten, Linear, ReLU), head ``classifier`` = Linear.
    State keys: ``conv1.0.weight`` (conv), ``conv1.1.*`` (BN), ``fc1.1.weight``,
    ``classifier.weight``.
    """

    #: its 6- and 16-channel convolutions with BatchNorm train 1.1-1.2x slower channels-last on
    #: the CPU (``benchmarks/conv_layout.py``), so ``engine.conv_layout=auto`` keeps NCHW
    channels_last_on_cpu = False

    def __init__(
        self, num_classes: int, input_shape: tuple[int, ...], *, fc_layers: int = 2
    ) -> None:
        super().__init__()
        c, h, w = image_shape("lenet5", input_shape)
        self.conv1 = _conv_bn_relu_pool(c, 6)
        self.conv2 = _conv_bn_relu_pool(6, 16)
        out = dry_forward(
            lambda x: self.conv2(self.conv1(x)), [self.conv1, self.conv2], (c, h, w), model="lenet5"
        )
        width = flat_size(out.shape[1:])
        self.flatten_dim = width
        for i, out_features in enumerate(LENET5_FC_WIDTHS[fc_layers], start=1):
            self.add_module(
                f"fc{i}", nn.Sequential(nn.Flatten(), nn.Linear(width, out_features), nn.ReLU())
            )
            width = out_features
        self.classifier = nn.Linear(width, num_classes)
        self._finalize(input_shape)


def _conv_bn_relu_pool(in_channels: int, out_channels: int) -> nn.Sequential:
    return nn.Sequential(
        LayoutConv2d(in_channels, out_channels, 5),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(),
        nn.MaxPool2d(2, 2),
    )


@register_model(
    "lenet5",
    "FedCMD LeNet5 (Conv+BN+ReLU+Pool x2, FC layers): conv1, conv2, fc1.. | head classifier",
    {
        "fc_layers": "hidden FC layers before the classifier: 1 (Table XII: 120), "
        "2 (Table XI: 120, 84; default), 3 (Table XIII: 120, 84, 64)"
    },
)
def _build_lenet5(
    *, num_classes: int, input_shape: tuple[int, ...], fc_layers: Any = 2
) -> BlockModel:
    choice_option("fc_layers", int_option("fc_layers", fc_layers, low=1), tuple(LENET5_FC_WIDTHS))
    return LeNet5(num_classes, input_shape, fc_layers=fc_layers)


# --------------------------------------------------------------------------------- Pa3dFL
PA3DFL_VARIANTS: dict[str, dict[str, Any]] = {
    # Pa3dFL Table 4. CIFAR100: (3,64,k5), pool, relu; (64,64,k5), pool, relu; FC 1600-384-192-100.
    "cifar100": {"channels": (64, 64), "padding": 0, "fc": (384, 192)},
    # FASHION: (1,32,k5,pad2), pool, relu; (32,64,k5,pad2), pool, relu; FC 3136-512-128-10.
    "fmnist": {"channels": (32, 64), "padding": 2, "fc": (512, 128)},
}


class Pa3dFLCNN(BlockModel):
    """The plain (undecomposed) Pa3dFL CNNs of Table 4.

    Blocks ``conv1``, ``conv2`` (Conv 5×5 + ReLU + MaxPool2), ``fc1``, ``fc2`` (Linear + ReLU),
    head ``head`` (Linear, no activation on the logits).
    """

    def __init__(self, num_classes: int, input_shape: tuple[int, ...], *, variant: str) -> None:
        super().__init__()
        c, h, w = image_shape("pa3dfl_cnn", input_shape)
        spec = PA3DFL_VARIANTS[variant]
        c1, c2 = spec["channels"]
        self.variant = variant
        self.conv1 = ConvBlock(c, c1, 5, padding=spec["padding"])
        self.conv2 = ConvBlock(c1, c2, 5, padding=spec["padding"])
        out = dry_forward(
            lambda x: self.conv2(self.conv1(x)),
            [self.conv1, self.conv2],
            (c, h, w),
            model="pa3dfl_cnn",
            key="model.variant",
        )
        f1, f2 = spec["fc"]
        self.fc1 = DenseBlock(flat_size(out.shape[1:]), f1)
        self.fc2 = DenseBlock(f1, f2)
        self.head = DenseBlock(f2, num_classes, relu=False)
        self._finalize(input_shape)


@register_model(
    "pa3dfl_cnn",
    "Pa3dFL CNNs (Table 4, undecomposed): conv1, conv2, fc1, fc2 | head head",
    {
        "variant": "fmnist (32/64 ch, pad 2, FC 512-128) or cifar100 (64/64 ch, FC 384-192); "
        "default: fmnist for 1-channel input, cifar100 otherwise"
    },
)
def _build_pa3dfl_cnn(
    *, num_classes: int, input_shape: tuple[int, ...], variant: Any = None
) -> BlockModel:
    if variant is None:
        variant = "fmnist" if input_shape[0] == 1 else "cifar100"
    choice_option("variant", variant, tuple(PA3DFL_VARIANTS))
    return Pa3dFLCNN(num_classes, input_shape, variant=variant)
