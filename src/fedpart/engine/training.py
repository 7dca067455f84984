"""Local training from a recipe: the sequential reference implementation.

The optimiser is plain SGD written out (``d = g + wd·p``; ``b = d`` on the first step, else
``b = momentum·b + d``; ``p ← p − lr·b``), identical to ``torch.optim.SGD`` without dampening
or Nesterov, so that a batched backend can reproduce it exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.func import functional_call

from fedpart.engine import dropout
from fedpart.engine.data import FederatedData
from fedpart.engine.functional import classify, features
from fedpart.engine.recipe import Recipe
from fedpart.errors import TrainingError
from fedpart.models import BlockModel
from fedpart.seeding import host_draws, model_draws, torch_generator

State = dict[str, torch.Tensor]


@dataclass(frozen=True)
class TrainSettings:
    """The round's optimiser settings (the learning rate already decayed for the round)."""

    lr: float
    momentum: float
    weight_decay: float
    batch_size: int
    local_epochs: int
    drop_last: bool
    seed: int
    #: head-only phases train on the body's features computed once per phase (see
    #: :func:`cacheable_features`); equal up to float rounding to per-batch body passes
    cache_features: bool = False
    #: samples per body pass when the features are cached
    feature_batch_size: int = 256
    #: clip each step's gradient to this global L2 norm (0: off; ``federation.max_grad_norm``)
    max_grad_norm: float = 0.0
    #: the batched backend replays each distinct step as a captured CUDA graph
    #: (``engine.cuda_graphs``, :mod:`fedpart.engine.step_graphs`)
    cuda_graphs: bool = False


@dataclass
class ClientJob:
    """One client's local work in one round, made by ``Algorithm.job`` before it trains: the
    state it starts from, its recipe, and scratch values a method keeps until the client's
    ``trained`` and ``upload`` hooks (which receive it with the result) — so that no hook has
    to leave per-client values on the method for a later one."""

    rnd: int
    client: int
    start: State
    recipe: Any
    scratch: dict[str, Any] = field(default_factory=dict)


@dataclass
class TrainResult:
    """What local training returns: the new state and the mean training loss."""

    state: State
    loss: float
    samples: int
    steps: int
    #: per phase actually run: (trained parameter keys, steps, samples) — for cost accounting
    phases: list[tuple[tuple[str, ...], int, int]] = field(default_factory=list)
    #: what the recipe's observer returned for each batch, in order (empty without one)
    observations: list[object] = field(default_factory=list)
    #: the job it was trained from (set in the driver; None for a method's own local update
    #: that trained without one)
    job: ClientJob | None = None
    #: steps whose gradient ``max_grad_norm`` clipped
    clipped: int = 0


def batch_slices(
    n: int,
    batch_size: int,
    drop_last: bool,
    generator: torch.Generator,
    device: torch.device | None = None,
    of: torch.Tensor | None = None,
) -> list[torch.Tensor]:
    """A shuffled epoch of batch positions ``0..n-1``; a client smaller than a batch takes one step.

    The permutation is drawn from the (host) ``generator``, so it is the same on every device,
    and moved to ``device`` once per epoch: the batches are slices of it there. With ``of`` (a
    tensor of ``n`` entries on ``device``, e.g. a client's pool indices) the batches are those
    entries instead, ``of[positions]`` for each batch's positions, read by one indexing per
    epoch."""
    with host_draws():
        perm = torch.randperm(n, generator=generator)
    if device is not None:
        perm = perm.to(device)
    if of is not None:
        perm = of[perm]
    if drop_last and n >= batch_size:
        n_batches = n // batch_size
    else:
        n_batches = math.ceil(n / batch_size)
    return [perm[b * batch_size : (b + 1) * batch_size] for b in range(n_batches)]


def trainable_keys(model: BlockModel, blocks: set[str]) -> list[str]:
    """The parameter keys of ``blocks`` (buffers are never trained)."""
    return [k for k, _ in model.named_parameters() if model.block_of(k) in blocks]


def cacheable_features(
    model: BlockModel, keys: list[str], recipe: Recipe, data: FederatedData
) -> bool:
    """Whether a phase training ``keys`` can train on cached body features, exactly.

    The phase must train head parameters only (the body is then fixed for the whole phase), with
    the plain task loss on ``model(x)`` (no custom objective), no augmentation (the inputs are the
    same every epoch), and a body that computes the same function in training mode whatever the
    batch (no buffers such as BatchNorm statistics, no dropout).
    """
    head = set(model.head_names)
    if recipe.objective is not None or recipe.observe is not None:
        return False
    if data.augment != "none" or not keys:
        return False
    if type(model).forward is not BlockModel.forward:  # forward = classify ∘ features
        return False
    if any(model.block_of(k) not in head for k in keys):
        return False
    for name in model.body_names():
        block = model.get_submodule(name)
        if any(True for _ in block.buffers()):
            return False
        if any(isinstance(m, torch.nn.modules.dropout._DropoutNd) for m in block.modules()):
            return False
    return True


def _keeper(seen: dict[str, torch.Tensor], name: str):  # noqa: ANN202 - a forward hook
    def keep(_module: object, _inputs: object, output: torch.Tensor) -> None:
        seen[name] = output.detach()

    return keep


def train_client(
    model: BlockModel,
    start: State,
    recipe: Recipe,
    data: FederatedData,
    client: int,
    rnd: int,
    settings: TrainSettings,
    frozen: set[str] = frozenset(),
) -> TrainResult:
    """Train one client from ``start`` (which is not modified) following ``recipe``; what the
    model draws at random (dropout) comes from the client's own seed (``seeding.model_draws``)."""
    with model_draws(settings.seed, rnd, client, data.clients[client].train.device):
        state = {k: v.detach().clone() for k, v in start.items()}
        train_idx = data.clients[client].train
        n = int(train_idx.numel())
        model.train()
        # summed on the model's device and read once at the end: a per-step float(loss) would
        # synchronise a GPU at every step (float64, so the sum is the host's float sum)
        loss_sum = torch.zeros((), dtype=torch.float64, device=train_idx.device)
        clipped = torch.zeros((), dtype=torch.long, device=train_idx.device)
        samples = 0
        steps = 0
        phase_log: list[tuple[tuple[str, ...], int, int]] = []
        observations: list[object] = []
        seen: dict[str, torch.Tensor] = {}
        hooks = []
        if recipe.observe is not None:
            for name in recipe.observe.blocks:
                hooks.append(model.get_submodule(name).register_forward_hook(_keeper(seen, name)))
        drops = dropout.ClientDraws(model, settings.seed, rnd, client, settings.batch_size)
        try:
            all_blocks = set(model.block_names)
            for phase_no, phase in enumerate(recipe.phases):
                blocks = (all_blocks if phase.blocks is None else set(phase.blocks)) - set(frozen)
                keys = trainable_keys(model, blocks)
                epochs = settings.local_epochs if phase.epochs is None else phase.epochs
                if not keys or epochs <= 0 or n == 0:
                    continue
                lr = settings.lr * phase.lr_scale
                drops.phase(phase_no, train_idx.device)
                momentum_buf: dict[str, torch.Tensor] = {}
                phase_steps, phase_samples = steps, samples
                cached: torch.Tensor | None = None
                if settings.cache_features and cacheable_features(model, keys, recipe, data):
                    fb = settings.feature_batch_size
                    with torch.no_grad():
                        cached = torch.cat(
                            [
                                features(
                                    model, state, data.batch(train_idx[i : i + fb], train=True)[0]
                                )
                                for i in range(0, n, fb)
                            ]
                        )
                for epoch in range(epochs):
                    order = torch_generator(settings.seed, "batches", rnd, client, phase_no, epoch)
                    augment = torch_generator(
                        settings.seed, "augment", rnd, client, phase_no, epoch
                    )
                    slices = batch_slices(
                        n, settings.batch_size, settings.drop_last, order, train_idx.device
                    )
                    for positions in slices:
                        params = {k: state[k].detach().requires_grad_(True) for k in keys}
                        current = {**state, **params}
                        if cached is not None:
                            y = data.y[train_idx[positions]]
                            loss = recipe.criterion(classify(model, current, cached[positions]), y)
                        else:
                            x, y = data.batch(train_idx[positions], train=True, generator=augment)
                            with drops.step(current, x):
                                if recipe.objective is not None:
                                    loss = recipe.objective(model, current, x, y)
                                else:
                                    out = functional_call(model, current, (x,))
                                    loss = recipe.criterion(out, y)
                            if recipe.observe is not None:
                                observations.append(recipe.observe.fn(x, y, dict(seen)))
                        for term in phase.loss_terms:
                            loss = loss + term.weight * term.fn(current)
                        grads = torch.autograd.grad(loss, [params[k] for k in keys])
                        if settings.max_grad_norm:
                            grads, over = clip_gradient(grads, settings.max_grad_norm)
                            clipped += over
                        sgd_step(state, keys, grads, momentum_buf, settings, lr)
                        loss_sum += loss.detach().double() * len(y)
                        samples += len(y)
                        steps += 1
                phase_log.append((tuple(keys), steps - phase_steps, samples - phase_samples))
        finally:
            drops.close()
            for hook in hooks:
                hook.remove()
        mean_loss = float(loss_sum) / samples if samples else 0.0
        if not math.isfinite(mean_loss):
            raise TrainingError(
                f"training diverged: non-finite loss at round {rnd} on client {client}; "
                "lower federation.lr (or raise the method's regularisation) and resume from the last checkpoint"
            )
        # the clipped-step count is read back only where steps are clipped (one host read less)
        clipped_steps = int(clipped) if settings.max_grad_norm else 0
        return TrainResult(
            state, mean_loss, samples, steps, phase_log, observations, clipped=clipped_steps
        )


def sgd_step(
    state: State,
    keys: list[str],
    grads: tuple[torch.Tensor, ...],
    momentum_buf: dict[str, torch.Tensor],
    settings: TrainSettings,
    lr: float,
) -> None:
    """The SGD update of ``keys`` in ``state``, in place: ``d = g + wd·p``; ``b = d`` on a phase's
    first step, else ``b = momentum·b + d`` (``momentum_buf``); ``p ← p − lr·d`` with ``lr·d``
    rounded first (the rounding of ``p - lr * d``). Without momentum the directions are this
    step's own tensors, scaled in place (no temporary the size of the model)."""
    with torch.no_grad():
        directions = []
        for k, g in zip(keys, grads, strict=True):
            d = g + settings.weight_decay * state[k] if settings.weight_decay else g
            if settings.momentum:
                buf = momentum_buf.get(k)
                d = d.clone() if buf is None else buf.mul_(settings.momentum).add_(d)
                momentum_buf[k] = d
            directions.append(d)
        params = [state[k] for k in keys]
        if settings.momentum or not _own(directions):
            torch._foreach_sub_(params, torch._foreach_mul(directions, lr))
        else:
            torch._foreach_mul_(directions, lr)
            torch._foreach_sub_(params, directions)


def _own(tensors: list[torch.Tensor]) -> bool:
    """Whether each tensor is the only view of its own storage, laid out densely without
    overlap (contiguous, or permuted like the transposed gradient of every ``Linear`` weight):
    then scaling it in place changes nothing else and computes the same elementwise products."""
    seen = set()
    for t in tensors:
        storage = t.untyped_storage()
        if t.storage_offset() != 0 or storage.nbytes() != t.numel() * t.element_size():
            return False
        if not _dense(t):
            return False
        seen.add(storage.data_ptr())
    return len(seen) == len(tensors)


def _dense(t: torch.Tensor) -> bool:
    """Whether ``t``'s elements fill ``numel`` consecutive places, each once (in any order of
    its dimensions): its strides, smallest first, are the running products of its sizes."""
    expected = 1
    for stride, size in sorted(
        (st, n) for n, st in zip(t.shape, t.stride(), strict=True) if n != 1
    ):
        if stride != expected:
            return False
        expected *= size
    return True


def clip_gradient(
    grads: tuple[torch.Tensor, ...], max_norm: float
) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
    """``grads`` scaled to global L2 norm ``max_norm`` when their norm exceeds it (the scale of
    ``torch.nn.utils.clip_grad_norm_``, ``max_norm / (norm + 1e-6)``), else unchanged bit for bit
    (multiplied by exactly 1); and whether they were clipped, as a tensor (no host sync)."""
    with torch.no_grad():
        norm = torch.linalg.vector_norm(
            torch.stack([torch.linalg.vector_norm(g.detach()) for g in grads])
        )
        over = norm > max_norm
        scale = torch.where(over, max_norm / (norm + 1e-6), torch.ones_like(norm))
        return tuple(g * scale for g in grads), over.long()
