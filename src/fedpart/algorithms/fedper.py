"""FedPer (Arivazhagan et al., 2019): shared body, personal head, trained jointly."""

from fedpart.algorithms.base import Algorithm
from fedpart.registry import register


@register
class FedPer(Algorithm):
    """Clients train the whole model; only the body is uploaded and averaged.

    w_b^{t+1} = Σ_{i∈S_t} n_i w_{i,b}^{t+1} / Σ n_i; the head w_{i,h} never leaves client i.
    """

    name = "fedper"
    needs_head_and_body = True
    summary = "Shared body averaged, personal head; trained jointly."

    def personal_blocks(self) -> set[str]:
        return set(self.ctx.model.head_names)
