"""FedRep (Collins et al., 2021): personal head trained first, then the shared body."""

from dataclasses import dataclass, field

from fedpart.algorithms.base import Algorithm
from fedpart.algorithms.registry import register
from fedpart.engine.recipe import Recipe, head_then_body
from fedpart.errors import ConfigError


@dataclass
class FedRepOptions:
    head_epochs: int = field(
        default=1,
        metadata={"doc": "epochs of the head phase (PFLlib default 1; the paper uses 10)"},
    )
    body_epochs: int | None = field(
        default=None, metadata={"doc": "epochs of the body phase (default federation.local_epochs)"}
    )

    def check(self) -> None:
        if self.head_epochs < 0:
            raise ConfigError("algorithm.head_epochs", f"must be >= 0, got {self.head_epochs}")
        if self.body_epochs is not None and self.body_epochs < 0:
            raise ConfigError("algorithm.body_epochs", f"must be >= 0, got {self.body_epochs}")


@register
class FedRep(Algorithm):
    """Each participant: (1) head epochs with the body fixed, (2) body epochs with the head fixed.
    The body is averaged (data-size weights); the head stays on the client."""

    name = "fedrep"
    summary = "Personal head trained first (body fixed), then the shared body; body averaged."
    Options = FedRepOptions

    def personal_blocks(self) -> set[str]:
        return set(self.sim.model.head_names)

    def recipe(self, rnd: int, client: int) -> Recipe:
        return head_then_body(self.sim.model, self.options.head_epochs, self.options.body_epochs)
