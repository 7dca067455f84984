"""UA-PDFL (Zhu, Fan, Xie; Neurocomputing): unit-representation aided personalized DFL.

Algorithm 2 of the paper, synchronous (every client reads the round-(r−1) snapshot, spec A15).
The model is ``w = w_g ⊕ w_h``: g = the body blocks (conv layers), h = the head blocks (spec A5).
Every client holds I = softmax(h(g(X_unit))) (Eq. 5) and I^Aux = g(X_unit) (Eq. 11), computed
from w^0 before round 1 and after every local update (lines 24-25), with X_unit the constant
input a·1 of one sample's shape (Eq. 4). In round r, client i with its queue Q_i (``kpull``,
N_com random peers drawn anew every round, line 6):

1. receives I_j, I_j^Aux and |D_j| from every j ∈ Q_i (line 7) and computes Div(i, j) (Eq. 6);
2. if Div(i, j) ≤ th_I for all j (line 10): client-wise dropout, w_i ← w_j' of one random
   j' ∈ Q_i (lines 11-12);
3. otherwise (lines 14-22): g_i ← |D|-weighted mean over {i} ∪ Q_i, h_i ← |D|-weighted mean
   over {i} ∪ {j ∈ Q_i : Div(i, j) < th_I} (h stays personal when no neighbour is similar);
4. trains on CE + μ‖g_i(X_unit) − I^Aux_avg‖² (Eq. 12), with I^Aux_avg the mean of the stored
   I^Aux of i and Q_i (line 29), held constant (spec A8).

BatchNorm buffers travel with their block (A6); X_unit is forwarded in eval mode (A7).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import torch
from torch.func import functional_call

from fedpart.algorithms.base import State
from fedpart.algorithms.decentralized import Decentralized
from fedpart.config import option
from fedpart.engine import method_state as saved
from fedpart.engine.decentralized import keys_bytes
from fedpart.engine.functional import call_method, features
from fedpart.engine.mixing import weighted_average
from fedpart.engine.recipe import LossTerm, Phase, Recipe
from fedpart.errors import ConfigError
from fedpart.registry import register
from fedpart.seeding import numpy_rng
from fedpart.topology import Graph

EPS = 1e-12


def divergence_tensor(p: torch.Tensor, q: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """Eq. (6)-(7): Div = ½ KL(p‖q) + ½ KL(q‖p) (the paper's "Jensen-Shannon"), ε in the logs,
    as a float64 0-d tensor on the inputs' device."""
    p, q = p.double(), q.double()
    lp, lq = torch.log(p + eps), torch.log(q + eps)
    return 0.5 * (p * (lp - lq)).sum() + 0.5 * (q * (lq - lp)).sum()


def divergence(p: torch.Tensor, q: torch.Tensor, eps: float = EPS) -> float:
    """:func:`divergence_tensor` as a Python float."""
    return float(divergence_tensor(p, q, eps))


def client_dropout(divs: Sequence[float], threshold: float) -> bool:
    """Alg. 2 line 10: every neighbour within th_I (≤); never with an empty queue."""
    return len(divs) > 0 and all(d <= threshold for d in divs)


def similar(divs: Sequence[float], threshold: float) -> list[bool]:
    """Alg. 2 line 15: the neighbours whose classifier is shared (strict <)."""
    return [d < threshold for d in divs]


@dataclasses.dataclass
class Decision:
    """What client i did in the last ``communicate``: its queue, Div to each, and the outcome."""

    queue: list[int]
    divs: list[float]
    copied_from: int | None  # the j' of client-wise dropout, else None
    head_from: list[int]  # neighbours whose h was averaged in (empty under dropout)


def _quantile(values: Sequence[float], q: float) -> float | None:
    """The q-quantile of sorted ``values`` (linear interpolation; None when empty)."""
    if not values:
        return None
    pos = q * (len(values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(values) - 1)
    return float(values[lo] + (values[hi] - values[lo]) * (pos - lo))


@register
class UAPDFL(Decentralized):
    """Unit-representation divergence decides: copy one peer, share g and h, or share g only."""

    name = "uapdfl"
    needs_head_and_body = True
    backends = ("sequential",)  # its own local update and a per-client alignment target
    summary = (
        "UA-PDFL: unit-representation divergence picks per peer full copy / g+h / g only; "
        "aux. representation regulariser."
    )
    default_topology: ClassVar[dict[str, Any]] = {"name": "kpull", "neighbors": 5}
    mixing: ClassVar[str] = "size"
    mix_first: ClassVar[bool] = True
    checkpointed = (saved.Tensor("unit"), saved.Tensor("aux"))

    @dataclasses.dataclass
    class Options:
        threshold: float = option(
            0.03,
            "th_I, divergence threshold (not given by the paper; 0.03 separates "
            "Dir(0.5) from Dir(5) peers on Fashion-MNIST, see the docs)",
            ge=0,
        )
        mu: float = option(
            0.01, "μ of Eq. (12), weight of ‖g(X_unit) − I^Aux_avg‖² (not given)", ge=0
        )
        unit_value: float = option(1.0, "a_ij of Eq. (4): X_unit = a·ones (toy experiment: 1)")
        g_blocks: int = option(
            0,
            "leading blocks forming g (0: the model's body; vgg11: 7 = the paper's "
            "first 28 tensors)",
            ge=0,
        )
        dropout: bool = option(True, "client-wise dropout (false: the 'Without CD' ablation)")
        layerwise: bool = option(
            True,
            "layer-wise personalization (false: 'Without LP', h averaged over all "
            "of Q_i like g and no μ-term)",
        )

    # ------------------------------------------------------------------ setup
    def setup(self) -> None:
        model, ctx = self.ctx.model, self.ctx
        shape = tuple(ctx.data.bundle.input_shape)
        self.x_unit = torch.full((1, *shape), float(self.options.unit_value), device=ctx.device)
        names = model.block_names
        n_g = self.options.g_blocks or len(model.body_names())
        if n_g >= len(names):
            raise ConfigError(
                "algorithm.g_blocks", f"must leave h at least one of the blocks {names}, got {n_g}"
            )
        self.g_last = None if n_g == len(model.body_names()) else names[n_g - 1]
        body, head = set(names[:n_g]), set(names[n_g:])
        self.g_keys = [k for k in ctx.store.keys if model.block_of(k) in body]
        self.h_keys = [k for k in ctx.store.keys if model.block_of(k) in head]
        unit, aux = self.representations(ctx.store.client_state(0))  # Alg. 1 line 1, from w^0
        m = ctx.data.num_clients
        self.unit = unit.repeat(m, 1)  # I_i, [M, classes]
        self.aux = aux.repeat(m, 1)  # I_i^Aux, [M, feature_dim]
        self.targets: dict[int, torch.Tensor] = {}  # I^Aux_avg of the current round
        self.decisions: dict[int, Decision] = {}

    @property
    def aux_term(self) -> bool:
        return self.options.layerwise and self.options.mu > 0

    @torch.no_grad()
    def representations(self, state: State) -> tuple[torch.Tensor, torch.Tensor]:
        """(I, I^Aux) = (softmax(h(g(X_unit))), g(X_unit)) by Eqs. (5) and (11), in eval mode."""
        model = self.ctx.model
        was = model.training
        model.eval()
        try:
            unit = torch.softmax(functional_call(model, state, (self.x_unit,)), dim=1)
            z = self.g_out(state)
        finally:
            model.train(was)
        return unit.detach(), z.detach()

    def g_out(self, state: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """g(X_unit), flattened (Eq. 11): the body's features, or the last g block's output."""
        model, state = self.ctx.model, dict(state)
        if self.g_last is None:
            return features(model, state, self.x_unit)
        return call_method(model, "block_outputs", state, self.x_unit)[self.g_last].flatten(1)

    # ------------------------------------------------------------ Algorithm 2
    def communicate(self, rnd: int, graph: Graph) -> None:
        opts, exchange = self.options, self.ctx.exchange
        states, sizes = self.states(), self.client_sizes()  # round-(r−1) snapshot
        scalars = 1  # |D_j|, then I_j if a rule reads it, I_j^Aux if Eq. (12) does
        scalars += self.unit.shape[1] if opts.dropout or opts.layerwise else 0
        scalars += self.aux.shape[1] if self.aux_term else 0
        rep_bytes = self.unit.element_size() * scalars
        full_bytes = keys_bytes(states[0], list(states[0]))
        g_bytes, h_bytes = keys_bytes(states[0], self.g_keys), keys_bytes(states[0], self.h_keys)
        new_states = []
        queues = [graph.in_neighbors(i) for i in range(len(states))]  # Q_i (line 6)
        # line 9, Eq. (6): every client's divergences to its queue, read from the device at once
        pairs = [
            divergence_tensor(self.unit[i], self.unit[j]) for i, q in enumerate(queues) for j in q
        ]
        read = iter(torch.stack(pairs).tolist() if pairs else [])
        for i in range(len(states)):
            queue = queues[i]
            for j in queue:  # line 7: I_j, I_j^Aux, |D_j|
                exchange.send(j, i, rep_bytes)
            divs = [next(read) for _ in queue]
            members = [i, *queue]
            self.targets[i] = self.aux[members].mean(0)  # line 29 (stale, detached)
            if opts.dropout and client_dropout(divs, opts.threshold):  # lines 10-12
                rng = numpy_rng(self.ctx.cfg.seed, "algorithm", rnd, i)
                pick = queue[int(rng.integers(len(queue)))]
                exchange.send(pick, i, full_bytes)
                new_states.append(dict(states[pick]))
                self.decisions[i] = Decision(queue, divs, pick, [])
                continue
            share = similar(divs, opts.threshold) if opts.layerwise else [True] * len(queue)
            head_from = [j for j, s in zip(queue, share, strict=True) if s]
            new = dict(states[i])
            if queue:  # line 20: g over self and every neighbour
                new.update(self._average(states, sizes, members, self.g_keys))
            if head_from:  # line 21: h over self and the similar neighbours
                new.update(self._average(states, sizes, [i, *head_from], self.h_keys))
            for j in queue:  # lines 16 and 18
                exchange.send(j, i, g_bytes + (h_bytes if j in head_from else 0))
            new_states.append(new)
            self.decisions[i] = Decision(queue, divs, None, head_from)
        self.set_states(new_states)

    def round_metrics(self) -> dict[str, Any]:
        """How many clients copied a neighbour (client-wise dropout) and, among the others, the
        mean number of neighbours whose classifier was shared (Div < th_I)."""
        made = list(self.decisions.values())
        if not made:
            return {}
        kept = [d for d in made if d.copied_from is None]
        divs = sorted(v for d in made for v in d.divs)
        return {
            "dropout_clients": sum(d.copied_from is not None for d in made),
            "similar_neighbors_mean": (
                sum(len(d.head_from) for d in kept) / len(kept) if kept else None
            ),
            # the round's Div(i, j) over every client i and j in Q_i: 10th, 50th, 90th percentile
            **{f"div_p{q}": _quantile(divs, q / 100) for q in (10, 50, 90)},
        }

    @staticmethod
    def _average(
        states: Sequence[Mapping[str, torch.Tensor]],
        sizes: Sequence[int],
        members: Sequence[int],
        keys: Sequence[str],
    ) -> dict[str, torch.Tensor]:
        """Σ_u |D_u| w_u / Σ_u |D_u| over ``members`` (Alg. 2 lines 20-21)."""
        return weighted_average([states[u] for u in members], [sizes[u] for u in members], keys)

    def recipe(self, rnd: int, client: int) -> Recipe:
        """Eq. (12): CE + μ‖g(X_unit) − I^Aux_avg‖² (lines 30-33); the term reaches g only."""
        if not self.aux_term:
            return Recipe()
        model = self.ctx.model
        target = self.targets[client].detach()

        def aux_gap(params: Mapping[str, torch.Tensor]) -> torch.Tensor:
            was = model.training
            model.eval()  # BN on X_unit uses running statistics and leaves them untouched (A7)
            try:
                z = self.g_out(params)[0]
            finally:
                model.train(was)
            return ((z - target) ** 2).sum()

        return Recipe(phases=(Phase(loss_terms=(LossTerm("aux", aux_gap, self.options.mu),)),))

    def local_update(self, rnd: int, client: int) -> Any:
        """Local training (line 23), then I_i and I_i^Aux from the new model (lines 24-25)."""
        result = super().local_update(rnd, client)
        unit, aux = self.representations(result.state)
        self.unit[client], self.aux[client] = unit[0], aux[0]
        return result
