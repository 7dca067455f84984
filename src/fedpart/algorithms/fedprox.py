"""FedProx (Li et al., 2020): FedAvg with a proximal term to the round's global model."""

from dataclasses import dataclass

from fedpart.algorithms.base import Algorithm
from fedpart.config import option
from fedpart.engine.recipe import LossTerm, Phase, Recipe, proximal
from fedpart.registry import register


@dataclass
class FedProxOptions:
    mu: float = option(0.01, "proximal weight: loss + (mu/2)·||w - w_global||²", ge=0)


@register
class FedProx(Algorithm):
    """Local objective F_i(w) + (μ/2)‖w − w^t‖², w^t the model received this round; FedAvg mixing."""

    name = "fedprox"
    summary = "FedAvg with the proximal term (mu/2)||w - w_global||^2."
    Options = FedProxOptions

    def setup(self) -> None:
        self.round_recipe = self.proximal_recipe()

    def begin_round(self, rnd: int) -> None:
        # One recipe per round: every participant's reference is the same received model w^t
        # (the server model changes only after the round), so the clients can train batched.
        self.round_recipe = self.proximal_recipe()

    def proximal_recipe(self) -> Recipe:
        """Local training with the proximal term to the server model as it is now."""
        store = self.ctx.store
        trainable = [k for k, _ in self.ctx.model.named_parameters()]
        reference = {k: store.global_state[k].detach() for k in trainable}
        term = LossTerm("proximal", proximal(reference), weight=self.options.mu)
        return Recipe(phases=(Phase(loss_terms=(term,)),))

    def recipe(self, rnd: int, client: int) -> Recipe:
        return self.round_recipe
