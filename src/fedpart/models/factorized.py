"""Factorized layers: a weight that is the product of a general factor θ_u and a personal θ_v.

Two decompositions of a conv weight ``θ ∈ R^{T×S×k×k}`` (``T`` outputs, ``S`` inputs, kernel
``k``; a linear layer is ``k = 1``), both with ``θ_u ∈ R^{k²R1×R2}``:

- **FLANC** (Pa3dFL Eq. 3): ``θ_v ∈ R^{R2×T(S/R1)}``. A column of ``θ' = θ_u θ_v`` is the
  ``k²R1`` kernel of one output channel over one group of ``R1`` consecutive input channels;
  output channel ``o`` is the ``S/R1`` consecutive columns ``o·S/R1 …``. ``θ_u`` is a basis of
  ``R2`` filters shared by every output channel. The layer computes like FLANC's code: the input
  groups are convolved with the basis, then a 1×1 convolution mixes the responses, which costs
  ``k²·S·R2 + (S/R1)·R2·T`` multiply-adds per output position instead of ``k²·S·T``.
- **Pa3dFL** (Eq. 4), channel-aware: ``θ_u = [u_1; …; u_R1]`` with ``u_i ∈ R^{k²×R2}`` and
  ``θ_v = [v_1, …, v_{T/R1}]`` with ``v_j ∈ R^{R2×S}``; output channel ``o_ij = u_i v_j``. The
  weight is rebuilt from the factors in every forward pass (Alg. 3 line 6), so gradients reach
  both, and the convolution then runs at the layer's width.

Channel order (Pa3dFL §2.11.3, unspecified in the paper): ``o = j·R1 + i`` (j-major), so the
first ``p·T`` output channels are the blocks ``j < p/p_min`` and pruning to width ``p`` keeps a
prefix of outputs that matches the next layer's input prefix. ``θ_u`` is never pruned; ``θ_v``
loses whole blocks ``v_j`` (outputs) and input columns (Eq. 10). FLANC's reduction keeps the
first ``p·T`` outputs and the first ``p·S/R1`` input groups (``SpTp/R1`` columns).

Coefficients: Pa3dFL Eq. (5), ``R1 = T·p_min`` and ``R2 = max(min(S, T), k²)`` (conv) or
``R2 = R1`` (linear) (:func:`pa3dfl_ranks`). FLANC's are not given by the Pa3dFL paper;
:func:`flanc_ranks` uses a basis of ``R1 = S·p_min`` input channels (the whole input of the first
layer) and ``R2 = T/4`` basis filters, which reproduces Pa3dFL's Table 2 FLANC FLOPs and sizes
(``engine.width_cost``; ``docs/capacity.md``). :func:`flanc_eq5_ranks` keeps FLANC's layout
with Eq. 5's ``R2`` (the Table 3 ablation read as a change of layout only).

:class:`FactorizedCNN` is the Pa3dFL CNN of Table 4 (both variants) built from these layers. Its
blocks are ``general`` (every θ_u and bias), ``personal`` (every θ_v) and ``head`` (a plain
``Linear``, never decomposed), plus an optional ``local_head``: the engine sees the general and
personal parameters as two blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedpart.models.base import BlockModel, image_shape
from fedpart.models.cnn import PA3DFL_VARIANTS
from fedpart.models.width import IndexSets, KeyIndex, kept_count

__all__ = [
    "DECOMPOSITIONS",
    "DEFAULT_P_MIN",
    "Factorization",
    "FactorizedCNN",
    "FactorizedConv2d",
    "FactorizedLayer",
    "FactorizedLinear",
    "RANK_RULES",
    "flanc_eq5_ranks",
    "flanc_ranks",
    "offdiagonal_gram_penalty",
    "pa3dfl_ranks",
]

DECOMPOSITIONS = ("pa3dfl", "flanc")
#: how a FLANC-decomposed layer's ``R2`` is chosen: ``flanc`` (FLANC's code, ``T/4`` basis
#: filters) or ``eq5`` (Pa3dFL's Eq. 5 rule, the Table 3 ablation's other reading)
RANK_RULES = ("flanc", "eq5")

#: Pa3dFL's default smallest width σ = 1/16 (``engine.capacity.DEFAULT_P_MIN``; not imported, so
#: that the model zoo does not load the engine)
DEFAULT_P_MIN = 1.0 / 16.0


def _whole(x: float, what: str) -> int:
    n = round(x)
    if n < 1 or abs(x - n) > 1e-9:
        raise ValueError(f"{what} = {x} is not a positive whole number")
    return n


def pa3dfl_ranks(
    in_channels: int, out_channels: int, kernel_size: int, p_min: float, *, conv: bool
) -> tuple[int, int]:
    """Pa3dFL Eq. (5): ``R1 = T·p_min``; ``R2 = max(min(S, T), k²)`` for a conv, ``R1`` for a
    linear layer. ``T·p_min`` must be a whole number (every width is a multiple of ``p_min``)."""
    r1 = _whole(out_channels * p_min, f"R1 = T·p_min ({out_channels}·{p_min})")
    return r1, _eq5_r2(in_channels, out_channels, kernel_size, r1, conv=conv)


def _eq5_r2(in_channels: int, out_channels: int, kernel_size: int, r1: int, *, conv: bool) -> int:
    """Eq. (5)'s ``R2``: ``max(min(S, T), k²)`` for a conv, ``R1`` for a linear layer."""
    return max(min(in_channels, out_channels), kernel_size * kernel_size) if conv else r1


def _flanc_groups(in_channels: int, p_min: float, first: bool) -> int:
    """FLANC's ``R1``: ``S·p_min`` input channels per group, ``S`` for the first layer."""
    return in_channels if first else _whole(in_channels * p_min, f"R1 = S·p_min ({in_channels})")


def flanc_ranks(
    in_channels: int,
    out_channels: int,
    p_min: float,
    *,
    first: bool = False,
    basis_fraction: float = 0.25,
) -> tuple[int, int]:
    """FLANC's basis: ``R1 = S·p_min`` input channels per group (``S`` for the first layer, whose
    image channels are never pruned) and ``R2 = round(T·basis_fraction)`` basis filters.

    FLANC's own code uses ``R2 = T/4`` (its ``n_basis = 0.25``); ``R1 = S·p_min`` is the
    largest group that the narrowest client's ``p_min·S`` inputs still divide into. These are the
    values with which Pa3dFL's Table 2 FLANC row is reproduced (FLOPs within 0.3%).
    """
    return _flanc_groups(in_channels, p_min, first), max(1, round(out_channels * basis_fraction))


def flanc_eq5_ranks(
    in_channels: int, out_channels: int, kernel_size: int, p_min: float, *, first: bool = False
) -> tuple[int, int]:
    """FLANC's layout (Eq. 3) with Pa3dFL's rank rule (Eq. 5) for ``R2``: ``R1 = S·p_min``
    (``S`` for the first layer: the groups FLANC's layout needs, as :func:`flanc_ranks`) and
    ``R2 = max(min(S, T), k²)`` for a conv, ``R2 = R1`` for a linear layer.

    A reading of Table 3's "Eq. (3) replaces Eq. (4)" that changes only the layout: θ_v then has
    about as many entries as Pa3dFL's (1.70 M against 1.69 M on the Fashion-MNIST CNN), while
    FLANC's own ``R2 = T/4`` gives a larger θ_u and a smaller θ_v (27 k / 1.13 M).
    """
    r1 = _flanc_groups(in_channels, p_min, first)
    return r1, _eq5_r2(in_channels, out_channels, kernel_size, r1, conv=kernel_size > 0)


# --------------------------------------------------------------------------------- geometry
@dataclass(frozen=True)
class Factorization:
    """The shapes of one factorized layer and how its factors make and apply its weight.

    Parameters are passed in, not held, so one geometry serves a layer module and a model that
    keeps its factors in separate blocks. ``kernel_size = 0`` marks a linear layer.
    """

    kind: str
    in_channels: int
    out_channels: int
    kernel_size: int
    r1: int
    r2: int
    stride: int = 1
    padding: int = 0

    def __post_init__(self) -> None:
        if self.kind not in DECOMPOSITIONS:
            raise ValueError(f"unknown decomposition {self.kind!r}; valid: {DECOMPOSITIONS}")
        split, name = (self.out_channels, "T") if self.kind == "pa3dfl" else (self.in_channels, "S")
        if self.r1 < 1 or self.r2 < 1 or split % self.r1:
            raise ValueError(f"{self.kind}: R1 = {self.r1} must divide {name} = {split}")

    @property
    def conv(self) -> bool:
        """Whether the layer is a convolution (``kernel_size > 0``)."""
        return self.kernel_size > 0

    @property
    def k2(self) -> int:
        """Kernel positions ``k²`` (1 for a linear layer)."""
        return self.kernel_size**2 if self.conv else 1

    @property
    def u_shape(self) -> tuple[int, int]:
        """θ_u: ``(k²·R1, R2)``, rows ``(i, κ)`` with the kernel position ``κ`` fastest."""
        return (self.k2 * self.r1, self.r2)

    @property
    def v_shape(self) -> tuple[int, int]:
        """θ_v: ``(R2, (T/R1)·S)`` for Pa3dFL (columns ``(j, s)``), ``(R2, T·(S/R1))`` for FLANC
        (columns ``(o, g)``)."""
        if self.kind == "pa3dfl":
            return (self.r2, (self.out_channels // self.r1) * self.in_channels)
        return (self.r2, self.out_channels * (self.in_channels // self.r1))

    @property
    def weight_shape(self) -> tuple[int, ...]:
        """The composed weight's shape: ``(T, S, k, k)`` or ``(T, S)``."""
        k = self.kernel_size
        kk = (k, k) if self.conv else ()
        return (self.out_channels, self.in_channels, *kk)

    # ------------------------------------------------------------------ weights
    def compose(self, u: Tensor, v: Tensor) -> Tensor:
        """The layer's weight ``Reshape(θ_u θ_v)`` (Eq. 3 or Eq. 4)."""
        w = u @ v
        k, r1, s, t = self.kernel_size, self.r1, self.in_channels, self.out_channels
        kk = (k, k) if self.conv else ()
        if self.kind == "pa3dfl":
            nb = t // r1
            if self.conv:
                w = w.view(r1, k, k, nb, s).permute(3, 0, 4, 1, 2)
            else:
                w = w.view(r1, nb, s).permute(1, 0, 2)
            # contiguous: a view with channels-last strides (one block) would switch the
            # convolution to another algorithm than the plain layer's
            return w.reshape(t, s, *kk).contiguous()
        g = s // r1
        if self.conv:
            w = w.view(r1, k, k, t, g).permute(3, 4, 0, 1, 2)
        else:
            w = w.view(r1, t, g).permute(1, 2, 0)
        return w.reshape(t, s, *kk).contiguous()

    def apply(self, x: Tensor, u: Tensor, v: Tensor, bias: Tensor | None) -> Tensor:
        """The layer's output for ``x`` (``[B, S, H, W]``, or anything flattening to ``[B, S]``)."""
        if self.kind == "pa3dfl":
            weight = self.compose(u, v)
            if self.conv:
                return F.conv2d(x, weight, bias, self.stride, self.padding)
            return F.linear(torch.flatten(x, 1), weight, bias)
        return self._apply_basis(x, u, v, bias)

    def _apply_basis(self, x: Tensor, u: Tensor, v: Tensor, bias: Tensor | None) -> Tensor:
        # FLANC computes through the basis: every group of R1 inputs is filtered by the R2 shared
        # basis filters, and a 1×1 mixing with θ_v's coefficients gives the T outputs
        r1, r2, t = self.r1, self.r2, self.out_channels
        g = self.in_channels // r1
        coeff = v.view(r2, t, g).permute(1, 2, 0).reshape(t, g * r2).contiguous()
        if self.conv:
            b, _, h, w = x.shape
            k = self.kernel_size
            basis = u.t().reshape(r2, r1, k, k).contiguous()
            y = F.conv2d(x.reshape(b * g, r1, h, w), basis, None, self.stride, self.padding)
            y = y.reshape(b, g * r2, y.shape[-2], y.shape[-1])
            return F.conv2d(y, coeff[:, :, None, None], bias)
        x = torch.flatten(x, 1)
        y = (x.reshape(x.shape[0], g, r1) @ u).reshape(x.shape[0], g * r2)
        return F.linear(y, coeff, bias)

    # ------------------------------------------------------------------ width
    def narrow(self, out_channels: int, in_channels: int) -> Factorization:
        """The geometry that keeps the first ``out_channels`` outputs and ``in_channels`` inputs
        (θ_u unchanged)."""
        if not (0 < out_channels <= self.out_channels and 0 < in_channels <= self.in_channels):
            raise ValueError(
                f"cannot keep {out_channels}×{in_channels} of {self.out_channels}×"
                f"{self.in_channels}"
            )
        return replace(self, out_channels=out_channels, in_channels=in_channels)

    def v_index(self, out_channels: int, in_channels: int) -> Tensor:
        """The columns of θ_v that the narrowed layer keeps, in its column order."""
        small = self.narrow(out_channels, in_channels)
        if self.kind == "pa3dfl":
            nb = small.out_channels // self.r1
            j = torch.arange(nb)[:, None] * self.in_channels
            return (j + torch.arange(small.in_channels)[None, :]).reshape(-1)
        g_full = self.in_channels // self.r1
        g = small.in_channels // self.r1
        o = torch.arange(small.out_channels)[:, None] * g_full
        return (o + torch.arange(g)[None, :]).reshape(-1)


def offdiagonal_gram_penalty(u: Tensor) -> Tensor:
    """``‖θ_uᵀθ_u − diag(θ_uᵀθ_u)‖²_F``: Pa3dFL's orthogonality regularizer (Eq. 32, literal
    reading: the Gram matrix of the whole θ_u, off-diagonal part), summed over conv layers by the
    method."""
    gram = u.t() @ u
    return (gram - torch.diag_embed(torch.diagonal(gram))).pow(2).sum()


def _init_factors(geo: Factorization, u: Tensor, v: Tensor, bias: Tensor | None) -> None:
    # The paper does not say how the factors start. These scales give the composed weight the
    # variance of torch's default init, U(±1/√fan_in): u ~ N(0, 1/R2) makes each weight entry a
    # sum of R2 terms u·v with variance Var(v).
    fan_in = geo.in_channels * geo.k2
    bound = 1.0 / math.sqrt(fan_in)
    with torch.no_grad():
        u.normal_(0.0, 1.0 / math.sqrt(geo.r2))
        v.uniform_(-bound, bound)
        if bias is not None:
            bias.uniform_(-bound, bound)


# --------------------------------------------------------------------------------- layers
class FactorizedLayer(nn.Module):
    """A factorized conv or linear layer of a given :class:`Factorization`, holding ``u``
    (θ_u), ``v`` (θ_v) and an optional ``bias``."""

    def __init__(self, geometry: Factorization, bias: bool) -> None:
        super().__init__()
        self.geometry = geometry
        self.u = nn.Parameter(torch.empty(geometry.u_shape))
        self.v = nn.Parameter(torch.empty(geometry.v_shape))
        self.bias = nn.Parameter(torch.empty(geometry.out_channels)) if bias else None
        _init_factors(geometry, self.u, self.v, self.bias)

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
        _whole(width / p_min, f"width / p_min ({width} / {p_min})")
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
            _init_factors(geo, u, v, b)
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
        _whole(p / self.p_min, f"p / p_min ({p} / {self.p_min})")
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
        from fedpart.models.width import slice_state

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
