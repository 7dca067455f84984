"""FedRep (Collins et al., 2021): personal head trained first, then the shared body."""

from dataclasses import dataclass

from fedpart.algorithms.base import Algorithm
from fedpart.config import option
from fedpart.engine.recipe import Recipe, head_then_body
from fedpart.registry import register


@dataclass
class FedRepOptions:
    head_epochs: int = option(
        1, "epochs of the head phase (PFLlib default 1; the paper uses 10)", ge=0
    )
    body_epochs: int | None = option(
        None, "epochs of the body phase (default federation.local_epochs)", ge=0
    )


@register
class FedRep(Algorithm):
    """Each participant: (1) head epochs with the body fixed, (2) body epochs with the head fixed.
    The body is averaged (data-size weights); the head stays on the client."""

    name = "fedrep"
    needs_head_and_body = True
    summary = "Personal head trained first (body fixed), then the shared body; body averaged."
    Options = FedRepOptions

    def personal_blocks(self) -> set[str]:
        return set(self.ctx.model.head_names)

    def recipe(self, rnd: int, client: int) -> Recipe:
        return head_then_body(self.ctx.model, self.options.head_epochs, self.options.body_epochs)
