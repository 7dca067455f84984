"""DFedPGP (Liu et al., CVPR 2024): partial personalization with push-sum on directed graphs.

Per client: shared body ``u_i`` (biased), personal linear head ``v_i``, push-sum weight ``μ_i``
and de-biased body ``z_i = u_i / μ_i`` (Algorithm 1). Each round:

1. head phase, ``K_v`` steps (``head_epochs`` epochs) on ``v_i`` at the de-biased body (line 6):
   ``v ← v − η_v ∇_v F_i(z_i, v)``;
2. body phase, ``K_u`` steps (``federation.local_epochs`` epochs) with the head fixed (line 10):
   ``u ← u − η_u ∇_u F_i(z, v_i^{t+1})``, ``z = u / μ_i^t`` — SGD on ``z`` with lr ``η_u / μ_i``;
3. push ``p_{j,i} u_i`` and ``p_{j,i} μ_i`` to the out-neighbours (and itself), sum what arrives,
   de-bias ``z_i = u_i / μ_i`` (lines 13–17).

Evaluation uses ``(z_i, v_i)``. Choices where the paper is silent (spec §2.5): a self-loop in
every out-set, ``p = 1 / (1 + k)``; out-neighbours resampled every round; ``η_v = η_u`` by
default (``head_lr_scale``); fresh momentum buffers every phase.
"""

from __future__ import annotations

import dataclasses

from fedpart.algorithms.decentralized import PushSum
from fedpart.config import option
from fedpart.engine.recipe import Recipe, head_then_body
from fedpart.registry import register


@register
class DFedPGP(PushSum):
    """Personal head, shared body mixed by push-sum over a directed time-varying graph."""

    name = "dfedpgp"
    needs_head_and_body = True
    summary = "Personal head; body by push-sum on a directed time-varying graph (head then body)."

    @dataclasses.dataclass
    class Options:
        head_epochs: int = option(1, "K_v: epochs of the head phase (the paper: 1)", ge=0)
        head_lr_scale: float = option(1.0, "η_v / η_u (the paper states only η_u; default 1)", ge=0)

    def personal_blocks(self) -> set[str]:
        return set(self.ctx.model.head_names)

    def recipe(self, rnd: int, client: int) -> Recipe:
        # head at the de-biased body (line 6), then the body with steps on u: lr η_u / μ_i (line 10)
        return head_then_body(
            self.ctx.model,
            self.options.head_epochs,
            head_lr_scale=self.options.head_lr_scale,
            body_lr_scale=self.step_scale(client),
        )
