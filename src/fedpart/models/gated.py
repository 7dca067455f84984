"""pFedGate's gated model: a personal gating layer picks, per batch, a block-sparse part of a model.

Every parameter tensor of the wrapped model is split into ``B`` blocks of consecutive rows
(output units). A gating layer maps each sample to one score per block, ``2·σ(W·flatten(x) + b)``
in ``(0, 2)``, and the scores are averaged over the batch (batch-level gating). Under a sparsity
``s`` (the kept fraction of parameters) the blocks are chosen by one of two rules:

- ``"public"`` (pFedGate's public code, "to avoid cutting info flow"): the first block of every
  tensor is always kept, and the other blocks are chosen greedily by score per parameter,
  separately for the linear layers' tensors and the others, each group within ``(s − m)`` of its
  non-first blocks' parameters, ``m = min(max(1/B, 0.1), s)``. No
  tensor is ever cut to zero; below ``s ≈ 1/B`` the model keeps about ``1/B`` of every tensor,
  more than ``s``.
- ``"global"``: one greedy knapsack over all blocks, each taken while the kept parameters stay
  within ``s`` of the total. Never above ``s``, but when one tensor holds most parameters a small
  ``s`` can drop every block of it, and the model's output no longer depends on its input.

A kept block is multiplied by its score, a dropped one by zero, so the model a batch runs is
block-sparse and the scores are trained through the kept blocks.

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

__all__ = ["SELECTIONS", "GatedModel", "block_rows", "knapsack", "public_selection"]

SELECTIONS = ("public", "global")


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


def public_selection(
    scores: Tensor, sizes: Tensor, first: Tensor, linear: Tensor, sparsity: float, floor: float
) -> Tensor:
    """pFedGate's public rule: every ``first`` block kept; the others by :func:`knapsack`,
    separately among the ``linear`` blocks and the rest, each group within ``(s − floor)`` of its
    non-first blocks' parameters. Boolean, per block."""
    if sparsity >= 1.0:
        return torch.ones(scores.shape, dtype=torch.bool, device=scores.device)
    keep = first.clone()
    for group in (linear & ~first, ~linear & ~first):
        idx = group.nonzero().flatten()
        if idx.numel():
            total = float(sizes[idx].sum())
            budget = round(total * (sparsity - floor)) / total
            keep[idx] = knapsack(scores[idx], sizes[idx], budget).to(keep.device)
    return keep.to(scores.device)


class GatedModel(BlockModel):
    """``net`` under pFedGate's block gating at ``sparsity`` (the kept fraction, in (0, 1]).

    ``blocks`` is pFedGate's split number ``B``; ``selection`` the rule that picks the blocks
    (:data:`SELECTIONS`, the module's docstring); without ``mask_head`` every block of ``net``'s
    head is always kept (its blocks are rows, i.e. classes: a head cut to its first block can
    answer only that block's classes). The gating layer starts at zero, so every score
    is 1 and, at sparsity 1, the gated model is ``net`` itself. While training, the model counts
    per sparsity the batches, the kept fraction of the parameters and the batches in which some
    tensor kept no block (:meth:`take_stats`).
    """

    def __init__(
        self,
        net: BlockModel,
        input_shape: tuple[int, ...],
        *,
        blocks: int = 5,
        sparsity: float = 1.0,
        selection: str = "public",
        mask_head: bool = True,
    ) -> None:
        super().__init__()
        if selection not in SELECTIONS:
            raise ValueError(f"selection must be one of {', '.join(SELECTIONS)}, not {selection!r}")
        self.sparsity = float(sparsity)
        self.selection = selection
        self.blocks = int(blocks)
        self._stats: dict[float, list[float]] = {}  # shared by the views of other sparsities
        linear_params = {
            f"{m}.{k}" if m else k
            for m, mod in net.named_modules()
            if isinstance(mod, nn.Linear)
            for k, _ in mod.named_parameters(recurse=False)
        }
        first: list[bool] = []
        linear: list[bool] = []
        tensor_of: list[int] = []  # per block: its tensor's position in ``names``
        names = [k for k, _ in net.named_parameters()]
        shapes = {k: p.shape for k, p in net.named_parameters()}
        self._rows: dict[str, Tensor] = {}  # per parameter: the block of each row
        sizes: list[int] = []
        for t, name in enumerate(names):
            rows = shapes[name][0] if len(shapes[name]) else 1
            ids = torch.empty(rows, dtype=torch.long)
            per_row = math.prod(shapes[name][1:]) if len(shapes[name]) > 1 else 1
            for j, chunk in enumerate(block_rows(rows, blocks)):
                ids[chunk] = len(sizes)
                sizes.append(chunk.numel() * per_row)
                first.append(j == 0)
                linear.append(name in linear_params)
                tensor_of.append(t)
            self._rows[name] = ids
        self._sizes = torch.tensor(sizes, dtype=torch.float64)
        self._first = torch.tensor(first, dtype=torch.bool)
        self._linear = torch.tensor(linear, dtype=torch.bool)
        head_params = {
            f"{h}.{k}" for h in net.head_names for k, _ in net.get_submodule(h).named_parameters()
        }
        self.head_blocks = torch.zeros(len(sizes), dtype=torch.bool)  # the head's blocks
        for name in head_params & set(names):
            self.head_blocks[self._rows[name].unique()] = True
        # the blocks never masked
        self._head = torch.zeros_like(self.head_blocks) if mask_head else self.head_blocks
        self._tensor_of = torch.tensor(tensor_of, dtype=torch.long)
        self._num_tensors = len(names)
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
        """Per block: its score if the selection keeps it, else 0."""
        g = self.scores(x)
        if self.sparsity >= 1.0:
            keep = torch.ones(self.num_blocks, dtype=torch.bool)
        else:  # on the CPU: the greedy walk reads every score anyway
            scores = g.detach().cpu()
            if self.selection == "public":
                floor = min(max(1.0 / self.blocks, 0.1), self.sparsity)
                keep = public_selection(
                    scores,
                    self._sizes,
                    self._first | self._head,
                    self._linear,
                    self.sparsity,
                    floor,
                )
            else:
                keep = knapsack(scores, self._sizes, self.sparsity) | self._head
        if self.training and g.device.type != "meta":  # not a shapes-only cost run
            self._count(keep)
        return g * keep.to(g.device, g.dtype)

    def _count(self, keep: Tensor) -> None:
        kept = float(self._sizes[keep].sum() / self._sizes.sum())
        alive = torch.zeros(self._num_tensors, dtype=torch.bool)
        alive[self._tensor_of[keep]] = True
        row = self._stats.setdefault(self.sparsity, [0.0, 0.0, 0.0])
        row[0] += 1
        row[1] += kept
        row[2] += float(not bool(alive.all()))

    def take_stats(self) -> dict[float, tuple[int, float, int]]:
        """Per sparsity, since the last call: ``(batches, mean kept fraction of the parameters,
        batches in which some parameter tensor kept no block)``; then the counts restart."""
        out = {s: (int(n), k / n, int(c)) for s, (n, k, c) in self._stats.items() if n}
        self._stats.clear()
        return out

    def _rows_on(self, name: str, device: torch.device) -> Tensor:
        """``_rows[name]`` on ``device``, copied there once (a copy from the host at every step
        would wait for the GPU's queued kernels each time)."""
        if device.type == "cpu":
            return self._rows[name]
        cache = self.__dict__.setdefault("_rows_cache", {})
        key = (name, str(device))
        if key not in cache:
            cache[key] = self._rows[name].to(device)
        return cache[key]

    def gated_parameters(self, m: Tensor) -> dict[str, Tensor]:
        """``net``'s parameters with each block scaled by its entry of ``m``."""
        out: dict[str, Tensor] = {}
        for name, p in self.net.named_parameters():
            rows = self._rows_on(name, p.device)
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
