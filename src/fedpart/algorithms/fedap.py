"""FedAP (Lu et al., IEEE TBD 2022): aggregation weights from the Wasserstein distance between the
clients' BatchNorm input statistics, after a pre-training phase; BatchNorm layers stay local."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.func import functional_call

from fedpart.algorithms.fedbn import LocalBatchNorm
from fedpart.algorithms.holdout import split_train, train_on
from fedpart.config import fraction, option
from fedpart.engine import method_state as saved
from fedpart.engine.mixers import warmup_rounds
from fedpart.engine.mixing import mix_states, tensor_bytes
from fedpart.engine.recipe import Phase, Recipe
from fedpart.engine.rounds import sample_clients
from fedpart.engine.training import TrainResult
from fedpart.errors import DataError
from fedpart.registry import register

State = dict[str, torch.Tensor]

#: the ``(seed, "algorithm", ...)`` stream of the pre-training share of each client's data
_PRETRAIN_STREAM = 0
#: FL-bench's weight for two clients at Wasserstein distance 0
_SAME_CLIENT_WEIGHT = 1e14
PRETRAIN_MODES = ("sequential", "fedavg")


@dataclass
class FedAPOptions:
    model_momentum: float = fraction(
        0.5, "λ: a client's weight on its own model; the others share 1 − λ (FedCMD: 0.5)"
    )
    warmup_ratio: float = fraction(
        0.5, "the first int(ratio · federation.rounds) rounds pre-train (FL-bench: 0.5)"
    )
    warmup_rounds: int | None = option(
        None, "the number of pre-training rounds instead (FL-bench's warmup_round >= 1)", ge=0
    )
    pretrain: str = option(
        "sequential",
        "sequential (FL-bench's FedAP: every client in turn trains the one model on "
        "its pre-training share) or fedavg (f-FedAP: FedAvg of the sampled clients)",
        choices=PRETRAIN_MODES,
    )
    pretrain_data_ratio: float = option(
        0.3,
        "sequential: share of each client's training data used for pre-training and "
        "the statistics; the rest trains afterwards (FL-bench: 0.3)",
        gt=0,
        lt=1,
    )
    pretrain_epochs: int | None = option(
        None,
        "local epochs of a pre-training turn (default federation.local_epochs, as in "
        "the FL-bench version FedCMD ran; later FL-bench uses 1)",
        ge=0,
    )


# ------------------------------------------------------------------------- statistics
def batchnorm_input_statistics(
    model: nn.Module, state: State, batches: list[torch.Tensor]
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per BatchNorm layer (in module order), the per-channel mean and variance of its input over
    all ``batches``, the model in training mode as FL-bench computes them (each BatchNorm
    normalises with its batch's statistics). ``state``'s running statistics are not changed."""
    layers = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    # per layer: [count, Σx, Σx²] per channel, accumulated in float64 over every batch
    moments: list[torch.Tensor | None] = [None] * len(layers)

    def accumulate(index: int):  # noqa: ANN202 - a forward pre-hook
        def hook(_module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
            x = inputs[0].detach().double().transpose(0, 1).flatten(1)  # [channels, values]
            count = torch.full(
                (x.shape[0],), float(x.shape[1]), dtype=torch.float64, device=x.device
            )
            batch = torch.stack([count, x.sum(1), (x * x).sum(1)])
            moments[index] = batch if moments[index] is None else moments[index] + batch

        return hook

    buffers = {k for k, _ in model.named_buffers()}
    scratch = {k: (v.clone() if k in buffers else v) for k, v in state.items()}
    hooks = [m.register_forward_pre_hook(accumulate(i)) for i, m in enumerate(layers)]
    was_training = model.training
    model.train()
    try:
        with torch.no_grad():
            for x in batches:
                functional_call(model, scratch, (x,))
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)
    out = []
    for m in moments:
        if m is None:
            raise ValueError("no batch to compute BatchNorm input statistics on")
        count, total, squares = m
        mean = total / count
        out.append((mean, (squares / count - mean * mean).clamp_min(0.0)))
    return out


def wasserstein(
    a: list[tuple[torch.Tensor, torch.Tensor]], b: list[tuple[torch.Tensor, torch.Tensor]]
) -> float:
    """Σ_l W₂(N(μ_a, σ_a²), N(μ_b, σ_b²)) over the layers, with diagonal covariances:
    W₂ = sqrt(‖μ_a − μ_b‖² + ‖σ_a − σ_b‖²) per layer."""
    return wasserstein_matrix([a, b])[0][1]


def _squared_terms(
    a: list[tuple[torch.Tensor, torch.Tensor]], b: list[tuple[torch.Tensor, torch.Tensor]]
) -> list[torch.Tensor]:
    """Per layer, ``‖μ_a − μ_b‖² + ‖σ_a − σ_b‖²`` as a 0-d tensor where the statistics are."""
    return [
        ((ma - mb) ** 2).sum() + ((va.sqrt() - vb.sqrt()) ** 2).sum()
        for (ma, va), (mb, vb) in zip(a, b, strict=True)
    ]


def wasserstein_matrix(stats: list[list[tuple[torch.Tensor, torch.Tensor]]]) -> list[list[float]]:
    """:func:`wasserstein` of every pair of clients' statistics (0 on the diagonal), the
    per-layer terms computed where the statistics are and read back at once."""
    n = len(stats)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    terms = [t for i, j in pairs for t in _squared_terms(stats[i], stats[j])]
    read = iter(torch.stack(terms).tolist() if terms else [])
    out = [[0.0] * n for _ in range(n)]
    for i, j in pairs:
        total = 0.0
        for _ in stats[i]:
            total += math.sqrt(next(read))
        out[i][j] = out[j][i] = total
    return out


def similarity_weights(distances: torch.Tensor, momentum: float) -> torch.Tensor:
    """The aggregation matrix: off the diagonal 1/d_ij normalised per row and scaled by 1 − λ,
    λ on the diagonal (rows sum to 1)."""
    n = distances.shape[0]
    if n == 1:
        return torch.ones(1, 1, dtype=torch.float64, device=distances.device)
    d = distances.to(torch.float64)
    inverse = torch.where(d == 0, torch.full_like(d, _SAME_CLIENT_WEIGHT), 1.0 / d)
    inverse.fill_diagonal_(0.0)
    weights = inverse / inverse.sum(1, keepdim=True) * (1.0 - momentum)
    weights.fill_diagonal_(momentum)
    return weights


@register
class FedAP(LocalBatchNorm):
    """FL-bench's FedAP (from the authors' PersonalizedFL code), BatchNorm layers personal as in
    FedBN:

    1. Pre-training, rounds t < T_p = int(ratio · T): every client in turn trains the one model on
       its pre-training share (``pretrain=fedavg``: FedAvg of the round's participants).
    2. Each client's per-channel mean μ and variance σ² of every BatchNorm layer's input on that
       share, under the pre-trained model; d_ij = Σ_l sqrt(‖μ_i − μ_j‖² + ‖σ_i − σ_j‖²) (the 2-Wasserstein
       distance of diagonal Gaussians) and the fixed matrix W_ij = (1 − λ)(1/d_ij)/Σ_{k≠i} 1/d_ik,
       W_ii = λ.
    3. Then participant i receives θ̃_i = Σ_j W_ij θ_j over every client's latest model on the
       server and trains on the rest of its data; the server stores the upload as θ_i.
    """

    name = "fedap"
    summary = "BatchNorm kept local; aggregation weighted by Wasserstein distance of BN statistics."
    setting = "cloud-edge"
    Options = FedAPOptions
    checkpointed = (saved.Tensor("weights", dtype=torch.float64),)
    backends = ("sequential",)  # its own local update

    def setup(self) -> None:
        super().setup()
        o = self.options
        rounds = self.ctx.cfg.federation.rounds
        self.warmup = warmup_rounds(rounds, o.warmup_ratio, o.warmup_rounds)
        self.sequential = self.options.pretrain == "sequential"
        self.weights: torch.Tensor | None = None
        self._chain: tuple[int, dict[int, tuple[State, TrainResult]]] = (-1, {})
        self._mixed: list[State] | None = None
        self._chain_bytes: int | None = None
        epochs = self.options.pretrain_epochs
        self.pretrain_recipe = Recipe(phases=(Phase(epochs=epochs, name="pretrain"),))
        if self.warmup == 0:
            self._set_weights()

    def parts(self, client: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(pre-training, later training) indices of ``client``: under ``fedavg`` both are its
        whole training split (f-FedAP holds nothing back)."""
        if not self.sequential:
            train = self.ctx.data.clients[client].train
            return train, train
        return split_train(self.ctx, client, self.options.pretrain_data_ratio, _PRETRAIN_STREAM)

    def pretraining(self, rnd: int) -> bool:
        return rnd < self.warmup

    # ------------------------------------------------------------------ pre-training
    def _pretrain_turns(self, rnd: int) -> dict[int, tuple[State, TrainResult]]:
        """Every client's turn of a sequential pre-training round, in client order: it trains
        the server's current model (with its own BatchNorm) and the server keeps the result."""
        if self._chain[0] == rnd:
            return self._chain[1]
        store = self.ctx.store
        shared = store.shared_keys()
        turns = {}
        for client in range(self.ctx.data.num_clients):
            start = store.client_state(client)
            index = self.parts(client)[0]
            result = train_on(self.ctx, rnd, client, start, index, self.pretrain_recipe)
            store.global_state.update({k: result.state[k] for k in shared})
            store.set_personal(client, result.state)
            turns[client] = (start, result)
        self._chain = (rnd, turns)
        self._chain_bytes = len(turns) * tensor_bytes({k: store.global_state[k] for k in shared})
        return turns

    def _chain_result(self, rnd: int, client: int) -> TrainResult:
        """A participant's turn; the first participant also reports the turns of the clients
        that were not sampled, so that the round's cost and loss cover every turn."""
        turns = self._pretrain_turns(rnd)
        cfg = self.ctx.cfg
        participants = sample_clients(
            cfg.seed, rnd, self.ctx.data.num_clients, cfg.federation.join_ratio
        )
        result = turns[client][1]
        if client != participants[0]:
            return result
        others = [turns[c][1] for c in turns if c not in participants]
        everyone = [result, *others]
        samples = sum(r.samples for r in everyone)
        return TrainResult(
            result.state,
            sum(r.loss * r.samples for r in everyone) / samples if samples else 0.0,
            samples,
            sum(r.steps for r in everyone),
            [p for r in everyone for p in r.phases],
        )

    # ------------------------------------------------------------------ similarity
    def _set_weights(self) -> None:
        """Step 2: the fixed aggregation matrix from every client's BatchNorm input statistics."""
        ctx = self.ctx
        bs = ctx.cfg.federation.batch_size
        stats = []
        for client in range(ctx.data.num_clients):
            index = self.parts(client)[0]
            if index.numel() == 0:
                raise DataError(
                    f"fedap: client {client} has no pre-training sample to compute BatchNorm "
                    "statistics on; raise algorithm.pretrain_data_ratio or partition.min_size"
                )
            batches = [ctx.data.batch(index[i : i + bs])[0] for i in range(0, index.numel(), bs)]
            stats.append(
                batchnorm_input_statistics(ctx.model, ctx.store.client_state(client), batches)
            )
        matrix = wasserstein_matrix(stats)
        distances = torch.tensor(matrix, dtype=torch.float64, device=self.ctx.device)
        self.weights = similarity_weights(distances, self.options.model_momentum)

    def mixed(self, client: int) -> State:
        """θ̃_client = Σ_j W_client,j θ_j (every client's row is computed once per round)."""
        assert self.weights is not None
        if self._mixed is None:
            store = self.ctx.store
            states = [store.server_state(j) for j in range(self.ctx.data.num_clients)]
            self._mixed = mix_states(states, self.weights, store.shared_keys())
        return self._mixed[client]

    # ------------------------------------------------------------------ the round
    def start_state(self, rnd: int, client: int) -> State:
        state = self.ctx.store.client_state(client)
        if self.weights is None:
            return state
        return {**state, **self.mixed(client)}

    def received_state(self, rnd: int, client: int) -> State:
        if self.pretraining(rnd) and self.sequential:
            return self._pretrain_turns(rnd)[client][0]
        return self.start_state(rnd, client)

    def eval_state(self, client: int) -> State:
        # FL-bench tests FedAP's clients with the aggregate they would receive
        return self.start_state(self.ctx.rounds_completed, client)

    def local_update(self, rnd: int, client: int) -> TrainResult:
        if self.pretraining(rnd) and self.sequential:
            return self._chain_result(rnd, client)
        start = self.start_state(rnd, client)
        if self.pretraining(rnd):
            return self.ctx.train(rnd, client, start, recipe=self.pretrain_recipe)
        return train_on(self.ctx, rnd, client, start, self.parts(client)[1])

    def aggregate(self, rnd: int, uploads: dict[int, State], weights: dict[int, float]) -> None:
        if self.pretraining(rnd):
            self._chain = (-1, {})
            if not self.sequential:
                super().aggregate(rnd, uploads, weights)
            if rnd + 1 >= self.warmup:
                self._set_weights()
            return
        for c in sorted(uploads):
            self.ctx.store.set_tailored(c, uploads[c])
        self._mixed = None

    def round_metrics(self) -> dict[str, Any]:
        # a sequential pre-training round moves the model through every client, not only the
        # sampled ones the engine counts
        sent, self._chain_bytes = self._chain_bytes, None
        return {} if sent is None else {"up_bytes": sent, "down_bytes": sent}

    def state_restored(self) -> None:
        self._mixed = None  # the mix of the restored weights is made anew
