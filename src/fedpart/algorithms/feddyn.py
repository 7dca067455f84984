"""FedDyn (Acar et al., ICLR 2021): a dynamic regularizer aligns the clients' stationary points
with the global objective's."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from fedpart.algorithms.base import Algorithm
from fedpart.config import option
from fedpart.engine import method_state as saved
from fedpart.engine.recipe import LossTerm, Phase, Recipe, bind, proximal, recipe_function
from fedpart.registry import register

State = dict[str, torch.Tensor]


@dataclass
class FedDynOptions:
    alpha: float = option(
        0.01, "α of the regularizer −⟨g_i, θ⟩ + (α/2)‖θ − θ^{t−1}‖² (FedCMD: 0.01)", gt=0
    )


@recipe_function
def linear(params: Mapping[str, torch.Tensor], direction: Mapping[str, torch.Tensor]) -> Any:
    """The linear penalty ``Σ_k ⟨direction_k, θ_k⟩`` (its gradient is ``direction``)."""
    return sum((params[k] * d).sum() for k, d in direction.items())


@register
class FedDyn(Algorithm):
    """Algorithm 1 of the paper. Participant i of round t, from the server model θ^{t−1}:

        θ_i^t = argmin_θ L_i(θ) − ⟨g_i, θ⟩ + (α/2)‖θ − θ^{t−1}‖²   (local SGD, E epochs)
        g_i  ← g_i − α(θ_i^t − θ^{t−1})                           (g_i = ∇L_i(θ_i^t), 0 at first)

    and the server, over the m clients of the federation and the participants P_t:

        h   ← h − (α/m) Σ_{i∈P_t} (θ_i^t − θ^{t−1})
        θ^t = (1/|P_t|) Σ_{i∈P_t} θ_i^t − h/α

    over the trainable parameters; other shared tensors (BatchNorm statistics) are averaged.
    """

    name = "feddyn"
    summary = "FedAvg with the dynamic regularizer: per-client linear term g_i and server state h."
    Options = FedDynOptions
    checkpointed = (saved.PerClient("grads", key="grad"), saved.Named("h"))

    def setup(self) -> None:
        shared = set(self.ctx.store.shared_keys())
        self.params = [k for k, _ in self.ctx.model.named_parameters() if k in shared]
        self.grads: dict[int, State] = {}  # g_i of every client that has trained
        self.h: State = {k: torch.zeros_like(self.ctx.store.global_state[k]) for k in self.params}

    def recipe(self, rnd: int, client: int) -> Recipe:
        alpha = self.options.alpha
        store = self.ctx.store
        anchor = {k: store.global_state[k] for k in self.params}
        terms = [LossTerm("proximal", proximal(anchor), weight=alpha)]
        grad = self.grads.get(client)
        if grad is not None:
            direction = {k: v.detach() for k, v in grad.items()}
            terms.append(LossTerm("feddyn_linear", bind(linear, direction=direction), weight=-1.0))
        return Recipe(phases=(Phase(loss_terms=tuple(terms)),))

    def aggregate(self, rnd: int, uploads: dict[int, State], weights: dict[int, float]) -> None:
        if not uploads:
            return
        alpha = self.options.alpha
        store = self.ctx.store
        previous = {k: store.global_state[k] for k in self.params}
        clients = sorted(uploads)
        # uniform weights, as the paper (and FL-bench) average the participants
        super().aggregate(rnd, uploads, dict.fromkeys(clients, 1.0))
        drift = {k: torch.zeros_like(v) for k, v in previous.items()}
        for c in clients:
            grad = self.grads.setdefault(c, {k: torch.zeros_like(v) for k, v in previous.items()})
            for k in self.params:
                step = uploads[c][k] - previous[k]
                grad[k] = grad[k] - alpha * step
                drift[k] += step
        m = self.ctx.data.num_clients
        for k in self.params:
            self.h[k] = self.h[k] - (alpha / m) * drift[k]
            store.global_state[k] = store.global_state[k] - self.h[k] / alpha
