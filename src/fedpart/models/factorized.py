"""Factorized layers and the factorized Pa3dFL CNN: every weight is ``Reshape(θ_u θ_v)`` of a
general factor θ_u and a personal θ_v, in one of the two decompositions of
:mod:`fedpart.models.factorization` (Pa3dFL's Eq. 4, FLANC's Eq. 3).

:class:`FactorizedConv2d` and :class:`FactorizedLinear` hold their factors (``u``, ``v``, an
optional ``bias``) and narrow to a width by keeping θ_u whole and slicing θ_v.
:class:`FactorizedCNN` is the Pa3dFL CNN of Table 4 (both variants) built from these layers. Its
blocks are ``general`` (every θ_u and bias), ``personal`` (every θ_v) and ``head`` (a plain
``Linear``, never decomposed), plus an optional ``local_head``: the engine sees the general and
personal parameters as two blocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedpart.models.base import BlockModel, image_shape
from fedpart.models.cnn import PA3DFL_VARIANTS
from fedpart.models.factorization import (
    DECOMPOSITIONS,
    DEFAULT_P_MIN,
    RANK_RULES,
    Factorization,
    flanc_eq5_ranks,
    flanc_ranks,
    init_factors,
    pa3dfl_ranks,
    whole_number,
)
from fedpart.models.width import slice_state
from fedpart.models.width_plan import IndexSets, KeyIndex, kept_count

__all__ = ["FactorizedCNN", "FactorizedConv2d", "FactorizedLayer", "FactorizedLinear"]


class FactorizedLayer(nn.Module):
    """A factorized conv or linear layer of a given :class:`Factorization`, holding ``u``
    (θ_u), ``v`` (θ_v) and an optional ``bias``."""

    def __init__(self, geometry: Factorization, bias: bool) -> None:
        super().__init__()
        self.geometry = geometry
        self.u = nn.Parameter(torch.empty(geometry.u_shape))
        self.v = nn.Parameter(torch.empty(geometry.v_shape))
        self.bias = nn.Parameter(torch.empty(geometry.out_channels)) if bias else None
        init_factors(geometry, self.u, self.v, self.bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.geometry.apply(x, self.u, self.v, self.bias)

    def weight(self) -> Tensor:
        """The composed weight θ = Reshape(θ_u θ_v)."""
        return self.geometry.compose(self.u, self.v)

    def factor_index(self, out_channels: int, in_channels: int) -> IndexSets:
        """Index sets (``models.width`` form) of the narrowed layer's tensors: ``u`` whole,
        ``v``'s kept columns, the bias's kept outputs."""
        out: IndexSets = {"v": (None, self.geometry.v_index(out_channels, in_channels))}
        if self.bias is not None:
            out["bias"] = (torch.arange(out_channels),)
        return out

    def narrow(self, p: float, *, first: bool = False) -> FactorizedLayer:
        """The width-``p`` layer: the first ``p·T`` outputs and ``p·S`` inputs (all ``S`` when
        ``first``), sharing nothing with this one; ``u`` is copied whole."""
        geo = self.geometry
        t = kept_count(geo.out_channels, p)
        s = geo.in_channels if first else kept_count(geo.in_channels, p)
        small = FactorizedLayer(geo.narrow(t, s), self.bias is not None)
        index = self.factor_index(t, s)
        with torch.no_grad():
            small.u.copy_(self.u)
            small.v.copy_(self.v.index_select(1, index["v"][1]))  # type: ignore[arg-type]
            if self.bias is not None and small.bias is not None:
                small.bias.copy_(self.bias[:t])
        return small


class FactorizedConv2d(FactorizedLayer):
    """A conv layer whose weight is built from θ_u (general) and θ_v (personal).

    ``decomposition`` is ``pa3dfl`` (Eq. 4) or ``flanc`` (Eq. 3); ``r1, r2`` default to
    :func:`pa3dfl_ranks` or :func:`flanc_ranks` at ``p_min``.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        *,
        decomposition: str = "pa3dfl",
        p_min: float = DEFAULT_P_MIN,
        r1: int | None = None,
        r2: int | None = None,
        stride: int = 1,
        padding: int = 0,
        bias: bool = True,
        first: bool = False,
    ) -> None:
        if r1 is None or r2 is None:
            if decomposition == "pa3dfl":
                d1, d2 = pa3dfl_ranks(in_channels, out_channels, kernel_size, p_min, conv=True)
            else:
                d1, d2 = flanc_ranks(in_channels, out_channels, p_min, first=first)
            r1, r2 = r1 or d1, r2 or d2
        geo = Factorization(
            decomposition, in_channels, out_channels, kernel_size, r1, r2, stride, padding
        )
        super().__init__(geo, bias)


class FactorizedLinear(FactorizedLayer):
    """A linear layer whose weight is built from θ_u and θ_v (``k = 1``); see
    :class:`FactorizedConv2d`."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        decomposition: str = "pa3dfl",
        p_min: float = DEFAULT_P_MIN,
        r1: int | None = None,
        r2: int | None = None,
        bias: bool = True,
        first: bool = False,
    ) -> None:
        if r1 is None or r2 is None:
            if decomposition == "pa3dfl":
                d1, d2 = pa3dfl_ranks(in_features, out_features, 1, p_min, conv=False)
            else:
                d1, d2 = flanc_ranks(in_features, out_features, p_min, first=first)
            r1, r2 = r1 or d1, r2 or d2
        super().__init__(Factorization(decomposition, in_features, out_features, 0, r1, r2), bias)


# --------------------------------------------------------------------------------- the CNN
def _block_p_min(channels: int, p_min: float) -> float:
    """``p_min``, or ``1/channels`` (blocks of one channel, ``R1 = 1``) when ``channels·p_min`` is
    not a whole number of at least one."""
    blocks = channels * p_min
    return p_min if blocks >= 1 and abs(blocks - round(blocks)) < 1e-9 else 1.0 / channels


@dataclass(frozen=True)
class _Layer:
    geometry: Factorization
    pool: int  # 2×2 max-pool after a conv, 0 for a linear layer


class FactorizedCNN(BlockModel):
    """The Pa3dFL CNNs of Table 4 (``variant`` ``cifar100`` or ``fmnist``) with every layer but
    the head factorized (``decomposition`` ``pa3dfl`` or ``flanc``), at width ``width``.
    ``ranks`` picks a FLANC layer's rank rule (:data:`RANK_RULES`: :func:`flanc_ranks` or
    :func:`flanc_eq5_ranks`); a Pa3dFL layer always takes Eq. 5 (:func:`pa3dfl_ranks`).

    Blocks: ``general`` (``<layer>_u`` and ``<layer>_bias`` for ``conv1, conv2, fc1, fc2``),
    ``personal`` (``<layer>_v``), ``head`` (``Linear(p·F → classes)``) and, with
    ``local_head=True``, ``local_head`` (the same shape; Pa3dFL's HN-generated head, which a
    method applies to detached features: ``forward`` uses ``head``). θ_u has the same shape at
    every width; ``R1, R2`` come from the full layer and ``p_min``, so a width-``p`` model's
    tensors are slices of the full one's (:meth:`width_index_sets`, :meth:`narrow`).

    ``spec`` replaces the variant's layer sizes with any chain of two 5×5 convs (each with a
    2×2 max-pool) and hidden FC layers, ``{"channels": (c1, c2), "padding": p, "fc": (f1, …)}``:
    the factorized form of another CNN of that shape (the quick start's ``fedavgcnn``). A layer
    with fewer than ``1/p_min`` channels (so ``T·p_min`` is not whole) gets blocks of one channel.
    """

    def __init__(
        self,
        num_classes: int,
        input_shape: tuple[int, ...],
        *,
        variant: str = "cifar100",
        decomposition: str = "pa3dfl",
        p_min: float = DEFAULT_P_MIN,
        width: float = 1.0,
        local_head: bool = False,
        spec: dict[str, Any] | None = None,
        ranks: str = "flanc",
    ) -> None:
        super().__init__()
        c, h, w = image_shape("factorized_cnn", input_shape)
        if ranks not in RANK_RULES:
            raise ValueError(f"unknown rank rule {ranks!r}; valid: {RANK_RULES}")
        self.ranks = ranks
        if spec is None and variant not in PA3DFL_VARIANTS:
            raise ValueError(f"unknown variant {variant!r}; valid: {sorted(PA3DFL_VARIANTS)}")
        if decomposition not in DECOMPOSITIONS:
            raise ValueError(f"unknown decomposition {decomposition!r}; valid: {DECOMPOSITIONS}")
        whole_number(width / p_min, f"width / p_min ({width} / {p_min})")
        spec = dict(PA3DFL_VARIANTS[variant] if spec is None else spec)
        self.spec = spec
        self.variant, self.decomposition = variant, decomposition
        self.p_min, self.width, self.num_classes = p_min, width, num_classes
        self.input_shape = (c, h, w)
        full = self._full_layers(c, h, w, spec)
        self._full: dict[str, _Layer] = full
        self._layers: dict[str, _Layer] = {}
        inputs = c
        for name, layer in full.items():
            geo = layer.geometry
            outs = kept_count(geo.out_channels, width)
            ins = inputs if name == "conv1" else kept_count(geo.in_channels, width)
            self._layers[name] = _Layer(geo.narrow(outs, ins), layer.pool)
            inputs = outs
        self.general = nn.ParameterDict()
        self.personal = nn.ParameterDict()
        for name, layer in self._layers.items():
            geo = layer.geometry
            u = nn.Parameter(torch.empty(geo.u_shape))
            v = nn.Parameter(torch.empty(geo.v_shape))
            b = nn.Parameter(torch.empty(geo.out_channels))
            init_factors(geo, u, v, b)
            self.general[f"{name}_u"] = u
            self.general[f"{name}_bias"] = b
            self.personal[f"{name}_v"] = v
        hidden = self._layers[next(reversed(self._layers))].geometry.out_channels
        self.head = nn.Linear(hidden, num_classes)
        if local_head:
            self.local_head = nn.Linear(hidden, num_classes)
            self.head_names = ("head", "local_head")
        self._finalize(input_shape)

    def _full_layers(self, c: int, h: int, w: int, spec: dict[str, Any]) -> dict[str, _Layer]:
        pad = int(spec["padding"])
        (c1, c2), hidden = spec["channels"], tuple(spec["fc"])
        size = h, w
        for _ in range(2):
            size = tuple((s + 2 * pad - 4) // 2 for s in size)
        flat = c2 * size[0] * size[1]
        shapes = [("conv1", c, c1, 5, True), ("conv2", c1, c2, 5, False)]
        fan_in = flat
        for i, f in enumerate(hidden, start=1):
            shapes.append((f"fc{i}", fan_in, f, 0, False))
            fan_in = f
        out: dict[str, _Layer] = {}
        for name, s, t, k, first in shapes:
            # a layer too narrow for whole blocks at p_min (fewer than 1/p_min channels: the
            # quick start's CNN) takes blocks of one channel, R1 = 1, which every width divides
            pm = _block_p_min(t if self.decomposition == "pa3dfl" else s, self.p_min)
            if self.decomposition == "pa3dfl":
                r1, r2 = pa3dfl_ranks(s, t, k, pm, conv=k > 0)
            elif self.ranks == "eq5":
                r1, r2 = flanc_eq5_ranks(s, t, k, pm, first=first)
            else:
                r1, r2 = flanc_ranks(s, t, pm, first=first)
            geo = Factorization(self.decomposition, s, t, k, r1, r2, 1, pad if k else 0)
            out[name] = _Layer(geo, 2 if k else 0)
        return out

    # ------------------------------------------------------------------ computation
    def features(self, x: Tensor) -> Tensor:
        for name, layer in self._layers.items():
            x = layer.geometry.apply(
                x,
                self.general[f"{name}_u"],
                self.personal[f"{name}_v"],
                self.general[f"{name}_bias"],
            )
            if layer.pool:
                x = F.max_pool2d(x, layer.pool)  # pool then ReLU: they commute (see ConvBlock)
            x = F.relu(x)
        return torch.flatten(x, 1)

    def classify(self, z: Tensor) -> Tensor:
        return self.head(z)

    def block_outputs(self, x: Tensor) -> dict[str, Tensor]:
        """The general and personal blocks act together, so both map to the body's output."""
        z = self.features(x)
        out = {"general": z, "personal": z, "head": self.head(z)}
        if "local_head" in self._modules:
            out["local_head"] = self.local_head(z)
        return out

    def layer_geometry(self, name: str) -> Factorization:
        """The (narrowed) geometry of layer ``conv1``, ``conv2``, ``fc1`` or ``fc2``."""
        return self._layers[name].geometry

    def composed_weights(self) -> dict[str, Tensor]:
        """Every factorized layer's composed weight ``Reshape(θ_u θ_v)``, by layer name."""
        return {
            name: layer.geometry.compose(self.general[f"{name}_u"], self.personal[f"{name}_v"])
            for name, layer in self._layers.items()
        }

    def general_keys(self) -> list[str]:
        """State keys of θ_u (same shape for every client; Pa3dFL averages them uniformly)."""
        return [f"general.{n}_u" for n in self._layers]

    def personal_keys(self) -> list[str]:
        """State keys of θ_v (pruned per client)."""
        return [f"personal.{n}_v" for n in self._layers]

    # ------------------------------------------------------------------ width
    def width_index_sets(self, p: float) -> IndexSets:
        """What a width-``p`` client holds of this model's state (``models.width`` form): θ_u
        whole, θ_v's kept columns, the first ``p·T`` biases, the head's first ``p·F`` inputs.
        ``p`` must be a multiple of ``p_min`` and at most this model's width."""
        if p > self.width + 1e-12:
            raise ValueError(f"width {p} exceeds this model's width {self.width}")
        whole_number(p / self.p_min, f"p / p_min ({p} / {self.p_min})")
        out: IndexSets = {}
        inputs = self.input_shape[0]
        for name, layer in self._layers.items():
            geo = layer.geometry
            full = self._full[name].geometry
            outs = kept_count(full.out_channels, p)
            ins = inputs if name == "conv1" else kept_count(full.in_channels, p)
            out[f"personal.{name}_v"] = (None, geo.v_index(outs, ins))
            out[f"general.{name}_bias"] = (torch.arange(outs),)
            inputs = outs
        index: KeyIndex = (None, torch.arange(inputs))
        for head in self.head_names:
            out[f"{head}.weight"] = index
        return out

    def narrow(self, p: float) -> FactorizedCNN:
        """The width-``p`` model holding this model's tensors sliced by :meth:`width_index_sets`."""
        small = FactorizedCNN(
            self.num_classes,
            self.input_shape,
            variant=self.variant,
            decomposition=self.decomposition,
            p_min=self.p_min,
            width=p,
            local_head="local_head" in self._modules,
            spec=self.spec,
            ranks=self.ranks,
        )
        small.load_state_dict(slice_state(self.state_dict(), self.width_index_sets(p)))
        return small
