"""One step of many clients at once, the pieces of :mod:`fedpart.engine.batched`'s loop (a
phase's batches come from :class:`~fedpart.engine.batch_plan.BatchPlan`): the
``vmap(grad(loss))`` of a phase
(:func:`make_step`, and :func:`grouped_step` for ragged steps of a loss without sample
weights), and the SGD update on the stacked parameters (:func:`sgd_update`). The module
docstring of :mod:`fedpart.engine.batched` says why each is as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.func import functional_call, grad, vmap

from fedpart.engine import dropout
from fedpart.engine.batch_plan import BatchPlan
from fedpart.engine.data import FederatedData
from fedpart.engine.recipe import Recipe, cross_entropy, with_tensors
from fedpart.engine.training import TrainSettings
from fedpart.models import BlockModel

__all__ = [
    "grouped_step",
    "make_step",
    "sgd_update",
]

#: use the fused SGD kernel of ``torch.optim.SGD(fused=True)`` (else ``_foreach`` ops)
_FUSED_SGD = hasattr(torch, "_fused_sgd_")

State = dict[str, Tensor]


def make_step(
    model: BlockModel,
    recipe: Recipe,
    phase_no: int,
    key_order: list[str],
    weighted: bool,
    slot_dims: tuple[int | None, ...] = (),
) -> Callable[..., tuple[State, Tensor]]:
    """``vmap(grad(loss))`` of phase ``phase_no``: ``(train, other, x, y, slots, noise[, w]) ->
    (grads, losses)``; ``noise`` feeds the model's dropout calls (:mod:`fedpart.engine.dropout`;
    ``()`` for a model without). ``slots`` fill the recipe's tensor slots
    (:func:`~fedpart.engine.recipe.with_tensors`; ``slot_dims[j]`` 0 where slot ``j`` is stacked
    per client, ``None`` where all clients share it); with no slots the recipe is used as it
    is."""

    def loss_fn(
        train: State,
        other: State,
        x: Tensor,
        y: Tensor,
        slots: tuple[Tensor, ...],
        noise: tuple[Tensor, ...],
        w: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        r = with_tensors(recipe, list(slots)) if slot_dims else recipe
        current = {k: train[k] if k in train else other[k] for k in key_order}
        with dropout.feeding(noise):
            if r.objective is not None:
                loss = r.objective(model, current, x, y)
            elif w is not None:
                logits = functional_call(model, current, (x,))
                per_sample = F.cross_entropy(logits, y, reduction="none")
                loss = (per_sample * w).sum() / w.sum().clamp_min(1)  # 0 for an all-padding row
            else:
                loss = r.criterion(functional_call(model, current, (x,)), y)
        for term in r.phases[phase_no].loss_terms:
            loss = loss + term.weight * term.fn(current)
        return loss, loss.detach()

    in_dims: tuple[Any, ...] = (0, 0, 0, 0, tuple(slot_dims), 0) + ((0,) if weighted else ())
    return vmap(grad(loss_fn, has_aux=True), in_dims=in_dims)


def select_slots(
    slots: tuple[Tensor, ...], slot_dims: tuple[int | None, ...], idx: Tensor | slice
) -> tuple[Tensor, ...]:
    """The per-client slots of the clients ``idx`` (shared slots as they are)."""
    if isinstance(idx, slice):
        return tuple(s if d is None else s[idx] for s, d in zip(slots, slot_dims, strict=True))
    return tuple(
        s if d is None else s.index_select(0, idx) for s, d in zip(slots, slot_dims, strict=True)
    )


def grouped_step(
    step: Callable[..., tuple[State, Tensor]],
    train: State,
    other: State,
    drawn: list[tuple[Tensor, Tensor]],
    lengths: list[int],
    slots: tuple[Tensor, ...] = (),
    slot_dims: tuple[int | None, ...] = (),
    noise: tuple[Tensor, ...] = (),
) -> tuple[State, Tensor]:
    """One step of a loss without sample weights on batches of unequal lengths: one
    ``vmap(grad)`` per batch length, the results scattered back into stacked tensors
    (``noise``: the dropout noise of every client, ``[clients, L, ...]``)."""
    groups: dict[int, list[int]] = {}
    for i, n in enumerate(lengths):
        groups.setdefault(n, []).append(i)
    grads = {k: torch.empty_like(v) for k, v in train.items()}
    losses: Tensor | None = None
    for n, members in groups.items():
        idx = torch.tensor(members, device=next(iter(train.values())).device)
        x = torch.stack([drawn[i][0] for i in members])
        y = torch.stack([drawn[i][1] for i in members])
        g, part = step(
            {k: v.index_select(0, idx) for k, v in train.items()},
            {k: v.index_select(0, idx) for k, v in other.items()},
            x,
            y,
            select_slots(slots, slot_dims, idx),
            tuple(v.index_select(0, idx)[:, :n] for v in noise),
        )
        for k, v in g.items():
            grads[k].index_copy_(0, idx, v)
        if losses is None:
            losses = part.new_empty(len(lengths))
        losses.index_copy_(0, idx, part)
    assert losses is not None
    return grads, losses


def sgd_update(
    params: list[Tensor],
    grads: list[Tensor],
    bufs: list[Tensor],
    t: int,
    lr: float,
    wd: float,
    momentum: float,
    scale: Tensor | None = None,
) -> None:
    """The SGD step of ``train_client`` on the stacked (prefix views of) parameters, in place.

    ``params`` are views ``[k, ...]`` of the stacked parameters of the clients still training
    and ``grads`` their fresh gradients (may be overwritten); ``bufs`` holds the full stacked
    momentum buffers (made here when empty; :mod:`fedpart.engine.captured` passes its own), set
    to ``d`` on the phase's first step ``t=0`` (when every client of the
    group trains). One fused kernel (``torch._fused_sgd_``, the kernel of
    ``torch.optim.SGD(fused=True)``) where available, else in-place ``_foreach`` ops: large
    stacked temporaries would cost more (allocation, cache misses) than the arithmetic itself.
    """
    grads = [g if g.is_contiguous() else g.contiguous() for g in grads]
    if scale is not None:  # per-client learning-rate factors: feed s·(g + wd·p), no decay
        if wd:
            torch._foreach_add_(grads, params, alpha=wd)
        for g in grads:
            g.mul_(scale.reshape(-1, *([1] * (g.dim() - 1))))
        wd = 0.0
    if momentum and not bufs:  # the phase's first step: new buffers (or the caller's own)
        bufs[:] = [torch.empty_like(p) for p in params]
    view = [b[: params[0].shape[0]] for b in bufs] if momentum else []
    if _FUSED_SGD and params[0].device.type in ("cpu", "cuda"):
        torch._fused_sgd_(
            params,
            grads,
            view,
            weight_decay=wd,
            momentum=momentum,
            lr=lr,
            dampening=0.0,
            nesterov=False,
            maximize=False,
            is_first_step=t == 0,
        )
        return
    d = grads
    if wd:
        torch._foreach_add_(d, params, alpha=wd)  # d = g + wd·p
    if momentum:
        if t == 0:
            torch._foreach_copy_(view, d)  # b = d (the first-step rule)
        else:
            torch._foreach_mul_(view, momentum)
            torch._foreach_add_(view, d)  # b = momentum·b + d
        d = view
    torch._foreach_add_(params, d, alpha=-lr)  # p = p − lr·d


def eager_phase(
    model: BlockModel,
    recipe: Recipe,
    phase_no: int,
    key_order: list[str],
    keys: list[str],
    stacked: State,
    slots: tuple[Tensor, ...],
    slot_dims: tuple[int | None, ...],
    data: FederatedData,
    clients: list[int],
    rnd: int,
    epochs: int,
    totals: list[int],
    lr: float,
    scale: Tensor | None,
    settings: TrainSettings,
    step_losses: list[tuple[Tensor, list[int]]],
) -> None:
    """One phase of a group's clients (sorted by steps, longest first), step by step on the
    prefix of clients still training (:mod:`fedpart.engine.batched`'s text): each step's
    losses appended to ``step_losses``, the stacked tensors updated in place."""
    device = next(iter(stacked.values())).device
    wd, momentum = settings.weight_decay, settings.momentum
    default_ce = recipe.objective is None and recipe.criterion is cross_entropy
    plain_step = make_step(model, recipe, phase_no, key_order, False, slot_dims)
    weighted_step = make_step(model, recipe, phase_no, key_order, True, slot_dims)
    others = [k for k in key_order if k not in set(keys)]
    plan = BatchPlan(data, clients, rnd, phase_no, epochs, settings)
    drops = PhaseDraws(model, clients, rnd, phase_no, settings, device)
    bufs: list[Tensor] = []
    active = len(clients)
    for t in range(totals[0]):
        while totals[active - 1] <= t:
            active -= 1
        batch = plan.gather(t, active, device)
        lengths = batch.lengths
        train = {k: stacked[k][:active] for k in keys}
        other = {k: stacked[k][:active] for k in others}
        live = select_slots(slots, slot_dims, slice(0, active))
        noise = drops.step(stacked, batch.x, active)
        if batch.w is None:
            grads, losses = plain_step(train, other, batch.x, batch.y, live, noise)
        elif default_ce:
            grads, losses = weighted_step(train, other, batch.x, batch.y, live, noise, batch.w)
        else:  # a loss without sample weights: the batches unpadded, grouped by length
            drawn = [(batch.x[i, :m], batch.y[i, :m]) for i, m in enumerate(lengths)]
            grads, losses = grouped_step(
                plain_step, train, other, drawn, lengths, live, slot_dims, noise
            )
        step_losses.append((losses, lengths))
        sgd_update(
            [train[k] for k in keys],
            [grads[k] for k in keys],
            bufs,
            t,
            lr,
            wd,
            momentum,
            None if scale is None else scale[:active],
        )


class PhaseDraws:
    """The dropout noise of a group's clients in one phase, step by step: each client's uniforms
    from its own stream (:func:`fedpart.engine.dropout.stream`), as the sequential trainer draws
    them; ``()`` for a model without ``nn.Dropout``."""

    def __init__(
        self,
        model: BlockModel,
        clients: list[int],
        rnd: int,
        phase_no: int,
        settings: TrainSettings,
        device: torch.device,
    ) -> None:
        self.model, self.batch_size = model, settings.batch_size
        self.active = bool(dropout.modules(model))
        self.sites: dropout.Sites | None = None
        self.streams = (
            [dropout.stream(settings.seed, rnd, c, phase_no, device) for c in clients]
            if self.active
            else []
        )

    def step(self, stacked: State, x: Tensor, active: int) -> tuple[Tensor, ...]:
        """The noise of the first ``active`` clients for their batches ``x [active, L, ...]``
        (``stacked``: the group's tensors, the first client's probe the dropout calls)."""
        if not self.active:
            return ()
        if self.sites is None:
            self.sites = dropout.probe(self.model, {k: v[0] for k, v in stacked.items()}, x[0])
            if self.sites is None:
                self.active = False
                return ()
        u = torch.stack(
            [dropout.draw(g, self.batch_size, self.sites) for g in self.streams[:active]]
        )
        return tuple(dropout.noise(u[:, : x.shape[1]], self.sites, x.device, x.dtype))
