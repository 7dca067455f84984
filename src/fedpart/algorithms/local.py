"""Local: every client trains alone; nothing is communicated."""

from fedpart.algorithms.base import Algorithm
from fedpart.registry import register


@register
class Local(Algorithm):
    """Every block is personal, so nothing is uploaded, downloaded or averaged."""

    name = "local"
    summary = "Local training only; no communication (the personalisation floor/ceiling)."
    has_global_model = False
    communicates = False

    def personal_blocks(self) -> set[str]:
        return set(self.ctx.model.block_names)
