"""Calling parts of a model with an explicit state (public ``torch.func`` API only)."""

from __future__ import annotations

import torch
from torch import nn
from torch.func import functional_call

from fedpart.models import BlockModel


class _Part(nn.Module):
    def __init__(self, model: BlockModel, method: str) -> None:
        super().__init__()
        self.m = model
        self.method = method

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return getattr(self.m, self.method)(x)


def call_method(
    model: BlockModel, method: str, state: dict[str, torch.Tensor], x: torch.Tensor
) -> torch.Tensor:
    """``model.<method>(x)`` with the model's tensors replaced by ``state``."""
    return functional_call(_Part(model, method), {f"m.{k}": v for k, v in state.items()}, (x,))


def features(model: BlockModel, state: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """The body's output for ``x`` with the model's tensors replaced by ``state``."""
    return call_method(model, "features", state, x)


def classify(model: BlockModel, state: dict[str, torch.Tensor], z: torch.Tensor) -> torch.Tensor:
    """The head's logits for features ``z`` with the model's tensors replaced by ``state``."""
    return call_method(model, "classify", state, z)
