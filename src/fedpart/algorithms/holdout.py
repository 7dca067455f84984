"""Parts of a client's training split: FedFomo's validation hold-out, FedAP's pre-training share.

The engine trains a client on its whole training split; a method that holds part of it out
draws the part here, from its own seeded stream, and trains on the rest with :func:`train_on`.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import torch

from fedpart.engine.evaluation import evaluate_samples
from fedpart.engine.recipe import Recipe
from fedpart.engine.training import TrainResult, train_client
from fedpart.seeding import torch_generator

if TYPE_CHECKING:
    from fedpart.engine.context import MethodContext

State = dict[str, torch.Tensor]


def split_train(
    ctx: MethodContext, client: int, fraction: float, stream: int, *keys: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(held, kept)``: ``⌊fraction · n⌋`` of ``client``'s training indices drawn at random
    and the others (both sorted), from the stream ``(seed, "algorithm", stream, client, *keys)``.
    ``⌊·⌋`` as FL-bench's ``int(ratio * len(trainset))``."""
    train = ctx.data.clients[client].train
    count = int(fraction * train.numel())
    order = torch.randperm(
        train.numel(), generator=torch_generator(ctx.cfg.seed, "algorithm", stream, client, *keys)
    ).to(train.device)
    held, kept = train[order[:count]], train[order[count:]]
    return held.sort().values, kept.sort().values


def train_on(
    ctx: MethodContext,
    rnd: int,
    client: int,
    start: State,
    index: torch.Tensor,
    recipe: Recipe | None = None,
) -> TrainResult:
    """``ctx.train`` on the pool samples ``index`` instead of the client's whole training split
    (same recipe, optimiser settings and batch seeds)."""
    clients = list(ctx.data.clients)
    clients[client] = dataclasses.replace(clients[client], train=index)
    algo = ctx.algorithm
    return train_client(
        ctx.model,
        start,
        recipe if recipe is not None else algo.recipe(rnd, client),
        ctx.data.with_clients(clients),
        client,
        rnd,
        ctx.train_settings(rnd, client),
        algo.frozen_blocks(rnd),
    )


def mean_loss(ctx: MethodContext, state: State, index: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of ``state`` (evaluation mode) on the pool samples ``index``: a
    float64 0-d tensor where the model is (0 for no samples), for the caller to read when it
    has all it needs (each read of a GPU waits for its queued kernels)."""
    _, losses = evaluate_samples(ctx.model, state, ctx.data, index, ctx.cfg.engine.eval_batch_size)
    return losses.double().mean() if losses.numel() else losses.new_zeros((), dtype=torch.float64)
