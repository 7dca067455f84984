"""HeteroFL (Diao et al., ICLR 2021): nested prefix submodels, holder averaging, the Scaler."""

from __future__ import annotations

import dataclasses

from fedpart.algorithms.widthsliced import WidthSliced
from fedpart.config import option
from fedpart.registry import register


@dataclasses.dataclass
class HeteroFLOptions:
    scaler: bool = option(
        True, "divide each sliced layer's output by the width p in training (Scaler)"
    )


@register
class HeteroFL(WidthSliced):
    """A client of width ``p`` trains the first ``⌈p·C⌉`` channels of every layer (the model
    shrinks from the right, so narrower models are nested in wider ones); the server averages
    each coordinate over the clients that hold it. The Scaler divides a layer's output by ``p``
    during training only. ``docs/methods/heterofl.md``."""

    name = "heterofl"
    summary = "Nested prefix submodels of each client's width, holder-averaged (with Scaler)."
    Options = HeteroFLOptions
    selection = "prefix"
