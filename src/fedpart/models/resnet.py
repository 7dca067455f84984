"""ResNet-18 (BasicBlock [2, 2, 2, 2]) with a CIFAR or ImageNet stem and BatchNorm or GroupNorm."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedpart.models.base import (
    BlockModel,
    LayoutConv2d,
    choice_option,
    image_shape,
    int_option,
)
from fedpart.models.registry import register_model

__all__ = ["BasicBlock", "ResNet18"]

Norm = Callable[[int], nn.Module]


class BasicBlock(nn.Module):
    """Two 3×3 convs with a residual connection; a 1×1 conv + norm shortcut when the shape changes.

    Parameter order (as torchvision): conv1, norm1, conv2, norm2, shortcut conv, shortcut norm.
    """

    def __init__(self, in_planes: int, planes: int, stride: int, norm: Norm) -> None:
        super().__init__()
        self.conv1 = LayoutConv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.norm1 = norm(planes)
        self.conv2 = LayoutConv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.norm2 = norm(planes)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                LayoutConv2d(in_planes, planes, 1, stride=stride, bias=False), norm(planes)
            )

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class Stem(nn.Module):
    """The stem block.

    ``cifar``: 3×3 conv, stride 1, norm, ReLU. ``imagenet``: 7×7 conv, stride 2, norm, ReLU,
    3×3 max-pool with stride 2.
    """

    def __init__(self, in_channels: int, kind: str, norm: Norm) -> None:
        super().__init__()
        self.kind = kind
        if kind == "imagenet":
            self.conv = LayoutConv2d(in_channels, 64, 7, stride=2, padding=3, bias=False)
        else:
            self.conv = LayoutConv2d(in_channels, 64, 3, stride=1, padding=1, bias=False)
        self.norm = norm(64)

    def forward(self, x: Tensor) -> Tensor:
        x = F.relu(self.norm(self.conv(x)))
        if self.kind == "imagenet":
            x = F.max_pool2d(x, 3, stride=2, padding=1)
        return x


class ResNet18(BlockModel):
    """ResNet-18. Blocks ``stem``, ``layer1``..``layer4`` | head ``fc`` (Linear 512→classes).

    ``features`` ends with global average pooling over the spatial dimensions (parameter-free,
    applied after ``layer4``), so any input size of at least 1 pixel after the stem works.
    """

    def __init__(
        self,
        num_classes: int,
        input_shape: tuple[int, ...],
        *,
        stem: str = "cifar",
        norm: str = "bn",
        gn_groups: int = 2,
    ) -> None:
        super().__init__()
        c, _, _ = image_shape("resnet18", input_shape)
        self.norm_kind = norm
        make_norm: Norm
        if norm == "gn":

            def make_norm(ch: int) -> nn.Module:
                return nn.GroupNorm(gn_groups, ch)
        else:
            make_norm = nn.BatchNorm2d
        self.stem = Stem(c, stem, make_norm)
        in_planes = 64
        for i, planes in enumerate((64, 128, 256, 512), start=1):
            stride = 1 if i == 1 else 2
            layer = nn.Sequential(
                BasicBlock(in_planes, planes, stride, make_norm),
                BasicBlock(planes, planes, 1, make_norm),
            )
            self.add_module(f"layer{i}", layer)
            in_planes = planes
        self.fc = nn.Linear(512, num_classes)
        self._finalize(input_shape)

    def pool_features(self, x: Tensor) -> Tensor:
        return torch.flatten(torch.mean(x, dim=(-2, -1)), 1)


@register_model(
    "resnet18",
    "ResNet-18 (BasicBlock [2,2,2,2]): stem, layer1..layer4 | head fc",
    {
        "stem": "cifar (3x3 conv, no max-pool; default) or imagenet (7x7/2 conv + 3x3/2 max-pool)",
        "norm": "bn (BatchNorm, default) or gn (GroupNorm)",
        "gn_groups": "GroupNorm groups when norm=gn (default 2, as FedDyn/Pa3dFL; DFedPGP "
        "uses 32); must divide 64",
    },
)
def _build_resnet18(
    *,
    num_classes: int,
    input_shape: tuple[int, ...],
    stem: Any = "cifar",
    norm: Any = "bn",
    gn_groups: Any = 2,
) -> BlockModel:
    choice_option("stem", stem, ("cifar", "imagenet"))
    choice_option("norm", norm, ("bn", "gn"))
    groups = int_option("gn_groups", gn_groups, low=1)
    if 64 % groups:
        choice_option("gn_groups", groups, (1, 2, 4, 8, 16, 32, 64))
    return ResNet18(num_classes, input_shape, stem=stem, norm=norm, gn_groups=groups)
