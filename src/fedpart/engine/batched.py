"""Batched local training: many clients trained as one ``torch.func`` computation.

:func:`train_clients_batched` gives the same results as calling the sequential reference
:func:`fedpart.engine.training.train_client` once per client, up to floating-point rounding
(a batched matrix product or grouped convolution sums in another order than the per-client
one, and the fused update below may use fused multiply-adds): about 1e-7 apart on the small
models. Every client's tensors are stacked along a new leading dimension ``[n_clients, ...]``;
one step of all clients is ``vmap(grad(loss))`` over ``functional_call(model, ...)``, followed
by the SGD update of :mod:`fedpart.engine.training` (``d = g + wd·p``; ``b = d`` on a phase's
first step, else ``b = momentum·b + d``; ``p ← p − lr·lr_scale·b``) applied in place to the
stacked tensors by one fused kernel (``torch._fused_sgd_``, that of
``torch.optim.SGD(fused=True)``) or, where it is missing, by in-place ``torch._foreach`` ops.
No Python loop over parameters or clients runs inside a step except to draw and stack the
clients' batches.

Design choices
--------------
* **Same batches.** Each client draws its batches exactly as the sequential code does: per
  phase and epoch the generators ``torch_generator(seed, "batches"|"augment", rnd, client,
  phase, epoch)`` and the positions of :func:`~fedpart.engine.training.batch_slices`
  (:class:`~fedpart.engine.batch_plan.BatchPlan`: one permutation per client and epoch, then
  one index tensor for the phase and one read of the pool per step for all clients; with
  augmentation one ``data.batch(..., generator=augment)`` per client and step, in the client's
  step order, so augmentation draws match).
* **Ragged clients by masking.** Clients have different numbers of steps (different dataset
  sizes) and a smaller last batch per epoch. Each client's steps of a phase are numbered
  ``0..T_c-1`` across its epochs and all clients run step ``t`` together.

  - *Clients without step* ``t`` are masked out of the update entirely: their parameters and
    momentum buffers are not touched. The mask is implemented at no cost by ordering the clients
    by their number of steps per epoch (longest first): the clients still training at step
    ``t`` are then always a prefix ``[:k_t]`` of the stacked tensors, and the step computes and
    updates only that prefix (in place, on views).
  - *Smaller batches* are padded to the longest batch of the step with zero inputs and a
    per-sample weight (1 real, 0 padding); the default task loss
    (:func:`~fedpart.engine.recipe.cross_entropy`) is then the weighted mean of the per-sample
    cross-entropies over the real samples, whose gradient equals the sequential mean-loss
    gradient. When all batches of a step have the same length (the usual case) nothing is
    padded and ``recipe.criterion`` is called as in the sequential code.
  - A custom ``recipe.criterion`` or a ``recipe.objective`` cannot take sample weights: on a
    step whose batches differ in length the clients are *grouped by batch length* and each
    group runs its own ``vmap(grad(...))`` on its unpadded batches (the gradients are scattered
    back into the step's stacked gradients). So custom criteria and objectives are supported
    exactly; they only cost one extra call per distinct batch length on ragged steps.
* **Loss terms and objectives run inside** ``vmap``: ``LossTerm.fn`` and ``recipe.objective``
  receive one client's dict of tensors, so they must be written with torch operations only (as
  :class:`~fedpart.engine.recipe.LossTerm` already requires) and must not call ``.item()`` or
  branch on tensor values.
* **Loss logging** is the sequential one: per real step ``loss_sum += loss · len(y)``
  (in float64, in step order; the losses read back to the host once per round), the mean over the client's samples, and a
  :class:`~fedpart.errors.TrainingError` for the first client (in the given order) whose mean
  loss is not finite.
* ``chunk`` bounds memory: clients are trained in groups of at most ``chunk`` (after the
  longest-first ordering, so a group holds clients of similar sizes).

Dropout (``nn.Dropout``) trains batched: every client's masks come from its own stream, drawn
by the engine on every backend and passed into ``vmap`` (:mod:`fedpart.engine.dropout`).

What cannot be batched (see :func:`can_batch`): models with buffers (BatchNorm running
statistics — their functional update under ``vmap`` would change semantics) or with another
dropout module (``Dropout2d``, ``AlphaDropout``, …: their draws come from the global
generator, which a ``vmap`` cannot give each client its own of), and groups whose
recipes are not one object or equal (same phases, the same loss-term functions, the same
criterion and objective).

This module holds the eligibility check and the loop over a group's steps; one step's pieces
(drawing and gathering batches, the ``vmap(grad)`` of a phase, the SGD update) are in
:mod:`fedpart.engine.batched_step`.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from fedpart.engine import captured, dropout
from fedpart.engine.batch_plan import samples_per_epoch, steps_per_epoch
from fedpart.engine.batched_step import eager_phase
from fedpart.engine.data import FederatedData
from fedpart.engine.recipe import Recipe, skeleton, tensor_slots
from fedpart.engine.training import TrainResult, TrainSettings, trainable_keys
from fedpart.errors import TrainingError
from fedpart.models import BlockModel

__all__ = ["can_batch", "train_clients_batched"]

State = dict[str, Tensor]


# --------------------------------------------------------------------------------- eligibility
def can_batch(model: nn.Module, recipes: list[Recipe]) -> str | None:
    """Whether clients with these recipes can be trained together by :func:`train_clients_batched`.

    Returns ``None`` when they can, otherwise a one-line reason (for a log message) why the
    group must be trained sequentially: the model has buffers (e.g. BatchNorm running
    statistics) or a dropout module other than ``nn.Dropout``, or the recipes are not all the
    same object or equal.
    """
    buffers = [k for k, _ in model.named_buffers()]
    if buffers:
        shown = ", ".join(buffers[:3]) + (", ..." if len(buffers) > 3 else "")
        return (
            f"model {type(model).__name__} has buffers ({shown}), e.g. BatchNorm running "
            "statistics, which batched functional training would not update as the sequential "
            "backend does"
        )
    unbatchable = dropout.unbatchable(model)
    if unbatchable:
        return unbatchable
    if any(r.observe is not None for r in recipes):
        return "the recipe observes block outputs, which only the sequential trainer reports"
    if recipes:
        first = recipes[0]
        for i, other in enumerate(recipes[1:], start=1):
            if other is first:
                continue
            try:
                same = bool(other == first)
            except Exception:  # noqa: BLE001 - an uncomparable field means "not equal"
                same = False
            if not same:
                return (
                    f"recipe {i} differs from recipe 0: clients are batched only when their "
                    "recipes are the same object or equal (same phases, loss-term functions, "
                    "criterion and objective)"
                )
    return None


# --------------------------------------------------------------------------------- training
def train_clients_batched(
    model: BlockModel,
    starts: list[State],
    recipe: Recipe,
    data: FederatedData,
    clients: list[int],
    rnd: int,
    settings: TrainSettings,
    frozen: set[str] = frozenset(),
    chunk: int | None = None,
    lr_scales: list[list[float]] | None = None,
    slot_values: list[list[Tensor]] | None = None,
) -> list[TrainResult]:
    """Train ``clients[i]`` from ``starts[i]`` (not modified) following ``recipe``, all at once.

    ``slot_values[i]``, when given, are the tensors bound in client ``i``'s own recipe
    (:func:`~fedpart.engine.recipe.tensor_slots`), whose :func:`~fedpart.engine.recipe.skeleton`
    ``recipe`` is: clients whose recipes differ only in those values (FedRoD's class counts)
    train together, each with its own (a tensor every client holds as the same object is
    shared, not stacked).

    ``lr_scales[i][p]``, when given, multiplies the learning rate of client ``i`` in phase ``p``
    (on top of the phase's ``lr_scale``): clients whose recipes differ only in their phases'
    learning rates (push-sum's ``1/μ_i``) train together. The SGD step then feeds the kernel
    ``s·(g + wd·p)`` with no weight decay, which is the same update: ``b' = s·b``,
    ``p ← p − lr·b'``.

    The result equals ``[train_client(model, starts[i], recipe, data, clients[i], rnd,
    settings, frozen) for i ...]`` up to floating-point rounding: the same states, mean losses,
    sample and step counts and phase logs; a client whose mean loss is not finite raises the
    same :class:`~fedpart.errors.TrainingError`. ``chunk`` trains at most that many clients at
    a time to bound memory. Raises ``ValueError`` when :func:`can_batch` refuses the model.
    """
    if len(starts) != len(clients):
        raise ValueError(f"{len(starts)} start states for {len(clients)} clients")
    if chunk is not None and chunk < 1:
        raise ValueError(f"chunk must be >= 1 or None, got {chunk}")
    if lr_scales is not None and (
        len(lr_scales) != len(clients) or any(len(s) != len(recipe.phases) for s in lr_scales)
    ):
        raise ValueError("lr_scales needs one factor per phase for every client")
    if slot_values is not None and len(slot_values) != len(clients):
        raise ValueError("slot_values needs the recipe tensors of every client")
    reason = can_batch(model, [recipe])
    if reason is not None:
        raise ValueError(f"cannot train batched: {reason}")
    model.train()

    bs, drop_last = settings.batch_size, settings.drop_last
    sizes = [data.clients[c].num_train for c in clients]
    results: list[TrainResult | None] = [None] * len(clients)
    for i, n in enumerate(sizes):
        if n == 0:  # train_client skips every phase: the start state, no loss
            results[i] = TrainResult(
                {k: v.detach().clone() for k, v in starts[i].items()}, 0.0, 0, 0
            )
    # longest first (stable): the clients still training at any step are a prefix
    order = sorted(
        (i for i, n in enumerate(sizes) if n > 0),
        key=lambda i: -steps_per_epoch(sizes[i], bs, drop_last),
    )
    size = chunk or max(len(order), 1)
    # vmap cannot query memory formats: the batched computation runs in the contiguous layout
    with model.conv_layout(channels_last=False), dropout.explicit(model):
        for lo in range(0, len(order), size):
            group = order[lo : lo + size]
            trained = _train_group(
                model,
                [starts[i] for i in group],
                recipe,
                data,
                [clients[i] for i in group],
                rnd,
                settings,
                frozen,
                None if lr_scales is None else [lr_scales[i] for i in group],
                None if slot_values is None else [slot_values[i] for i in group],
            )
            for i, res in zip(group, trained, strict=True):
                results[i] = res

    out: list[TrainResult] = []
    for i, res in enumerate(results):
        assert res is not None
        if not math.isfinite(res.loss):
            raise TrainingError(
                f"training diverged: non-finite loss at round {rnd} on client {clients[i]}; "
                "lower federation.lr (or raise the method's regularisation) and resume from "
                "the last checkpoint"
            )
        out.append(res)
    return out


def _train_group(
    model: BlockModel,
    starts: list[State],
    recipe: Recipe,
    data: FederatedData,
    clients: list[int],
    rnd: int,
    settings: TrainSettings,
    frozen: set[str],
    lr_scales: list[list[float]] | None = None,
    slot_values: list[list[Tensor]] | None = None,
) -> list[TrainResult]:
    """Train clients (all with data, sorted by steps per epoch, longest first) together."""
    key_order = list(starts[0])
    for i, s in enumerate(starts[1:], start=1):
        if list(s) != key_order:
            raise ValueError(f"start state {i} has other keys than start state 0")
    device = next(iter(starts[0].values())).device if starts[0] else torch.device("cpu")
    n_clients = len(clients)
    program = None
    if settings.cuda_graphs and captured.capturable(recipe) and not dropout.modules(model):
        if slot_values is None and tensor_slots(recipe):  # its tensors as slots, not baked in
            slot_values = [tensor_slots(recipe)] * n_clients
            recipe = skeleton(recipe)
        slots, slot_dims = _stack_slots(slot_values, device)
        program = captured.program_for(
            model, recipe, starts, settings, frozen, lr_scales is not None, slots, slot_dims
        )
        program.load(starts, slots)
        stacked = {k: v[:n_clients] for k, v in program.stacked.items()}
    else:
        slots, slot_dims = _stack_slots(slot_values, device)
        with torch.no_grad():  # detached, as the starts' values (no operator per client)
            stacked = {k: torch.stack([s[k] for s in starts]) for k in key_order}
    bs, drop_last = settings.batch_size, settings.drop_last
    sizes = [data.clients[c].num_train for c in clients]
    per_epoch = [steps_per_epoch(n, bs, drop_last) for n in sizes]

    step_losses: list[tuple[Tensor, list[int]]] = []  # per step: losses [k], batch lengths
    logs: list[list[tuple[tuple[str, ...], int, int]]] = [[] for _ in clients]
    all_blocks = set(model.block_names)
    for phase_no, phase in enumerate(recipe.phases):
        blocks = (all_blocks if phase.blocks is None else set(phase.blocks)) - set(frozen)
        keys = trainable_keys(model, blocks)
        epochs = settings.local_epochs if phase.epochs is None else phase.epochs
        if not keys or epochs <= 0:
            continue
        missing = [k for k in keys if k not in stacked]
        if missing:
            raise KeyError(f"start states lack trained parameters {missing}")
        lr = settings.lr * phase.lr_scale
        scale = None
        if lr_scales is not None:
            scale = torch.tensor(
                [f[phase_no] for f in lr_scales], dtype=torch.float32, device=device
            )
        totals = [epochs * s for s in per_epoch]  # non-increasing
        if program is not None:
            if scale is not None:
                program.scale[:n_clients].copy_(scale)
            captured.train_phase(
                program,
                data,
                clients,
                rnd,
                phase_no,
                keys,
                epochs,
                totals,
                lr,
                settings,
                step_losses,
            )
        else:
            eager_phase(
                model,
                recipe,
                phase_no,
                key_order,
                keys,
                stacked,
                slots,
                slot_dims,
                data,
                clients,
                rnd,
                epochs,
                totals,
                lr,
                scale,
                settings,
                step_losses,
            )
        for i in range(n_clients):
            samples = epochs * samples_per_epoch(sizes[i], bs, drop_last)
            logs[i].append((tuple(keys), totals[i], samples))

    loss_sum = [0.0] * n_clients
    samples = [0] * n_clients
    steps = [0] * n_clients
    # every step's losses read back to the host at once (one synchronisation, not one per step)
    flat = torch.cat([losses for losses, _ in step_losses]).tolist() if step_losses else []
    at = 0
    for _, lengths in step_losses:
        values, at = flat[at : at + len(lengths)], at + len(lengths)
        for i, (value, n) in enumerate(zip(values, lengths, strict=True)):
            loss_sum[i] += value * n
            samples[i] += n
            steps[i] += 1
    results = []
    # each client's tensors as views (one operator per key), then copied into their own storage
    # each client's tensors are rows of the group's stacked tensors (one operator per key, not
    # one per client and key): the eager loop's own, a copy of a captured program's buffers
    rows = {k: (v if program is None else v.clone()).unbind(0) for k, v in stacked.items()}
    for i in range(n_clients):
        state = {k: v[i] for k, v in rows.items()}
        mean = loss_sum[i] / samples[i] if samples[i] else 0.0
        results.append(TrainResult(state, mean, samples[i], steps[i], logs[i]))
    return results


def _stack_slots(
    slot_values: list[list[Tensor]] | None, device: torch.device
) -> tuple[tuple[Tensor, ...], tuple[int | None, ...]]:
    """Per slot of the recipe: the one tensor every client holds (``None``: shared), or the
    clients' tensors stacked along a new first dimension (``0``)."""
    if not slot_values:
        return (), ()
    slots: list[Tensor] = []
    dims: list[int | None] = []
    for values in zip(*slot_values, strict=True):
        if all(v is values[0] for v in values):
            slots.append(values[0].to(device))
            dims.append(None)
        else:
            slots.append(torch.stack([v.detach() for v in values]).to(device))
            dims.append(0)
    return tuple(slots), tuple(dims)
