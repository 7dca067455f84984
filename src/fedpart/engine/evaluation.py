"""Evaluation: per-sample correctness and loss of a model state on pool indices."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.func import functional_call

from fedpart.engine.data import FederatedData
from fedpart.engine.functional import classify, features
from fedpart.models import BlockModel


@torch.no_grad()
def evaluate_samples(
    model: BlockModel,
    state: dict[str, torch.Tensor],
    data: FederatedData,
    index: torch.Tensor,
    batch_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample (correct, loss) of ``state`` on the pool samples ``index``."""
    model.eval()
    correct = torch.empty(index.numel(), dtype=torch.bool, device=index.device)
    losses = torch.empty(index.numel(), dtype=torch.float32, device=index.device)
    for start in range(0, index.numel(), batch_size):
        part = index[start : start + batch_size]
        x, y = data.batch(part)
        logits = functional_call(model, state, (x,))
        correct[start : start + len(part)] = logits.argmax(1) == y
        losses[start : start + len(part)] = F.cross_entropy(logits, y, reduction="none")
    return correct, losses


#: computes the body features of several batches: ``[(body state, [pool index per batch])]``
#: → per entry, the list of feature tensors of its batches (in order)
FeatureMap = Callable[
    [list[tuple[dict[str, torch.Tensor], list[torch.Tensor]]]], list[list[torch.Tensor]]
]


@torch.no_grad()
def body_features(
    model: BlockModel,
    body: dict[str, torch.Tensor],
    batches: list[torch.Tensor],
    data: FederatedData,
) -> list[torch.Tensor]:
    """The body's output for each batch of pool indices (evaluation mode)."""
    model.eval()
    return [features(model, body, data.batch(index)[0]) for index in batches]


@torch.no_grad()
def evaluate_clients(
    model: BlockModel,
    states: list[dict[str, torch.Tensor]],
    indices: list[torch.Tensor],
    data: FederatedData,
    batch_size: int,
    feature_map: FeatureMap | None = None,
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per-sample (correct, loss) of every client's model ``states[i]`` on its samples
    ``indices[i]``, computed with as little repeated work as is exact.

    Clients whose body tensors are the very same objects (a shared body: FedPer, FedRep,
    FedBABU, FedRoD, …) share one pass of the body over their concatenated samples; each head is
    then applied to its own clients' rows. Clients whose whole models are the same objects
    (FedAvg) share the head call too. Since ``forward = classify ∘ features`` and evaluation is
    per sample (eval mode), the result equals evaluating each client on its own.

    ``feature_map`` computes the body passes elsewhere (the process backend's workers): it gets
    exactly the batches computed here otherwise, so the results are the same bit for bit.
    """
    model.eval()
    head = set(model.head_names)
    body_keys = [k for k in states[0] if model.block_of(k) not in head] if states else []
    results: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * len(states)
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, state in enumerate(states):
        groups.setdefault(tuple(id(state[k]) for k in body_keys), []).append(i)
    plans = []
    for members in groups.values():
        index = torch.cat([indices[i] for i in members])
        batches = [index[s : s + batch_size] for s in range(0, index.numel(), batch_size)]
        plans.append((members, index, batches))
    work = [(states[members[0]], batches) for members, _, batches in plans]
    if feature_map is not None:
        computed = feature_map(work)
    else:
        computed = [body_features(model, body, batches, data) for body, batches in work]
    for (members, index, _), feats in zip(plans, computed, strict=True):
        if not feats:
            for i in members:
                empty = index.new_empty(0, dtype=torch.float32)
                results[i] = (empty.bool(), empty)
            continue
        sizes = [int(indices[i].numel()) for i in members]
        z, y = torch.cat(feats), data.y[index]
        offsets = [0]
        for n in sizes:
            offsets.append(offsets[-1] + n)
        heads: dict[tuple[int, ...], list[int]] = {}
        for pos, i in enumerate(members):
            heads.setdefault(tuple(id(v) for v in states[i].values()), []).append(pos)
        for positions in heads.values():
            rows = torch.cat(
                [torch.arange(offsets[p], offsets[p + 1], device=z.device) for p in positions]
            )
            logits = classify(model, states[members[positions[0]]], z[rows])
            ok = logits.argmax(1) == y[rows]
            loss = F.cross_entropy(logits, y[rows], reduction="none")
            start = 0
            for p in positions:
                n = sizes[p]
                results[members[p]] = (ok[start : start + n], loss[start : start + n])
                start += n
    return results  # type: ignore[return-value]
