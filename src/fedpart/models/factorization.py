"""Factorized weights: a weight that is the product of a general factor θ_u and a personal θ_v.

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

:class:`Factorization` holds one layer's shapes and makes and applies its weight from factors
passed in; the layers and the CNN built from it are in :mod:`fedpart.models.factorized`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "DECOMPOSITIONS",
    "DEFAULT_P_MIN",
    "RANK_RULES",
    "Factorization",
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


def whole_number(x: float, what: str) -> int:
    """``x`` as a positive whole number (to 1e-9), else a ``ValueError`` naming ``what``."""
    n = round(x)
    if n < 1 or abs(x - n) > 1e-9:
        raise ValueError(f"{what} = {x} is not a positive whole number")
    return n


def pa3dfl_ranks(
    in_channels: int, out_channels: int, kernel_size: int, p_min: float, *, conv: bool
) -> tuple[int, int]:
    """Pa3dFL Eq. (5): ``R1 = T·p_min``; ``R2 = max(min(S, T), k²)`` for a conv, ``R1`` for a
    linear layer. ``T·p_min`` must be a whole number (every width is a multiple of ``p_min``)."""
    r1 = whole_number(out_channels * p_min, f"R1 = T·p_min ({out_channels}·{p_min})")
    return r1, _eq5_r2(in_channels, out_channels, kernel_size, r1, conv=conv)


def _eq5_r2(in_channels: int, out_channels: int, kernel_size: int, r1: int, *, conv: bool) -> int:
    """Eq. (5)'s ``R2``: ``max(min(S, T), k²)`` for a conv, ``R1`` for a linear layer."""
    return max(min(in_channels, out_channels), kernel_size * kernel_size) if conv else r1


def _flanc_groups(in_channels: int, p_min: float, first: bool) -> int:
    """FLANC's ``R1``: ``S·p_min`` input channels per group, ``S`` for the first layer."""
    return (
        in_channels if first else whole_number(in_channels * p_min, f"R1 = S·p_min ({in_channels})")
    )


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


def init_factors(geo: Factorization, u: Tensor, v: Tensor, bias: Tensor | None) -> None:
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
