"""FedRolex (Alam et al., NeurIPS 2022): rolling sub-model extraction, holder averaging."""

from __future__ import annotations

import dataclasses

from fedpart.algorithms.widthsliced import WidthSliced
from fedpart.config import option
from fedpart.registry import register


@dataclasses.dataclass
class FedRolexOptions:
    scaler: bool = option(False, "divide each sliced layer's output by the width p in training")


@register
class FedRolex(WidthSliced):
    """In round ``t`` a client of width ``p`` trains the channels ``(t + i) mod C``,
    ``i < ⌈p·C⌉``, of every layer of ``C`` channels: the window advances by one channel per
    round, so every coordinate of the server model is trained over time even when no client is
    wide. The server averages each coordinate over the clients that hold it.
    ``docs/methods/fedrolex.md``."""

    name = "fedrolex"
    summary = "Rolling-window submodels (offset = round), holder-averaged."
    Options = FedRolexOptions
    selection = "rolling"

    def offset(self, rnd: int) -> int:
        return rnd
