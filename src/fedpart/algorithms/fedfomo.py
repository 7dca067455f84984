"""FedFomo (Zhang et al., ICLR 2021): each client combines the models it downloads with
weights from their first-order benefit on its own validation data."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from fedpart.algorithms.base import Algorithm
from fedpart.algorithms.holdout import mean_loss, split_train, train_on
from fedpart.config import option
from fedpart.engine import method_state as saved
from fedpart.engine.mixing import mix_states, normalize_rows, tensor_bytes
from fedpart.engine.training import ClientJob
from fedpart.registry import register

State = dict[str, torch.Tensor]

#: the ``(seed, "algorithm", ...)`` stream of the validation hold-out
_VAL_STREAM = 0


@dataclass
class FedFomoOptions:
    M: int = option(5, "models downloaded per client and round (FedCMD: 5; 0 = Local)", ge=0)
    val_ratio: float = option(
        0.2, "share of each client's training data held out to weight the models", ge=0, lt=1
    )
    val_resplit: bool = option(
        False,
        "draw a new hold-out every round (later FL-bench) instead of one per client "
        "(the FL-bench version FedCMD ran)",
    )


@dataclass
class Combination:
    """What participant i computes once the models of round t have arrived."""

    state: State  # θ_i^t, the model it trains from (and tests before training)
    received: list[int]  # the clients whose models it downloaded, itself included
    benefit: dict[int, float]  # w_ij before clipping, added to the affinity row P_i
    train: torch.Tensor  # the training indices left after the hold-out
    weights: dict[int, float] = field(default_factory=dict)  # the normalised w⁺ (empty: θ_i kept)


@register
class FedFomo(Algorithm):
    """Participant i of round t > 0 downloads the latest models θ_j of the M clients of round
    t − 1 with the highest affinity P_ij (its own θ_i comes too), and weights each by

        w_ij = (L_i(θ_i) − L_i(θ_j)) / ‖θ_j − θ_i‖,

    the loss L_i on its validation hold-out (the paper's first-order weight). With
    w⁺ = max(w, 0), θ_i ← Σ_j w⁺_ij θ_j / Σ_j w⁺_ij (the paper's θ_i + Σ w_j (θ_j − θ_i) with
    normalised weights); when no model helps, θ_i is kept. P_ij += w_ij. Then local training on
    the rest of the training data; the server stores the uploaded θ_i.
    """

    name = "fedfomo"
    summary = "Per-client combination of downloaded models weighted by validation-loss gain."
    setting = "cloud-edge"
    Options = FedFomoOptions
    has_global_model = False
    backends = ("sequential",)  # its own local update
    checkpointed = (saved.Tensor("affinity", dtype=torch.float64), saved.Value("previous"))

    def setup(self) -> None:
        self.affinity = torch.eye(
            self.ctx.data.num_clients, dtype=torch.float64, device=self.ctx.device
        )
        shared = set(self.ctx.store.shared_keys())
        self.params = [k for k, _ in self.ctx.model.named_parameters() if k in shared]
        self.previous: list[int] = []  # the clients that uploaded in the last round
        self.combinations: dict[tuple[int, int], Combination] = {}
        self._down_bytes: int | None = None

    def begin_round(self, rnd: int) -> None:
        # a combination is computed from the models and affinities as they are at the start of
        # its round, which aggregation changes: the last round's are stale
        self.combinations = {}

    # ------------------------------------------------------------------ selection
    def downloads(self, rnd: int, client: int) -> list[int]:
        """The clients of round ``rnd − 1`` whose models ``client`` receives (top-M by P)."""
        if not self.previous or self.options.M == 0:
            return []
        scores = self.affinity[client, self.previous]
        order = torch.sort(scores, descending=True, stable=True).indices
        return [self.previous[p] for p in order[: self.options.M].tolist()]

    def hold_out(self, rnd: int, client: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(validation, training) indices of ``client`` in round ``rnd``."""
        if self.options.M == 0:  # nothing to weight: train on everything, exactly Local
            train = self.ctx.data.clients[client].train
            return train.new_empty(0), train
        keys = (rnd,) if self.options.val_resplit else ()
        return split_train(self.ctx, client, self.options.val_ratio, _VAL_STREAM, *keys)

    # ------------------------------------------------------------------ the combination
    def combination(self, rnd: int, client: int) -> Combination:
        """Participant ``client``'s start of round ``rnd``, computed once in the round: for its
        test before training, its local update and the server's aggregation alike."""
        if (rnd, client) not in self.combinations:
            self.combinations[rnd, client] = self._combine(rnd, client)
        return self.combinations[rnd, client]

    def _combine(self, rnd: int, client: int) -> Combination:
        store = self.ctx.store
        own = store.client_state(client)
        val, train = self.hold_out(rnd, client)
        others = [j for j in self.downloads(rnd, client) if j != client]
        received = [client, *others]
        if not others:
            return Combination(own, received, {}, train)
        # a downloaded model replaces the parameters only; buffers stay the client's own
        candidates = {
            j: {**own, **{k: store.server_state(j)[k] for k in self.params}} for j in others
        }
        # the losses on the held-out split and the distances, read back at once
        losses = [mean_loss(self.ctx, theta, val) for theta in (own, *candidates.values())]
        distances = [
            torch.sqrt(sum(((theta[k] - own[k]).double() ** 2).sum() for k in self.params))
            for theta in candidates.values()
        ]
        own_loss, *rest = torch.stack([*losses, *distances]).tolist()
        benefit = {}
        for n, j in enumerate(candidates):
            gain = own_loss - rest[n]
            benefit[j] = gain / (rest[len(candidates) + n] + 1e-5)
        positive = torch.tensor([max(0.0, benefit[j]) for j in others], dtype=torch.float64)
        if float(positive.sum()) <= 0.0:
            return Combination(own, received, benefit, train)
        weights = normalize_rows(positive[None], "linear")
        mixed = mix_states([candidates[j] for j in others], weights, self.params)[0]
        used = {j: float(w) for j, w in zip(others, weights[0], strict=True)}
        return Combination({**own, **mixed}, received, benefit, train, used)

    def received_state(self, rnd: int, client: int) -> State:
        return self.combination(rnd, client).state

    def job(self, rnd: int, client: int) -> ClientJob:
        start = self.combination(rnd, client)
        recipe = self.recipe(rnd, client)
        return ClientJob(rnd, client, start.state, recipe, {"combination": start})

    def train_job(self, job: ClientJob) -> Any:
        if self.options.M == 0:  # trains on its whole training split
            return super().train_job(job)
        train = job.scratch["combination"].train
        result = train_on(self.ctx, job.rnd, job.client, job.start, train, job.recipe)
        result.job = job
        return result

    # ------------------------------------------------------------------ server
    def aggregate(self, rnd: int, uploads: dict[int, State], weights: dict[int, float]) -> None:
        store = self.ctx.store
        for c in sorted(uploads):
            store.set_tailored(c, uploads[c])
            for j, w in self.combination(rnd, c).benefit.items():
                self.affinity[c, j] += w
        received = sum(len(self.combination(rnd, c).received) for c in uploads)
        self.previous = sorted(uploads)
        self._down_bytes = received * tensor_bytes(
            {k: store.global_state[k] for k in self.download_keys(rnd)}
        )

    def round_metrics(self) -> dict[str, Any]:
        # the engine counts one model per participant; a FedFomo client downloads several
        down, self._down_bytes = self._down_bytes, None
        return {} if down is None else {"down_bytes": int(down)}
