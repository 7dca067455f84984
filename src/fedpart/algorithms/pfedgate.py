"""pFedGate (Chen et al., ICML 2023): a personal gating layer makes a block-sparse model per batch."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F
from torch.func import functional_call

from fedpart.algorithms.base import Algorithm
from fedpart.config import option
from fedpart.engine.recipe import Recipe, bind, recipe_function
from fedpart.models.base import BlockModel
from fedpart.models.gated import SELECTIONS, GatedModel
from fedpart.registry import register


@dataclasses.dataclass
class PFedGateOptions:
    blocks: int = option(5, "split number B: blocks per parameter tensor (>= 1)", ge=1)
    gate_lr: float = option(
        0.05, "the gating layer's learning rate (decayed with federation.lr; > 0)", gt=0
    )
    selection: str = option(
        "public",
        "how blocks are picked: public (pFedGate's code: every tensor's first block kept, the"
        " rest by knapsack per linear/other group) or global (one knapsack within s)",
        choices=SELECTIONS,
    )
    mask_head: bool = option(
        True,
        "gate the head's blocks like every other tensor's (pFedGate's code); false: the head is"
        " always whole, so a narrow client can answer every class",
    )


class _ScaleGrad(torch.autograd.Function):
    """Identity forward; the backward gradient times ``c`` (a learning-rate factor for SGD)."""

    @staticmethod
    def forward(ctx: Any, t: torch.Tensor, c: float) -> torch.Tensor:
        ctx.c = c
        return t.view_as(t)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad * ctx.c, None


@recipe_function
def gated_loss(
    gate_scale: float, model: Any, state: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor
) -> torch.Tensor:
    """The task loss of the batch's gated model; the gating layer's gradient is scaled by
    ``gate_lr / lr``, so one SGD step moves it at its own learning rate."""
    if gate_scale != 1.0:
        state = {
            k: _ScaleGrad.apply(v, gate_scale) if k.startswith("gate.") else v
            for k, v in state.items()
        }
    return F.cross_entropy(functional_call(model, state, (x,)), y)


@register
class PFedGate(Algorithm):
    """The server keeps a global model, averaged as FedAvg over the participants. Each client
    keeps a personal gating layer that, for every batch, scores the ``B`` blocks of every
    parameter tensor and keeps the best-scoring blocks within its sparsity ``s_i = r_i`` (its
    capacity), each scaled by its score; the client trains the global model and its gating layer
    through that block-sparse model and returns the model. ``docs/methods/pfedgate.md``."""

    name = "pfedgate"
    summary = "Per-batch block-sparse masks of the global model from a personal gating layer."
    Options = PFedGateOptions
    capacity_aware = True  # the full model, thinned by sparsity rather than width
    backends = ("sequential",)

    def wrap_model(self, model: BlockModel) -> BlockModel:
        shape = tuple(self.ctx.data.bundle.input_shape)
        return GatedModel(
            model,
            shape,
            blocks=self.options.blocks,
            selection=self.options.selection,
            mask_head=self.options.mask_head,
        )

    def setup(self) -> None:
        self._models: dict[float, Any] = {}

    def personal_blocks(self) -> set[str]:
        return {"gate"}

    def sparsity(self, client: int) -> float:
        """The client's sparsity ``s_i``: the fraction of parameters it may keep, its capacity."""
        return float(min(1.0, self.ctx.capacity.capacity[client]))

    def model_for(self, client: int) -> Any:
        s = self.sparsity(client)
        if s >= 1.0:
            return self.ctx.model
        if s not in self._models:
            self._models[s] = self.ctx.model.with_sparsity(s)  # type: ignore[operator]
        return self._models[s]

    def round_metrics(self) -> dict[str, Any]:
        """The mechanism in the round's training batches: ``pfedgate_kept``, per sparsity, the
        mean fraction of the parameters the gated models kept, and ``pfedgate_cut``, the batches
        in which some parameter tensor kept no block (the model's output then ignores its
        input)."""
        stats = self.ctx.model.take_stats()  # type: ignore[operator]
        if not stats:
            return {}
        return {
            "pfedgate_kept": {f"{s:g}": round(k, 6) for s, (_, k, _) in sorted(stats.items())},
            "pfedgate_cut": sum(c for _, _, c in stats.values()),
        }

    def recipe(self, rnd: int, client: int) -> Recipe:
        scale = self.options.gate_lr / self.ctx.cfg.federation.lr
        return Recipe(objective=bind(gated_loss, scale))
