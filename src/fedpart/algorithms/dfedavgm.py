"""DFedAvgM (Sun et al., TPAMI 2023) and its partially personalised ablation DFedAvgM-P.

DFedAvgM: every client runs local SGD with heavy-ball momentum (``federation.momentum``), then
averages its whole model with its neighbours on an undirected graph with a symmetric, doubly
stochastic mixing matrix: ``x_i ← Σ_j W[i, j] x_j``.

DFedAvgM-P (DFedPGP paper, Table 4): the same gossip, with the linear head personal.
"""

from __future__ import annotations

import dataclasses

from fedpart.algorithms.decentralized import Decentralized
from fedpart.config import option
from fedpart.engine.recipe import Recipe, head_then_body
from fedpart.registry import register


@register
class DFedAvgM(Decentralized):
    """Local momentum SGD, then gossip of the full model (Metropolis weights, k-regular graph)."""

    name = "dfedavgm"
    summary = "Decentralized FedAvg with local momentum: gossip of the whole model."


@register
class DFedAvgMP(Decentralized):
    """DFedAvgM with the head personal: only the body is gossiped."""

    name = "dfedavgmp"
    needs_head_and_body = True
    summary = (
        "DFedAvgM with a personal head (DFedPGP's ablation): body gossiped on an undirected graph."
    )

    @dataclasses.dataclass
    class Options:
        head_epochs: int = option(
            1,
            "epochs of the head phase before the body phase, as DFedPGP's recipe "
            "(0: head and body trained jointly)",
            ge=0,
        )

    def personal_blocks(self) -> set[str]:
        return set(self.ctx.model.head_names)

    def recipe(self, rnd: int, client: int) -> Recipe:
        if self.options.head_epochs == 0:
            return Recipe()  # head and body trained jointly
        return head_then_body(self.ctx.model, self.options.head_epochs)
