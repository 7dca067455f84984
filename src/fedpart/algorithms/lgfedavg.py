"""LG-FedAvg (Liang et al., 2020): local representations, global head."""

from fedpart.algorithms.base import Algorithm
from fedpart.registry import register


@register
class LGFedAvg(Algorithm):
    """The body (representation) is personal; only the head is uploaded and averaged."""

    name = "lgfedavg"
    needs_head_and_body = True
    summary = "Personal body (local representation), head averaged."

    def personal_blocks(self) -> set[str]:
        return set(self.ctx.model.body_names())
