"""Evaluation: per-sample correctness and loss of a model state on pool indices."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.func import functional_call

from fedpart.engine.data import FederatedData
from fedpart.models import BlockModel


@torch.no_grad()
def evaluate_samples(
    model: BlockModel,
    state: dict[str, torch.Tensor],
    data: FederatedData,
    index: torch.Tensor,
    batch_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample (correct, loss) of ``state`` on the pool samples ``index``."""
    model.eval()
    correct = torch.empty(index.numel(), dtype=torch.bool)
    losses = torch.empty(index.numel(), dtype=torch.float32)
    for start in range(0, index.numel(), batch_size):
        part = index[start : start + batch_size]
        x, y = data.batch(part)
        logits = functional_call(model, state, (x,))
        correct[start : start + len(part)] = logits.argmax(1) == y
        losses[start : start + len(part)] = F.cross_entropy(logits, y, reduction="none")
    return correct, losses
