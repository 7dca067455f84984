"""Dis-PFL (Dai, Shen, He, Tian, Tao, ICML 2022): personalised sparse masks, decentralized sparse
training.

Every client ``k`` keeps a binary mask ``m_k`` over the prunable weights (the weights of conv and
linear layers; biases, normalisation parameters and buffers are dense) and a model ``w_k`` that
is zero off its mask. The paper's Algorithm 1, step by step (the section comments below follow
these numbers):

0. initialise: ``m_k`` random, different per client, at the ERK layer densities (Evci et al.,
   2020) of the overall density ``dense_ratio``; ``w_k = w_0 ⊙ m_k`` from one common ``w_0``.

Then every round ``t``, for every client ``k`` (aggregation first, as Algorithm 1):

1. receive the sparse models ``w_j`` of the in-neighbours ``N_k^t`` (``topology.neighbors``
   random peers, redrawn every round) and average every coordinate over the clients that hold
   it, keeping only the own mask's coordinates::

       w̃_k = m_k ⊙ Σ_{j ∈ N_k^t ∪ {k}} a_kj (m̂_j ⊙ w_j) ⊘ Σ_{j ∈ N_k^t ∪ {k}} a_kj m̂_j

   (``m̂_j``: the mask ``w_j`` was trained under; ``a_kj``: the mixing weights, uniform by
   default, i.e. the official code's plain count of holders; ``0/0 := 0``; dense tensors get the
   plain average ``Σ a_kj w_j / Σ a_kj``);
2. train locally with the mask fixed, ``w ← w − η (∇F_k(w) ⊙ m_k)`` for
   ``federation.local_epochs`` epochs (momentum and weight decay included; masked weights stay
   exactly zero);
3. search the next mask: per layer, drop the ``⌈α_t n⌉`` of its ``n`` active weights with the
   smallest ``|w|`` and activate as many inactive coordinates with the largest ``|∇F_k(w)|``
   (one batch, dense gradient), ``α_t = α/2 · (1 + cos(π t / T))`` (``anneal_factor`` α); the
   number of active weights never changes;
4. keep ``w_k`` (support ``m̂_k = m_k^t``) to send in round ``t + 1`` and ``m_k^{t+1}`` for
   round ``t + 1``'s aggregation and training.

Evaluation uses the model after local training (``w_k`` on ``m_k^t``), the accuracy the official
code reports. A message carries the values on the sender's support plus, by default, its mask as
a bitmap. Every choice where the paper is silent: ``docs/methods/dispfl.md``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import torch
from torch import nn
from torch.func import functional_call

from fedpart.algorithms.base import State
from fedpart.algorithms.decentralized import Decentralized
from fedpart.config import fraction, option
from fedpart.engine import method_state as saved
from fedpart.engine.recipe import Recipe, bind, cross_entropy, recipe_function
from fedpart.engine.training import TrainResult, batch_slices
from fedpart.registry import register
from fedpart.seeding import torch_generator
from fedpart.topology import Graph

#: sub-streams of the ``(seed, "algorithm", ...)`` seeds
_INIT_STREAM = 0
_REGROW_STREAM = 1
#: the ``phase`` key of the batch that screens gradients (local training is phase 0)
_SCREEN_PHASE = 1


# ----------------------------------------------------------------------------- sparsity helpers
def prunable_keys(model: nn.Module) -> list[str]:
    """The weights of conv and linear layers, in state-dict order (everything else is dense)."""
    keys = {
        f"{name}.weight"
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear | nn.modules.conv._ConvNd)
    }
    return [k for k in model.state_dict() if k in keys]


def erk_densities(
    shapes: Mapping[str, Sequence[int]], density: float, power_scale: float = 1.0
) -> dict[str, float]:
    """Erdős–Rényi-Kernel layer densities with overall density ``density`` (Evci et al., 2020).

    Layer ``l`` of shape ``(n_1, …, n_d)`` gets ``ε · ((Σ n_i) / (Π n_i))^power_scale``; a layer
    whose density would exceed 1 is made dense (the layers with the largest raw score first) and
    ``ε`` is solved again so that the active weights total ``density · Σ_l numel_l``.
    """
    dense: set[str] = set()
    while True:
        rhs = 0.0
        divisor = 0.0
        raw: dict[str, float] = {}
        for key, shape in shapes.items():
            n = math.prod(shape)
            if key in dense:
                rhs -= n * (1.0 - density)
            else:
                rhs += n * density
                raw[key] = (sum(shape) / n) ** power_scale
                divisor += raw[key] * n
        if not raw:
            return {key: 1.0 for key in shapes}
        eps = rhs / divisor
        top = max(raw.values())
        if top * eps > 1.0:
            dense.update(key for key, r in raw.items() if r == top)
            continue
        return {key: 1.0 if key in dense else eps * raw[key] for key in shapes}


def drop_fraction(anneal_factor: float, rnd: int, total_rounds: int) -> float:
    """The cosine-annealed fraction of active weights swapped in round ``rnd``:
    ``α_t = α/2 · (1 + cos(π t / T))``."""
    return anneal_factor / 2.0 * (1.0 + math.cos(math.pi * rnd / max(total_rounds, 1)))


def next_mask(
    mask: torch.Tensor,
    weight: torch.Tensor,
    fraction: float,
    score: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    active: int | None = None,
) -> torch.Tensor:
    """One layer's mask search: drop the ``⌈fraction · n⌉`` of the ``n`` active weights with the
    smallest ``|weight|``, then activate as many inactive coordinates (the just-dropped ones
    included) with the largest ``|score|`` or, without a score, uniformly at random. The number of
    active weights is unchanged. Ties go to the lower index. ``active``: ``n`` when known (else
    counted, which on a GPU reads the device)."""
    flat = mask.flatten()
    n_swap = math.ceil(fraction * (int(flat.sum()) if active is None else active))
    if n_swap == 0:
        return mask.clone()
    magnitude = torch.where(flat, weight.detach().flatten().abs(), math.inf)
    dropped = torch.sort(magnitude, stable=True).indices[:n_swap]
    new = flat.clone()
    new[dropped] = False
    if score is not None:
        grow_score = torch.where(new, -math.inf, score.detach().flatten().abs())
        grown = torch.sort(grow_score, descending=True, stable=True).indices[:n_swap]
    else:
        candidates = torch.nonzero(~new).flatten()
        pick = torch.randperm(len(candidates), generator=generator)[:n_swap]
        grown = candidates[pick.to(candidates.device)]
    new[grown] = True
    return new.view_as(mask)


# ------------------------------------------------------------------------------------- method
@recipe_function
def masked_loss(
    model: nn.Module,
    state: State,
    x: torch.Tensor,
    y: torch.Tensor,
    mask: dict[str, torch.Tensor],
) -> torch.Tensor:
    """The task loss of the sparse model ``w ⊙ m``."""
    sparse = {**state, **{k: state[k] * m for k, m in mask.items()}}
    return cross_entropy(functional_call(model, sparse, (x,)), y)


@register
class DisPFL(Decentralized):
    """Personal sparse masks; sparse models averaged over their holders; prune and regrow."""

    name = "dispfl"
    summary = (
        "Personal sparse masks (ERK): neighbours' sparse models averaged per coordinate over "
        "holders, masked training, magnitude prune / gradient regrow."
    )
    default_topology: ClassVar[dict[str, Any]] = {"name": "kpull", "neighbors": 10}
    mixing: ClassVar[str] = "uniform"
    mix_first: ClassVar[bool] = True
    checkpointed = (
        saved.Stacked("masks", key="mask", dtype=torch.bool),
        saved.Stacked("support", dtype=torch.bool),
    )
    backends = ("sequential",)  # its own local update (mask search) and a per-client mask

    @dataclasses.dataclass
    class Options:
        dense_ratio: float = option(
            0.5,
            "overall density of every client's mask (the paper's main setting: 0.5)",
            gt=0,
            le=1,
        )
        anneal_factor: float = fraction(
            0.5,
            "α: fraction of active weights swapped in round 0, cosine-annealed "
            "(the official default 0.5; 0 keeps the masks fixed)",
        )
        regrow: str = option(
            "gradient",
            "gradient (the paper: largest |gradient| on one batch) or random "
            "(the official scripts' --dis_gradient_check)",
            choices=("gradient", "random"),
        )
        distribution: str = option(
            "erk",
            "layer densities: erk (the paper) or uniform (every layer dense_ratio)",
            choices=("erk", "uniform"),
        )
        erk_power_scale: float = option(
            1.0, "exponent of the ERK score (the official default 1)", ge=0
        )
        anneal_rounds: int = option(
            0, "T of the cosine schedule (0: federation.rounds, as the official code)", ge=0
        )
        mask_bitmap: bool = option(
            True,
            "count the sender's mask (1 bit per prunable coordinate) on top of "
            "the values (false: values only, as the official count of nonzeros)",
        )

    # ------------------------------------------------------------ step 0: initial masks
    def setup(self) -> None:
        """ERK densities, a random mask per client at those densities, ``w_k = w_0 ⊙ m_k``."""
        store = self.ctx.store
        opts = self.options
        self.prunable = prunable_keys(self.ctx.model)
        init = store.global_state
        shapes = {k: tuple(init[k].shape) for k in self.prunable}
        if opts.distribution == "erk":
            self.densities = erk_densities(shapes, opts.dense_ratio, opts.erk_power_scale)
        else:
            self.densities = {k: opts.dense_ratio for k in shapes}
        #: active weights per layer (constant for the whole run)
        self.active = {k: round(d * init[k].numel()) for k, d in self.densities.items()}
        m = self.ctx.data.num_clients
        #: m_k: the mask of client k's next aggregation and training
        self.masks: list[dict[str, torch.Tensor]] = [self._initial_mask(c) for c in range(m)]
        #: m̂_k: the mask client k's current model was trained under (its support)
        self.support: list[dict[str, torch.Tensor]] = list(self.masks)
        for c in range(m):
            store.set_personal(c, {**init, **{k: init[k] * self.masks[c][k] for k in shapes}})

    def _initial_mask(self, client: int) -> dict[str, torch.Tensor]:
        gen = torch_generator(self.ctx.cfg.seed, "algorithm", _INIT_STREAM, client)
        out = {}
        for key in self.prunable:
            ref = self.ctx.store.global_state[key]
            flat = torch.zeros(ref.numel(), dtype=torch.bool)
            flat[torch.randperm(ref.numel(), generator=gen)[: self.active[key]]] = True
            out[key] = flat.view(ref.shape).to(ref.device)
        return out

    # ------------------------------------------------------- step 1: receive and aggregate
    def message_bytes(self, state: State, client: int) -> int:
        """What ``client`` sends: its support's values, its mask as a bitmap (``mask_bitmap``)
        and its dense tensors whole."""
        total = 0
        for key in self.shared_keys():
            t = state[key]
            if key in self.support[client]:
                # a support is an earlier mask: it holds the layer's constant active count
                total += self.active[key] * t.element_size()
                if self.options.mask_bitmap:
                    total += math.ceil(t.numel() / 8)
            else:
                total += t.numel() * t.element_size()
        return total

    def communicate(self, rnd: int, graph: Graph) -> None:
        """Every client pulls its in-neighbours' sparse models and averages each coordinate over
        the clients holding it, on its own mask (synchronous: from a snapshot)."""
        states = self.states()
        weights = self.mixing_weights(graph)
        sizes = [self.message_bytes(states[j], j) for j in range(len(states))]
        mixed = []
        for k in range(len(states)):
            senders = [k, *graph.in_neighbors(k)]
            for j in senders[1:]:
                self.ctx.exchange.send(j, k, sizes[j])
            mixed.append(self.aggregate_sparse(k, senders, weights[k, senders], states))
        self.set_states(mixed)

    def aggregate_sparse(
        self, client: int, senders: list[int], weights: torch.Tensor, states: list[State]
    ) -> State:
        """``m_k ⊙ Σ_j a_j (m̂_j ⊙ w_j) ⊘ Σ_j a_j m̂_j`` on the prunable weights (0 where nobody
        holds a coordinate), ``Σ_j a_j w_j / Σ_j a_j`` on the dense tensors."""
        out = dict(states[client])
        # the weights (host values) onto the states' device once per client, not per key
        device = next(iter(states[client].values())).device
        on_device = weights.to(device)
        shares = (weights / weights.sum()).to(device)
        for key in self.shared_keys():
            stacked = torch.stack([states[j][key] for j in senders])
            if not stacked.is_floating_point():
                a = shares.reshape(-1, *([1] * (stacked.dim() - 1)))
                out[key] = (a * stacked.double()).sum(0).round().to(stacked.dtype)
                continue
            a = on_device.to(stacked.dtype)
            a = a.reshape(-1, *([1] * (stacked.dim() - 1)))
            if key in self.masks[client]:
                held = torch.stack([self.support[j][key] for j in senders]).to(stacked.dtype)
                num = (a * held * stacked).sum(0)
                den = (a * held).sum(0)
                avg = num / torch.where(den > 0, den, torch.ones_like(den))
                out[key] = avg * self.masks[client][key]
            else:
                out[key] = (a * stacked).sum(0) / a.sum()
        return out

    # ----------------------------------------------------------------- step 2: sparse SGD
    def recipe(self, rnd: int, client: int) -> Recipe:
        """Local SGD on ``w ⊙ m_k``: the gradient of every masked weight is exactly zero, so
        ``w ← w − η (∇F_k(w) ⊙ m_k)`` (momentum and weight decay keep masked weights at 0)."""
        return Recipe(objective=bind(masked_loss, mask=self.masks[client]))

    def local_update(self, rnd: int, client: int) -> TrainResult:
        """Masked local training (step 2), then the mask search for the next round (step 3)."""
        result = self.train_job(self.job(rnd, client))
        mask = self.masks[client]
        for key, m in mask.items():
            result.state[key] = result.state[key] * m
        self.support[client] = mask
        fraction = drop_fraction(self.options.anneal_factor, rnd, self.schedule_rounds())
        if fraction > 0 and self.ctx.data.clients[client].num_train > 0:
            self.masks[client] = self.search_mask(rnd, client, result, fraction)
        return result

    # ------------------------------------------------------------------ step 3: next masks
    def schedule_rounds(self) -> int:
        """T of the cosine schedule."""
        return self.options.anneal_rounds or self.ctx.cfg.federation.rounds

    def search_mask(
        self, rnd: int, client: int, result: TrainResult, fraction: float
    ) -> dict[str, torch.Tensor]:
        """Magnitude pruning and gradient (or random) regrowth of ``⌈α_t n_l⌉`` weights per layer."""
        mask = self.masks[client]
        if self.options.regrow == "gradient":
            grads = self.screen_gradients(rnd, client, result)
            return {
                k: next_mask(m, result.state[k], fraction, grads[k], active=self.active[k])
                for k, m in mask.items()
            }
        gen = torch_generator(self.ctx.cfg.seed, "algorithm", _REGROW_STREAM, rnd, client)
        return {
            k: next_mask(m, result.state[k], fraction, None, gen, self.active[k])
            for k, m in mask.items()
        }

    def screen_gradients(
        self, rnd: int, client: int, result: TrainResult
    ) -> dict[str, torch.Tensor]:
        """The dense gradient of the trained sparse model on one training batch (model in eval
        mode, as the official code); counted as one step of compute."""
        ctx = self.ctx
        settings = ctx.train_settings(rnd, client)
        train_idx = ctx.data.clients[client].train
        order = torch_generator(settings.seed, "batches", rnd, client, _SCREEN_PHASE, 0)
        augment = torch_generator(settings.seed, "augment", rnd, client, _SCREEN_PHASE, 0)
        positions = batch_slices(
            int(train_idx.numel()), settings.batch_size, settings.drop_last, order, train_idx.device
        )[0]
        x, y = ctx.data.batch(train_idx[positions], train=True, generator=augment)
        state = result.state
        params = {k: state[k].detach().requires_grad_(True) for k in self.prunable}
        model = ctx.model
        was_training = model.training
        model.eval()
        try:
            loss = cross_entropy(functional_call(model, {**state, **params}, (x,)), y)
            grads = torch.autograd.grad(loss, [params[k] for k in self.prunable])
        finally:
            model.train(was_training)
        result.phases.append((tuple(self.prunable), 1, len(y)))
        return dict(zip(self.prunable, grads, strict=True))
