"""The baselines of ``fedpart bench``: a federated loop as today's FL libraries write it, and a
centralized training loop as the ceiling of what one process can do on the same samples.

:class:`NaiveFederation` is written in the style of PFLlib / FL-bench on purpose, not as a
strawman: every sample is trained on exactly as fedpart's engine trains it (same clients per
round, same phases, epochs, batch size, ``drop_last`` rule, optimiser and aggregation), but with
the libraries' building blocks:

* per client and round, ``copy.deepcopy`` of the server model, loaded with the client's
  personal tensors;
* a ``torch.utils.data.DataLoader(shuffle=True)`` over a ``TensorDataset`` of the client's
  training samples, normalised once up front (float32, as the libraries' preprocessed arrays);
* a fresh ``torch.optim.SGD`` per client, round and phase (FedRep / DFedPGP: one for the head
  phase, one for the body phase, the other part frozen with ``requires_grad_(False)``);
* per-client personal state kept as a full copy of the model's ``state_dict``;
* FedAvg / FedPer / FedRep aggregation by a Python loop that averages the uploaded state dicts
  key by key (weights = training-set sizes); DFedPGP's push-sum by a loop over receivers and
  senders on per-client state dicts (``u = μ z``, column-stochastic weights);
* evaluation of every client's personalised model every round: a copy of the model loaded with
  that client's state and a per-client test ``DataLoader`` (batch size = the federation's);
* PyTorch's default (NCHW) convolution layout.

Where the engine's choices matter for the amount of work they are mirrored: a client smaller than
one batch takes one (smaller) step even under ``drop_last`` (the engine's rule), and the random
streams differ (``DataLoader`` shuffles from the global generator), so the two do the same work
on the same clients but not bit-identical arithmetic.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from fedpart.config import Config
from fedpart.engine.build import channels_last
from fedpart.engine.data import FederatedData
from fedpart.engine.rounds import sample_clients
from fedpart.models import BlockModel, build_model
from fedpart.seeding import seed_for
from fedpart.topology import Topology

__all__ = [
    "SUPPORTED",
    "build_initial_model",
    "CentralCeiling",
    "NaiveFederation",
    "NaivePhase",
    "phase_plan",
    "round_clients",
    "round_samples",
]

State = dict[str, torch.Tensor]

#: methods the naive loop implements
SUPPORTED = ("fedavg", "fedper", "fedrep", "dfedpgp")


@dataclass(frozen=True)
class NaivePhase:
    """One stretch of local training: the blocks trained, for how many epochs, at what lr factor.

    ``push_sum``: the learning rate is further divided by the client's push-sum weight ``μ``
    (DFedPGP's body phase steps on ``u = μ z``).
    """

    blocks: tuple[str, ...]
    epochs: int
    lr_scale: float = 1.0
    push_sum: bool = False


def phase_plan(cfg: Config, model: BlockModel) -> list[NaivePhase]:
    """The local phases of ``cfg.algorithm`` (the same as the method's engine recipe)."""
    name = cfg.algorithm.name
    opts = cfg.algorithm.options
    epochs = cfg.federation.local_epochs
    head = tuple(model.head_names)
    body = tuple(model.body_names())
    if name in ("fedavg", "fedper"):
        return [NaivePhase(tuple(model.block_names), epochs)]
    if name == "fedrep":
        body_epochs = opts.get("body_epochs")
        return [
            NaivePhase(head, int(opts.get("head_epochs", 1))),
            NaivePhase(body, epochs if body_epochs is None else int(body_epochs)),
        ]
    if name == "dfedpgp":
        return [
            NaivePhase(
                head, int(opts.get("head_epochs", 1)), float(opts.get("head_lr_scale", 1.0))
            ),
            NaivePhase(body, epochs, push_sum=True),
        ]
    raise ValueError(f"the naive loop implements {', '.join(SUPPORTED)}, not {name}")


def _epoch_samples(n: int, batch_size: int, drop_last: bool) -> int:
    """Samples one epoch trains on (the engine's rule: a client below one batch takes one step)."""
    if drop_last and n >= batch_size:
        return (n // batch_size) * batch_size
    return n


def round_clients(cfg: Config, data: FederatedData, rnd: int) -> list[int]:
    """The clients that train in round ``rnd`` (all of them for a decentralized method)."""
    if cfg.algorithm.name == "dfedpgp":
        return list(range(data.num_clients))
    return sample_clients(cfg.seed, rnd, data.num_clients, cfg.federation.join_ratio)


def round_samples(cfg: Config, data: FederatedData, model: BlockModel, rnd: int) -> int:
    """Client-samples trained on in round ``rnd`` (summed over clients, phases and epochs)."""
    f = cfg.federation
    phases = [p for p in phase_plan(cfg, model) if p.epochs > 0 and p.blocks]
    total = 0
    for c in round_clients(cfg, data, rnd):
        n = data.clients[c].num_train
        total += sum(p.epochs for p in phases) * _epoch_samples(n, f.batch_size, f.drop_last)
    return total


def build_initial_model(cfg: Config, data: FederatedData) -> BlockModel:
    """The model with the engine's initialisation (same seed stream)."""
    torch.manual_seed(seed_for(cfg.seed, "init"))
    return build_model(
        cfg.model.name,
        num_classes=data.num_classes,
        input_shape=tuple(data.bundle.input_shape),
        **cfg.model.options,
    )


class NaiveFederation:
    """FedAvg / FedPer / FedRep / DFedPGP written as the FL libraries write them (see the module).

    ``train_round(rnd)`` runs one round (local training and aggregation or push-sum mixing) and
    returns the client-samples trained on; ``evaluate()`` evaluates every client's personalised
    model and returns ``accuracy`` (mean over clients), ``accuracy_weighted`` and ``loss``.
    """

    def __init__(self, cfg: Config, data: FederatedData) -> None:
        name = cfg.algorithm.name
        if name not in SUPPORTED:
            raise ValueError(f"the naive loop implements {', '.join(SUPPORTED)}, not {name}")
        self.cfg = cfg
        self.data = data
        self.decentralized = name == "dfedpgp"
        self.model = build_initial_model(
            cfg, data
        )  # the server's model (a template when decentralized)
        self.phases = phase_plan(cfg, self.model)
        keys = list(self.model.state_dict())
        head = set(self.model.head_names)
        if name == "fedavg":
            self.personal_keys: list[str] = []
        else:
            self.personal_keys = [k for k in keys if k.split(".", 1)[0] in head]
        self.shared_keys = [k for k in keys if k not in set(self.personal_keys)]
        split = cfg.evaluation.split
        # per-client datasets of normalised samples, as the libraries load them
        self.train_sets = [TensorDataset(*data.batch(c.train)) for c in data.clients]
        self.test_sets = [TensorDataset(*data.batch(getattr(c, split))) for c in data.clients]
        # per-client state: a full copy of the model for every client
        init = self.model.state_dict()
        self.client_states: list[State] = [copy.deepcopy(init) for _ in data.clients]
        self.mu = [1.0] * data.num_clients
        self.topology: Topology | None = None
        if self.decentralized:
            t = cfg.topology
            name_t = "kout" if t.name == "auto" else t.name
            k = t.neighbors or min(10, data.num_clients - 1)
            self.topology = Topology(
                name_t,
                data.num_clients,
                k,
                cfg.seed,
                time_varying=t.time_varying,
                drop_prob=t.drop_prob,
            )

    # ------------------------------------------------------------------ training
    def train_round(self, rnd: int) -> int:
        """One round; returns the client-samples trained on."""
        cfg = self.cfg
        f = cfg.federation
        torch.manual_seed(seed_for(cfg.seed, "batches", rnd))  # the DataLoaders' shuffles
        lr = f.lr * f.lr_decay**rnd
        samples = 0
        uploads: list[State] = []
        weights: list[float] = []
        for c in round_clients(cfg, self.data, rnd):
            model = copy.deepcopy(self.model)
            if self.decentralized:
                model.load_state_dict(self.client_states[c])
            elif self.personal_keys:
                personal = {k: self.client_states[c][k] for k in self.personal_keys}
                model.load_state_dict(personal, strict=False)
            dataset = self.train_sets[c]
            n = len(dataset)
            loader = DataLoader(
                dataset,
                batch_size=f.batch_size,
                shuffle=True,
                drop_last=f.drop_last and n >= f.batch_size,
            )
            samples += self._local_train(model, loader, lr, c)
            state = copy.deepcopy(model.state_dict())
            self.client_states[c] = state
            if not self.decentralized:
                uploads.append({k: state[k] for k in self.shared_keys})
                weights.append(float(n))
        if self.decentralized:
            self._push_sum(rnd)
        elif uploads:
            self._aggregate(uploads, weights)
        return samples

    def _local_train(self, model: BlockModel, loader: DataLoader, lr: float, client: int) -> int:
        f = self.cfg.federation
        model.train()
        samples = 0
        for phase in self.phases:
            blocks = set(phase.blocks)
            params = []
            for name, p in model.named_parameters():
                on = name.split(".", 1)[0] in blocks
                p.requires_grad_(on)
                if on:
                    params.append(p)
            if not params or phase.epochs <= 0:
                continue
            phase_lr = lr * phase.lr_scale / (self.mu[client] if phase.push_sum else 1.0)
            optimizer = torch.optim.SGD(
                params, lr=phase_lr, momentum=f.momentum, weight_decay=f.weight_decay
            )
            for _ in range(phase.epochs):
                for x, y in loader:
                    optimizer.zero_grad()
                    loss = F.cross_entropy(model(x), y)
                    loss.backward()
                    optimizer.step()
                    samples += len(y)
        for p in model.parameters():
            p.requires_grad_(True)
        return samples

    def _aggregate(self, uploads: list[State], weights: list[float]) -> None:
        """The server's weighted average of the uploaded state dicts, key by key."""
        total = sum(weights)
        server = self.model.state_dict()
        for key in self.shared_keys:
            acc = torch.zeros_like(server[key], dtype=torch.float32)
            for state, w in zip(uploads, weights, strict=True):
                acc += state[key].float() * (w / total)
            if server[key].is_floating_point():
                server[key] = acc.to(server[key].dtype)
            else:
                server[key] = acc.round().to(server[key].dtype)
        self.model.load_state_dict(server)

    def _push_sum(self, rnd: int) -> None:
        """Push-sum over the round's directed graph on the shared keys (the bodies)."""
        assert self.topology is not None
        P = self.topology.graph(rnd).weights("push")  # [receiver, sender], column-stochastic
        old = self.client_states
        mu = self.mu
        new_states: list[State] = []
        new_mu: list[float] = []
        for i in range(len(old)):
            senders = [int(j) for j in torch.nonzero(P[i]).flatten()]
            mu_i = sum(float(P[i, j]) * mu[j] for j in senders)
            state = dict(old[i])
            for key in self.shared_keys:
                acc = torch.zeros_like(old[i][key], dtype=torch.float32)
                for j in senders:
                    acc += old[j][key].float() * (float(P[i, j]) * mu[j])
                state[key] = (acc / mu_i).to(old[i][key].dtype)
            new_states.append(state)
            new_mu.append(mu_i)
        self.client_states = new_states
        self.mu = new_mu

    # ---------------------------------------------------------------- evaluation
    def client_state(self, client: int) -> State:
        """The personalised model of ``client``: server tensors and its personal tensors."""
        if self.decentralized:
            return self.client_states[client]
        server = self.model.state_dict()
        server.update({k: self.client_states[client][k] for k in self.personal_keys})
        return server

    @torch.no_grad()
    def evaluate(self) -> dict[str, Any]:
        """Every client's personalised model on its own test split."""
        bs = self.cfg.federation.batch_size
        accs: list[float] = []
        correct_all = 0
        total_all = 0
        loss_all = 0.0
        for c, dataset in enumerate(self.test_sets):
            if len(dataset) == 0:
                continue
            model = copy.deepcopy(self.model)
            model.load_state_dict(self.client_state(c))
            model.eval()
            correct = 0
            for x, y in DataLoader(dataset, batch_size=bs, shuffle=False):
                out = model(x)
                correct += int((out.argmax(1) == y).sum())
                loss_all += float(F.cross_entropy(out, y, reduction="sum"))
            accs.append(correct / len(dataset))
            correct_all += correct
            total_all += len(dataset)
        return {
            "accuracy": sum(accs) / len(accs) if accs else math.nan,
            "accuracy_weighted": correct_all / total_all if total_all else math.nan,
            "loss": loss_all / total_all if total_all else math.nan,
        }


class CentralCeiling:
    """One model trained centrally: a single ``torch.optim.SGD`` loop over an in-memory tensor
    of every client's (normalised) training samples, ``batch_size`` samples per step, in the
    convolution layout the engine uses (``engine.conv_layout``).

    ``train_round(rnd, samples)`` trains on ``samples`` samples (a fresh permutation of the pool,
    repeated when more are asked than the pool holds); there is no evaluation. On a ``device``
    (a GPU) the model, the samples and the permutation live there: a step is then one forward
    and backward pass of the whole batch, the arithmetic of one batched step of every
    participating client without per-client weights or engine overhead.
    """

    def __init__(
        self,
        cfg: Config,
        data: FederatedData,
        batch_size: int,
        device: torch.device | str | None = None,
    ) -> None:
        self.cfg = cfg
        self.batch_size = batch_size
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.model = build_initial_model(cfg, data).to(self.device)
        self.model.set_channels_last(
            channels_last(cfg, self.model)
        )  # the fastest layout, as the engine's
        pool = torch.cat([c.train for c in data.clients]).to(data.x.device)
        x, y = data.batch(pool)
        self.x, self.y = x.to(self.device), y.to(self.device)
        f = cfg.federation
        self.optimizer = torch.optim.SGD(
            self.model.parameters(), lr=f.lr, momentum=f.momentum, weight_decay=f.weight_decay
        )

    def train_round(self, rnd: int, samples: int) -> int:
        g = torch.Generator().manual_seed(seed_for(self.cfg.seed, "batches", rnd))
        n = self.y.numel()
        order = torch.cat([torch.randperm(n, generator=g) for _ in range(-(-samples // n))])
        order = order.to(self.device)
        self.model.train()
        for start in range(0, samples, self.batch_size):
            idx = order[start : min(start + self.batch_size, samples)]
            self.optimizer.zero_grad()
            loss = F.cross_entropy(self.model(self.x[idx]), self.y[idx])
            loss.backward()
            self.optimizer.step()
        return samples
