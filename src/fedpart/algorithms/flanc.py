"""FLANC (Mei et al., NeurIPS 2022): a shared neural basis θ_u and per-width coefficients θ_v."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from fedpart.algorithms.base import State
from fedpart.algorithms.pa3dfl import block_p_min, factorized_model
from fedpart.algorithms.widthsliced import WidthSliced
from fedpart.config import option
from fedpart.engine import method_state as saved
from fedpart.engine.mixing import weighted_average
from fedpart.engine.recipe import LossTerm, Phase, Recipe, bind, recipe_function
from fedpart.errors import ConfigError
from fedpart.models.base import BlockModel
from fedpart.models.factorized import FactorizedCNN
from fedpart.models.width import slice_state
from fedpart.registry import register
from fedpart.seeding import torch_generator

BASIS_INITS = ("orthonormal", "scaled")
#: the ``algorithm`` seed stream of the orthonormal basis initialisation
_BASIS_STREAM = 14


@dataclasses.dataclass
class FLANCOptions:
    reg: float = option(
        0.01, "λ of FLANC's orthogonality regulariser on every basis θ_u (Eq. 33)", ge=0
    )

    basis_init: str = option(
        "orthonormal",
        "θ_u starts with orthonormal columns, θ_v rescaled to keep the weight's "
        "variance (orthonormal), or θ_u ~ N(0, 1/R2) (scaled: columns of norm √(k²R1/R2), "
        "which the regulariser then shrinks towards 1)",
        choices=BASIS_INITS,
    )


@torch.no_grad()
def orthonormal_basis(model: FactorizedCNN, generator: torch.Generator) -> None:
    """Every layer's basis θ_u with orthonormal columns (where it has at least as many rows as
    columns; else orthonormal rows) — the point FLANC's regulariser ``‖θ_uᵀθ_u − I‖²`` pulls
    towards — and θ_v ~ U(±b) rescaled so that the composed weight keeps the variance of
    torch's default initialisation, ``1/(3·fan_in)``: each weight entry is a sum over θ_u's row
    of ``u·v``, and θ_u's rows have mean squared norm ``R2/(k²R1)`` (``min(R2, k²R1)/(k²R1)``
    in general)."""
    for name in [k.removeprefix("general.").removesuffix("_u") for k in model.general_keys()]:
        geo = model.layer_geometry(name)
        u, v = model.general[f"{name}_u"], model.personal[f"{name}_v"]
        torch.nn.init.orthogonal_(u, generator=generator)
        rows, cols = u.shape
        row_sq = min(rows, cols) / rows
        fan_in = geo.in_channels * geo.k2
        bound = math.sqrt(1.0 / (fan_in * row_sq))
        v.uniform_(-bound, bound, generator=generator)


@recipe_function
def orthogonality(params: dict[str, torch.Tensor], keys: tuple[str, ...]) -> Any:
    """FLANC's regulariser (Pa3dFL Eq. 33): ``(1/L) Σ_l ‖θ_uᵀθ_u − I‖²_F`` over the ``L``
    decomposed layers, the columns of each ``θ_u`` being its basis filters."""
    total = 0.0
    for k in keys:
        u = params[k]
        gram = u.t() @ u
        total = (
            total + (gram - torch.eye(gram.shape[0], dtype=u.dtype, device=u.device)).pow(2).sum()
        )
    return total / len(keys)


@dataclasses.dataclass(frozen=True)
class WidthGroups(saved.Field):
    """FLANC's per-width tensors ``{p: state}``: ``width<i>/<key>`` entries, the i-th width of
    the sorted ``group_widths`` value."""

    def save(self, method: Any) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        groups = self.get(method)
        widths = sorted(groups)
        tensors = {f"width{i}/{k}": v for i, p in enumerate(widths) for k, v in groups[p].items()}
        return tensors, {"group_widths": widths}

    def load(self, method: Any, tensors: dict[str, torch.Tensor], values: dict[str, Any]) -> None:
        groups = self.get(method)
        for i, p in enumerate(values.get("group_widths", [])):
            prefix = f"width{i}/"
            groups[float(p)] = {
                k.removeprefix(prefix): v for k, v in tensors.items() if k.startswith(prefix)
            }


@register
class FLANC(WidthSliced):
    """Every conv and hidden linear layer is ``θ = Reshape_FLANC(θ_u θ_v)`` (Eq. 3). A client of
    width ``p`` trains the whole basis ``θ_u`` and the coefficients (and biases and head) of its
    width. The server averages ``θ_u`` over all participants, and everything else only among
    participants of the same width: each width keeps its own coefficients, biases and head.
    Local loss: task loss ``+ λ·(1/L)Σ_l ‖θ_uᵀθ_u − I‖²``. ``docs/methods/flanc.md``."""

    name = "flanc"
    summary = "Shared basis θ_u averaged over all; θ_v, biases and head averaged per width."
    Options = FLANCOptions
    backends = ("sequential",)
    checkpointed = (*WidthSliced.checkpointed, WidthGroups("groups"))

    def wrap_model(self, model: BlockModel) -> BlockModel:
        # the factorized form of the run's CNN, with FLANC's ranks at the federation's p_min;
        # built through Pa3dFL's converter (its FLANC ablation is this model) without the local
        # head Pa3dFL adds
        p_min = block_p_min(self.ctx.capacity.width)
        shape = tuple(self.ctx.data.bundle.input_shape)
        try:
            spec_model = factorized_model(model, shape, p_min, "flanc")
        except ConfigError:
            raise ConfigError(
                "model.name",
                f"flanc decomposes pa3dfl_cnn or fedavgcnn (without norm), not {type(model).__name__}",
            ) from None
        flanc = FactorizedCNN(
            spec_model.num_classes, shape, decomposition="flanc", p_min=p_min, spec=spec_model.spec
        )
        if self.options.basis_init == "orthonormal":
            orthonormal_basis(flanc, torch_generator(self.ctx.cfg.seed, "algorithm", _BASIS_STREAM))
        return flanc

    def setup(self) -> None:
        super().setup()
        self.basis = tuple(self.ctx.model.general_keys())
        self.groups: dict[float, State] = {}
        init = self.ctx.store.global_state
        # every narrower width starts from the slice of the initial model and then lives apart
        for p in sorted({self.width(c) for c in range(self.ctx.data.num_clients)}):
            if p < 1.0:
                sub = slice_state(init, self.index_sets(0, self._any_client(p)))
                self.groups[p] = {k: v for k, v in sub.items() if k not in self.basis}

    def _any_client(self, p: float) -> int:
        return next(c for c in range(self.ctx.data.num_clients) if self.width(c) == p)

    def recipe(self, rnd: int, client: int) -> Recipe:
        if self.options.reg == 0:
            return Recipe()
        term = LossTerm(
            "orthogonality", bind(orthogonality, keys=tuple(self.basis)), self.options.reg
        )
        return Recipe(phases=(Phase(loss_terms=(term,)),))

    # ---------------------------------------------------------------- round
    def width_state(self, client: int) -> State:
        """The client's model: the current basis and its width group's other tensors."""
        p = self.width(client)
        state = self.ctx.store.global_state
        if p >= 1.0:
            return {k: v.clone() for k, v in state.items()}
        return {
            **{k: v.clone() for k, v in self.groups[p].items()},
            **{k: state[k].clone() for k in self.basis},
        }

    def start_state(self, rnd: int, client: int) -> State:
        return self.width_state(client)

    def eval_state(self, client: int) -> State:
        return self.width_state(client)

    def aggregate(self, rnd: int, uploads: dict[int, State], weights: dict[int, float]) -> None:
        """θ_u: the weighted average over every participant; every other tensor: the weighted
        average over the participants of the same width (FLANC's capacity-level aggregation)."""
        if not uploads:
            return
        clients = sorted(uploads)
        w = [weights[c] for c in clients]
        basis = weighted_average([uploads[c] for c in clients], w, list(self.basis))
        self.ctx.store.global_state.update(basis)
        for p in sorted({self.width(c) for c in clients}):
            members = [c for c in clients if self.width(c) == p]
            keys = [k for k in uploads[members[0]] if k not in self.basis]
            mixed = weighted_average(
                [uploads[c] for c in members], [weights[c] for c in members], keys
            )
            target = self.ctx.store.global_state if p >= 1.0 else self.groups[p]
            target.update(mixed)
