"""The rounds: a server's round (sampling, failures and stragglers, training, upload,
aggregation), a decentralized round (training and mixing along the round's graph), and the
training of a round's clients with its accounting.

Each function takes the :class:`~fedpart.engine.simulation.Simulation` and calls the hooks
that a subclass or a caller may replace through it (``sim.train_clients``,
``sim.evaluate_participants``, ``sim.failed_clients``): Flower's server replaces training and
evaluation by its nodes' and keeps these rounds.
"""

from __future__ import annotations

from typing import Any

import torch

from fedpart.config import Config
from fedpart.engine.backends import Backend
from fedpart.engine.cost import MacCounter
from fedpart.engine.decentralized import Exchange
from fedpart.engine.mixing import tensor_bytes
from fedpart.engine.training import TrainResult, TrainSettings
from fedpart.errors import TrainingError
from fedpart.models import BlockModel
from fedpart.seeding import numpy_rng

State = dict[str, torch.Tensor]
#: a straggler's upload and its weight, applied in the next round
Late = dict[int, tuple[State, float]]


def sample_clients(seed: int, rnd: int, num_clients: int, join_ratio: float) -> list[int]:
    """The round's participants, from a stream keyed by (seed, round): the same for every method."""
    m = max(1, int(round(join_ratio * num_clients)))
    if m >= num_clients:
        return list(range(num_clients))
    chosen = numpy_rng(seed, "sample_clients", rnd).choice(num_clients, size=m, replace=False)
    return sorted(int(c) for c in chosen)


def failed_clients(cfg: Config, rnd: int, participants: list[int], num_clients: int) -> set[int]:
    """The participants of round ``rnd`` that fail to return in time
    (``federation.client_failure``, ``client_failure_schedule``).

    Client c fails when u[c] < ``client_failure``, u drawn for all clients from a stream
    keyed by (seed, round): the same clients fail for every method and on resume.
    """
    f = cfg.federation
    failed = {c for r, c in f.client_failure_schedule if r == rnd and c in participants}
    if f.client_failure > 0:
        u = numpy_rng(cfg.seed, "client_failure", rnd).random(num_clients)
        failed.update(c for c in participants if u[c] < f.client_failure)
    return failed


def local_epochs(cfg: Config, num_clients: int, client: int | None) -> int:
    """``federation.local_epochs``, or the client's group's under ``local_epochs_groups``."""
    f = cfg.federation
    if client is None or not f.local_epochs_groups:
        return f.local_epochs
    groups = f.local_epochs_groups
    return groups[client * len(groups) // num_clients]


def train_settings(cfg: Config, num_clients: int, rnd: int, client: int | None) -> TrainSettings:
    """The optimiser settings of ``client``'s local training in round ``rnd``."""
    f = cfg.federation
    return TrainSettings(
        lr=f.lr * f.lr_decay**rnd,
        momentum=f.momentum,
        weight_decay=f.weight_decay,
        batch_size=f.batch_size,
        local_epochs=local_epochs(cfg, num_clients, client),
        drop_last=f.drop_last,
        seed=cfg.seed,
        cache_features=cfg.engine.cache_features,
        max_grad_norm=f.max_grad_norm,
        feature_batch_size=cfg.engine.eval_batch_size,
        cuda_graphs=cfg.engine.cuda_graphs,
    )


def server_round(sim: Any, rnd: int) -> dict[str, Any]:
    """One server round: sample, send, (evaluate the received models,) train the clients that
    did not fail, upload, apply last round's stragglers, aggregate."""
    algo = sim.algorithm
    cfg = sim.cfg
    participants = sample_clients(cfg.seed, rnd, sim.data.num_clients, cfg.federation.join_ratio)
    algo.begin_round(rnd)
    down_keys = algo.download_keys(rnd)
    # a capacity-aware method sends each participant the slice of its width
    down = sum(algo.download_bytes(rnd, c, down_keys) for c in participants)
    protocol = cfg.evaluation.participants
    evaluated: dict[str, Any] = {}
    if protocol in ("before", "both"):
        states = [algo.received_state(rnd, c) for c in participants]
        evaluated["participants_accuracy_before"] = sim.evaluate_participants(participants, states)
    failed = sim.failed_clients(rnd, participants)
    straggle = cfg.federation.client_failure_mode == "straggle"
    training = participants if straggle else [c for c in participants if c not in failed]
    results, stats = sim.train_clients(rnd, training)
    if protocol in ("after", "both"):
        evaluated["participants_accuracy_after"] = sim.evaluate_participants(
            list(results), [r.state for r in results.values()]
        )
    uploads: dict[int, State] = {}
    weights: dict[int, float] = {}
    up_bytes = 0
    late, sim.late = sim.late, {}
    for client, result in results.items():
        sent = algo.upload(rnd, client, result.state, result.job)
        up_bytes += tensor_bytes(sent)  # counted in the round it is sent, arrived or not
        weight = float(sim.data.clients[client].num_train)
        if client in failed:  # a straggler's update arrives next round
            sim.late[client] = (sent, weight)
            continue
        uploads[client] = sent
        weights[client] = weight
    applied = apply_late(late, uploads, weights)
    if uploads:  # a round where nobody returned keeps the model
        algo.aggregate(rnd, uploads, weights)
    row = {
        **stats,
        **evaluated,
        "participants": len(participants),
        "up_bytes": int(up_bytes),
        "down_bytes": int(down),
    }
    f = cfg.federation
    if f.client_failure or f.client_failure_schedule:
        row["failed"] = len(failed)
        if straggle:
            row["late_applied"] = applied
    return row


def apply_late(late: Late, uploads: dict[int, State], weights: dict[int, float]) -> int:
    """Add last round's late updates to this round's: a client's fresh update replaces its
    stale one, and a stale one carrying other keys than this round's (a method whose shared
    blocks changed) is dropped. Returns how many were applied."""
    keys = set(next(iter(uploads.values()))) if uploads else None
    applied = 0
    for client in sorted(late):
        sent, weight = late[client]
        if client in uploads or (keys is not None and set(sent) != keys):
            continue
        keys = set(sent) if keys is None else keys
        uploads[client] = sent
        weights[client] = weight
        applied += 1
    return applied


def decentralized_round(sim: Any, rnd: int) -> dict[str, Any]:
    """Every client trains; the method's ``communicate`` mixes along the round's graph
    (before training when the method's algorithm box aggregates first)."""
    assert sim.topology is not None
    algo = sim.algorithm
    algo.begin_round(rnd)
    graph = sim.topology.graph(rnd)
    sim.exchange = Exchange(sim.data.num_clients)
    if algo.mix_first:
        algo.communicate(rnd, graph)
    clients = list(range(sim.data.num_clients))
    results, stats = sim.train_clients(rnd, clients)
    if not algo.mix_first:
        # under on_nonfinite=skip_client a discarded client keeps its previous model and
        # takes no part in this round's exchange (a method that mixes first has already sent)
        algo.communicate(rnd, graph.isolated([c for c in clients if c not in results]))
    return {**stats, **sim.exchange.row()}


def _all_finite(state: State) -> bool:
    """Whether every floating-point tensor of ``state`` is free of NaN and infinity (one read
    back to the host)."""
    checks = [torch.isfinite(v).all() for v in state.values() if v.is_floating_point()]
    return bool(torch.stack(checks).all()) if checks else True


def _numel(model: torch.nn.Module) -> dict[str, int]:
    """Parameter key → number of elements."""
    return {k: p.numel() for k, p in model.named_parameters()}


def train_clients(
    sim: Any, rnd: int, clients: list[int], backend: Backend
) -> tuple[dict[int, TrainResult], dict[str, Any]]:
    """Every listed client's local update, its personal tensors kept in the store, and the
    round's training accounting.

    ``backend`` trains the clients it can first (:mod:`fedpart.engine.backends`); every other
    client runs the method's ``local_update`` in the driver, in client order. Under
    ``federation.on_nonfinite=skip_client`` a client whose training fails is left out.
    """
    algo = sim.algorithm
    skip = sim.cfg.federation.on_nonfinite == "skip_client"
    skipped = 0
    try:
        ahead = backend.train(rnd, clients)
    except TrainingError:
        if not skip:
            raise
        # train this round's clients one by one to find the one(s) to skip
        ahead = {}
    results: dict[int, TrainResult] = {}
    loss_sum = 0.0
    samples = 0
    proxy = 0
    macs = 0.0
    trainable = 0
    full_numel = _numel(sim.model)
    for client in clients:
        try:
            result = ahead.get(client) or algo.local_update(rnd, client)
        except TrainingError:
            if not skip:
                raise
            skipped += 1
            continue
        if skip and not _all_finite(result.state):
            skipped += 1  # a finite loss can still end in an overflowed last step
            continue
        model = algo.model_for(client)
        # a capacity-aware method's client trains the model of its width
        numel = full_numel if model is sim.model else _numel(model)
        trained: set[str] = set()
        for keys, steps, phase_samples in result.phases:
            trained.update(keys)
            proxy += sum(numel[k] for k in keys) * steps
            macs += sim.mac_counter(model).per_sample(result.state, keys) * phase_samples
        trainable = max(trainable, sum(numel[k] for k in trained))
        sim.store.set_personal(client, result.state)
        algo.trained(rnd, client, result)
        results[client] = result
        loss_sum += result.loss * result.samples
        samples += result.samples
    stats = {
        "participants": len(clients),
        "train_loss": loss_sum / samples if samples else None,
        "trainable_params": int(trainable),
        "compute_proxy": int(proxy),
        "train_macs": int(macs),
    }
    if skip:
        stats["skipped_nonfinite"] = skipped
    if sim.cfg.federation.max_grad_norm:
        stats["clipped_steps"] = sum(r.clipped for r in results.values())
    return results, stats


class MacCounters:
    """The multiply-add counters of the run's model and of clients' narrow ones, made once."""

    def __init__(self, model: BlockModel, input_shape: tuple[int, ...], num_classes: int) -> None:
        self.model = model
        self.shape = input_shape
        self.num_classes = num_classes
        self.main = MacCounter(model, input_shape, num_classes)
        self.others: dict[int, MacCounter] = {}

    def __call__(self, model: BlockModel) -> MacCounter:
        if model is self.model:
            return self.main
        counter = self.others.get(id(model))
        if counter is None:
            counter = self.others[id(model)] = MacCounter(model, self.shape, self.num_classes)
        return counter
