"""Ditto (Li et al., 2021): a global model by FedAvg plus a personal model pulled towards it."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedpart.algorithms.base import Algorithm
from fedpart.config import option
from fedpart.engine import method_state as saved
from fedpart.engine.recipe import LossTerm, Phase, Recipe, proximal
from fedpart.registry import register


@dataclass
class DittoOptions:
    lam: float = option(0.1, "λ of the personal objective F_i(v) + (λ/2)||v − w||²", ge=0)
    personal_epochs: int | None = option(
        None, "epochs on the personal model per round (default federation.local_epochs)", ge=0
    )


@register
class Ditto(Algorithm):
    """Each participant (1) trains its personal model v_i on F_i(v) + (λ/2)‖v − w^t‖² and
    (2) trains a copy of the global model w^t as in FedAvg, which is uploaded and averaged.
    Evaluation uses v_i (a client never sampled keeps the initial model)."""

    name = "ditto"
    backends = ("sequential",)  # its own local update / per-client objective
    summary = "Global FedAvg model + personal models with proximal term (lam/2)||v - w||^2."
    Options = DittoOptions
    #: the personal models v_i, as <client>/<key> (the checkpoint format of earlier versions)
    checkpointed = (saved.PerClient("personal_models", key=""),)

    def setup(self) -> None:
        self.personal_models: dict[int, dict[str, torch.Tensor]] = {}
        self.init_model = {k: v.clone() for k, v in self.ctx.store.global_state.items()}

    def local_update(self, rnd: int, client: int):
        ctx = self.ctx
        w = ctx.store.client_state(client)
        params = [k for k, _ in ctx.model.named_parameters()]
        term = LossTerm("proximal", proximal({k: w[k] for k in params}), weight=self.options.lam)
        personal_recipe = Recipe(
            phases=(
                Phase(epochs=self.options.personal_epochs, loss_terms=(term,), name="personal"),
            )
        )
        v = self.personal_models.get(client, self.init_model)
        personal = ctx.train(rnd, client, v, recipe=personal_recipe)
        self.personal_models[client] = personal.state
        result = ctx.train(rnd, client, w)
        result.phases = personal.phases + result.phases  # both count as the client's computation
        return result

    def eval_state(self, client: int) -> dict[str, torch.Tensor]:
        return self.personal_models.get(client, self.init_model)
