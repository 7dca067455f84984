"""FedAvg and FedPer run peer to peer, as the UA-PDFL paper runs them (its §5.1.3).

"Each client serves as a central server itself": in every round each client pulls the models
of ``N_com`` random peers (``topology.neighbors``, a directed queue drawn anew every round),
averages them with its own by training-set size, then trains locally (Algorithm 2's order).
``dfedavg`` averages the whole model; ``dfedper`` only the body, the head staying local.
"""

from __future__ import annotations

from typing import Any, ClassVar

from fedpart.algorithms.decentralized import Decentralized
from fedpart.registry import register


@register
class DFedAvg(Decentralized):
    """Each client averages itself and N_com pulled peers (whole model), then trains."""

    name = "dfedavg"
    summary = (
        "FedAvg peer to peer (UA-PDFL protocol): average self + N_com random peers, then train."
    )
    default_topology: ClassVar[dict[str, Any]] = {"name": "kpull", "neighbors": 5}
    mixing: ClassVar[str] = "size"
    mix_first: ClassVar[bool] = True


@register
class DFedPer(DFedAvg):
    """As :class:`DFedAvg`, but only the body is averaged; the head never leaves its client."""

    name = "dfedper"
    needs_head_and_body = True
    summary = "FedPer peer to peer (UA-PDFL protocol): body averaged over self + N_com peers."

    def personal_blocks(self) -> set[str]:
        return set(self.ctx.model.head_names)
