"""OSGP (Assran et al., ICML 2019): stochastic gradient push of the whole model.

Every client takes local SGD steps with gradients at its de-biased model ``z_i = u_i / μ_i``
applied to ``u_i``, then pushes ``p u_i`` and ``p μ_i`` over a directed time-varying graph and
de-biases. The overlap of communication with computation in the paper is a systems device; the
simulation is synchronous (a one-round delay of the overlap variant is not modelled).
"""

from __future__ import annotations

from fedpart.algorithms.decentralized import PushSum
from fedpart.engine.recipe import Phase, Recipe
from fedpart.registry import register


@register
class OSGP(PushSum):
    """Full-model push-sum on a directed graph (no personal part)."""

    name = "osgp"
    summary = "Stochastic gradient push: full-model push-sum on a directed time-varying graph."

    def recipe(self, rnd: int, client: int) -> Recipe:
        return Recipe(phases=(Phase(lr_scale=self.step_scale(client)),))
