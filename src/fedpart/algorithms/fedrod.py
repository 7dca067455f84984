"""FedRoD (Chen & Chao, 2022): a generic head trained with the balanced-softmax loss and a
personal head on detached features; the personalised prediction is the sum of both."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from fedpart.algorithms.base import Algorithm
from fedpart.engine.functional import call_method
from fedpart.engine.recipe import Recipe, bind, recipe_function
from fedpart.models import BlockModel
from fedpart.registry import register


class TwoHeadModel(BlockModel):
    """The base model's blocks plus a personal head ``phead`` (a linear layer on the features).

    ``generic(z)`` is the base model's head, ``personal(z)`` the personal head, and the
    personalised prediction ``classify(z) = generic(z) + personal(z)``.
    """

    def __init__(self, base: BlockModel, num_classes: int) -> None:
        super().__init__()
        for name in base.block_names:
            self.add_module(name, base.get_submodule(name))
        self.phead = nn.Linear(base.feature_dim, num_classes)
        self.head_names = (*base.head_names, "phead")
        self._generic_names = tuple(base.head_names)
        self._pool = base.pool_features
        self.feature_dim = base.feature_dim

    def pool_features(self, x: torch.Tensor) -> torch.Tensor:
        return self._pool(x)

    def generic(self, z: torch.Tensor) -> torch.Tensor:
        for name in self._generic_names:
            z = self.get_submodule(name)(z)
        return z

    def personal(self, z: torch.Tensor) -> torch.Tensor:
        return self.phead(z)

    def classify(self, z: torch.Tensor) -> torch.Tensor:
        return self.generic(z) + self.personal(z)


def balanced_softmax_loss(
    logits: torch.Tensor, y: torch.Tensor, class_counts: torch.Tensor
) -> torch.Tensor:
    """Balanced softmax (Ren et al., 2020): CE on logits + log(n_c), n_c the client's class counts."""
    return F.cross_entropy(logits + torch.log(class_counts.clamp_min(1e-12)), y)


@recipe_function
def two_head_loss(
    model: TwoHeadModel,
    state: dict[str, torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    counts: torch.Tensor,
) -> torch.Tensor:
    """L_BSM(generic(z), y) + CE(generic(z).detach() + personal(z.detach()), y), ``counts`` the
    client's class counts."""
    z = call_method(model, "features", state, x)
    generic = call_method(model, "generic", state, z)
    personal = call_method(model, "personal", state, z.detach())
    return balanced_softmax_loss(generic, y, counts) + F.cross_entropy(
        generic.detach() + personal, y
    )


@register
class FedRoD(Algorithm):
    """Body and generic head shared (averaged), trained with L_BSM(head(z), y); the personal head
    is trained with CE(head(z).detach() + phead(z.detach()), y) and never leaves the client."""

    name = "fedrod"
    needs_head_and_body = True
    summary = "Generic head with balanced softmax + personal head on detached features."

    def wrap_model(self, model: BlockModel) -> BlockModel:
        return TwoHeadModel(model, self.ctx.data.num_classes)

    def setup(self) -> None:
        data = self.ctx.data
        y = data.y
        self.class_counts = [
            torch.bincount(y[c.train], minlength=data.num_classes).float() for c in data.clients
        ]

    def personal_blocks(self) -> set[str]:
        return {"phead"}

    def recipe(self, rnd: int, client: int) -> Recipe:
        return Recipe(objective=bind(two_head_loss, counts=self.class_counts[client]))
