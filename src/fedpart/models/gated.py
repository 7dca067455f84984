"""pFedGate's gated model: a personal gating layer picks, per batch, a block-sparse part of a model.

Every parameter tensor of the wrapped model is split into ``B`` blocks of consecutive rows
(output units). A gating layer maps each sample to one score per block, ``2·σ(W·flatten(x) + b)``
in ``(0, 2)``, and the scores are averaged over the batch (batch-level gating). Under a sparsity
``s`` (the kept fraction of parameters), a knapsack picks the blocks: greedily by score per
parameter, each block taken while the kept parameters stay within ``s`` of the total. A kept
block is multiplied by its score, a dropped one by zero, so the model a batch runs is block-sparse
and the scores are trained through the kept blocks.

The wrapper is a :class:`BlockModel` with blocks ``gate`` (the gating layer), ``net`` (the wrapped
model, whose keys keep their names under ``net.``) and ``out`` (an empty head): the whole gated
computation is its ``features``, since the mask depends on the input batch.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.func import functional_call

from fedpart.models.base import BlockModel

__all__ = ["GatedModel", "block_rows", "knapsack"]


def block_rows(rows: int, blocks: int) -> list[Tensor]:
    """Row indices of the (non-empty) blocks of a tensor with ``rows`` rows split ``blocks`` ways."""
    return [b for b in torch.arange(rows).tensor_split(blocks) if b.numel()]


def knapsack(scores: Tensor, sizes: Tensor, sparsity: float) -> Tensor:
    """Which blocks to keep: greedily by ``score / size``, each block while the kept size stays
    within ``sparsity · Σ sizes`` (every block when ``sparsity >= 1``). Boolean, per block."""
    if sparsity >= 1.0:
        return torch.ones(scores.shape, dtype=torch.bool, device=scores.device)
    budget = sparsity * float(sizes.sum())
    order = torch.argsort(scores / sizes, descending=True, stable=True).tolist()
    keep = torch.zeros(scores.shape, dtype=torch.bool)
    used = 0.0
    for j in order:
        n = float(sizes[j])
        if used + n <= budget:
            keep[j] = True
            used += n
    return keep.to(scores.device)


class GatedModel(BlockModel):
    """``net`` under pFedGate's block gating at ``sparsity`` (the kept fraction, in (0, 1]).

    ``blocks`` is pFedGate's split number ``B``. The gating layer starts at zero, so every score is
    1 and, at sparsity 1, the gated model is ``net`` itself.
    """

    def __init__(
        self,
        net: BlockModel,
        input_shape: tuple[int, ...],
        *,
        blocks: int = 5,
        sparsity: float = 1.0,
    ) -> None:
        super().__init__()
        self.sparsity = float(sparsity)
        names = [k for k, _ in net.named_parameters()]
        shapes = {k: p.shape for k, p in net.named_parameters()}
        self._rows: dict[str, Tensor] = {}  # per parameter: the block of each row
        sizes: list[int] = []
        for name in names:
            rows = shapes[name][0] if len(shapes[name]) else 1
            ids = torch.empty(rows, dtype=torch.long)
            per_row = math.prod(shapes[name][1:]) if len(shapes[name]) > 1 else 1
            for chunk in block_rows(rows, blocks):
                ids[chunk] = len(sizes)
                sizes.append(chunk.numel() * per_row)
            self._rows[name] = ids
        self._sizes = torch.tensor(sizes, dtype=torch.float64)
        self.gate = nn.Linear(math.prod(input_shape), len(sizes))
        nn.init.zeros_(self.gate.weight)
        nn.init.zeros_(self.gate.bias)
        self.net = net
        self.out = nn.Identity()
        self._finalize(input_shape)

    @property
    def num_blocks(self) -> int:
        """The number of gated blocks (the gating layer's outputs)."""
        return int(self._sizes.numel())

    def scores(self, x: Tensor) -> Tensor:
        """The batch's block scores ``mean_b 2·σ(gate(flatten(x_b)))``."""
        return (2.0 * torch.sigmoid(self.gate(torch.flatten(x, 1)))).mean(0)

    def mask(self, x: Tensor) -> Tensor:
        """Per block: its score if the knapsack keeps it, else 0."""
        g = self.scores(x)
        keep = knapsack(g.detach(), self._sizes.to(g.device), self.sparsity)
        return g * keep.to(g.dtype)

    def gated_parameters(self, m: Tensor) -> dict[str, Tensor]:
        """``net``'s parameters with each block scaled by its entry of ``m``."""
        out: dict[str, Tensor] = {}
        for name, p in self.net.named_parameters():
            rows = self._rows[name].to(p.device)
            scale = m[rows] if p.dim() else m[rows][0]
            out[name] = p * scale.view(-1, *([1] * (p.dim() - 1))) if p.dim() else p * scale
        return out

    def features(self, x: Tensor) -> Tensor:
        return functional_call(self.net, self.gated_parameters(self.mask(x)), (x,))

    def with_sparsity(self, sparsity: float) -> GatedModel:
        """A view of this model (same modules and tensors) gating at another sparsity."""
        import copy

        other = copy.copy(self)
        other.sparsity = float(sparsity)
        return other
