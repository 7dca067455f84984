"""CIFAR-style VGG11 with BatchNorm (the UA-PDFL VGG11)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedpart.models.base import BlockModel, LayoutConv2d, dry_forward, image_shape
from fedpart.models.registry import register_model

__all__ = ["VGG11_CFG", "ConvBNBlock", "VGG11"]

VGG11_CFG: tuple[int | str, ...] = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")
"""Channels of each 3×3 conv; ``"M"`` is a 2×2 max-pool (folded into the preceding conv's block)."""


class ConvBNBlock(nn.Module):
    """3×3 conv (with bias) → BatchNorm2d → ReLU → optional 2×2 max-pool.

    Four parameter tensors, in this order: ``conv.weight``, ``conv.bias``, ``bn.weight``,
    ``bn.bias``.
    """

    def __init__(self, in_channels: int, out_channels: int, *, pool: bool) -> None:
        super().__init__()
        self.conv = LayoutConv2d(in_channels, out_channels, 3, padding=1)
        self.bn = nn.BatchNorm2d(out_channels)
        self.pool = pool

    def forward(self, x: Tensor) -> Tensor:
        x = F.relu(self.bn(self.conv(x)))
        return F.max_pool2d(x, 2) if self.pool else x


class VGG11(BlockModel):
    """VGG11-BN. Blocks ``conv1``..``conv8`` (one per conv) | head ``classifier`` (512→classes).

    ``features`` ends with global average pooling, which is the identity on the 1×1 map a
    32×32 input leaves after five max-pools; larger inputs (64×64) give the same 512 features.
    Inputs smaller than 32×32 are refused (the fifth max-pool would have nothing to pool).
    """

    def __init__(self, num_classes: int, input_shape: tuple[int, ...]) -> None:
        super().__init__()
        c, h, w = image_shape("vgg11", input_shape)
        in_channels = c
        index = 0
        for pos, item in enumerate(VGG11_CFG):
            if item == "M":
                continue
            index += 1
            pool = pos + 1 < len(VGG11_CFG) and VGG11_CFG[pos + 1] == "M"
            self.add_module(f"conv{index}", ConvBNBlock(in_channels, int(item), pool=pool))
            in_channels = int(item)
        body = list(self.children())

        def run(x: Tensor) -> Tensor:
            for m in body:
                x = m(x)
            return x

        dry_forward(
            run, body, (c, h, w), model="vgg11", hint="vgg11 needs inputs of at least 32x32"
        )
        self.classifier = nn.Linear(in_channels, num_classes)
        self._finalize(input_shape)

    def pool_features(self, x: Tensor) -> Tensor:
        return torch.flatten(torch.mean(x, dim=(-2, -1)), 1)


@register_model(
    "vgg11",
    "CIFAR VGG11-BN (conv with bias + BN + ReLU): conv1..conv8 | head classifier",
)
def _build_vgg11(*, num_classes: int, input_shape: tuple[int, ...]) -> BlockModel:
    return VGG11(num_classes, input_shape)
