"""Evaluation: per-sample correctness and loss of a model state on pool indices."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call

from fedpart.engine.data import FederatedData
from fedpart.engine.evaluation_pass import Outcomes, evaluate_one_pass
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


# ------------------------------------------------------------------ a run's evaluation
def host_sums(outcomes: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> list[tuple[float, float]]:
    """Per outcome (correct, loss): the number correct and the sum of the losses, read back to
    the host at once (the sums are those of ``float(ok.sum())``, ``float(losses.sum())``)."""
    if isinstance(outcomes, Outcomes):
        return outcomes.sums()
    if not outcomes:
        return []
    counts = torch.stack([ok.sum() for ok, _ in outcomes]).double()
    losses = torch.stack([loss.sum() for _, loss in outcomes]).double()  # exact conversions
    return [(float(c), float(v)) for c, v in torch.stack([counts, losses], 1).tolist()]


def evaluated(outcomes: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> list[int]:
    """Per outcome, the number of samples evaluated (0 for a client left unevaluated, e.g. a
    Flower node that did not answer)."""
    if isinstance(outcomes, Outcomes):
        return list(outcomes.layout.sizes)
    return [int(ok.numel()) for ok, _ in outcomes]


def evaluate_states(
    sim: Any,
    clients: list[int],
    states: list[dict[str, torch.Tensor]],
    index: list[torch.Tensor],
    backend: Any,
) -> Sequence[tuple[torch.Tensor, torch.Tensor]]:
    """Per-sample (correct, loss) of ``states[i]`` on the samples ``index[i]``, each with the
    model of client ``clients[i]``: clients are grouped by that model (a capacity-aware
    method's widths), so the ordinary case is one call sharing body passes across clients,
    computed where ``backend`` says (``feature_map``: the process backend's workers; a backend
    whose ``layout`` gives one, the batched one: every client in one pass, :mod:`evaluation_pass`)."""
    bs = sim.cfg.engine.eval_batch_size
    models = [sim.algorithm.model_for(c) for c in clients]
    same_model = all(m is sim.model for m in models)
    full = same_model and index and all(i.numel() for i in index)
    layout = backend.layout(index) if full else None
    if layout is not None:
        one_pass = evaluate_one_pass(sim.model, states, index, sim.data, bs, layout)
        if one_pass is not None:
            return one_pass
    if same_model:
        feature_map = backend.feature_map()
        return evaluate_clients(sim.model, states, index, sim.data, bs, feature_map=feature_map)
    out: list[Any] = [None] * len(clients)
    groups: dict[int, list[int]] = {}
    for i, m in enumerate(models):
        groups.setdefault(id(m), []).append(i)
    for members in groups.values():
        outcomes = evaluate_clients(
            models[members[0]],
            [states[i] for i in members],
            [index[i] for i in members],
            sim.data,
            bs,
        )
        for i, outcome in zip(members, outcomes, strict=True):
            out[i] = outcome
    return out


def evaluate_participants(
    sim: Any, clients: list[int], states: list[dict[str, torch.Tensor]]
) -> float | None:
    """Sample-weighted accuracy of ``states[i]`` on client ``clients[i]``'s evaluation split
    (FL-bench's per-round metric: Σ correct / Σ samples over the round's participants)."""
    split = sim.cfg.evaluation.split
    index = [getattr(sim.data.clients[c], split) for c in clients]
    outcomes = sim.evaluate_states(clients, states, index)
    total = sum(evaluated(outcomes))
    return float(sum(c for c, _ in host_sums(outcomes)) / total) if total else None


def evaluate_run(sim: Any) -> dict[str, Any]:
    """Personalised accuracy (each client's model on its own split) and the global accuracy;
    sets ``sim.client_accuracy``."""
    split = sim.cfg.evaluation.split
    bs = sim.cfg.engine.eval_batch_size
    n = sim.data.num_clients
    correct = np.zeros(n)
    total = np.zeros(n)
    loss = np.zeros(n)
    states = [sim.algorithm.eval_state(c) for c in range(n)]
    index = [getattr(sim.data.clients[c], split) for c in range(n)]
    outcomes = sim.evaluate_states(list(range(n)), states, index)
    # per client (correct, loss sum) read back to the host in one transfer
    sums = host_sums(outcomes)
    for c, n in enumerate(evaluated(outcomes)):
        correct[c], loss[c] = sums[c]
        total[c] = n
    has = total > 0
    acc = np.where(has, correct / np.maximum(total, 1), np.nan)
    sim.client_accuracy = [float(a) if not math.isnan(a) else None for a in acc]
    row: dict[str, Any] = {
        "accuracy": float(np.nanmean(acc)) if has.any() else None,
        "accuracy_weighted": float(correct.sum() / total.sum()) if total.sum() else None,
        "loss": float(loss.sum() / total.sum()) if total.sum() else None,
    }
    if sim.algorithm.has_global_model and sim.data.global_test is not None:
        ok, losses = evaluate_samples(
            sim.model, sim.store.global_state, sim.data, sim.data.global_test, bs
        )
        accuracy, mean_loss = torch.stack([ok.float().mean(), losses.mean()]).tolist()
        row["global_accuracy"] = accuracy
        row["global_loss"] = mean_loss
    return row
