"""pFedSim (Tan et al., 2023): FedAvg warm-up, then a personal classifier and a body aggregated
per client with weights from the similarity of the clients' classifiers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from fedpart.algorithms.base import Algorithm
from fedpart.config import fraction, option
from fedpart.engine import method_state as saved
from fedpart.engine.mixers import SimilarityMixer, clipped, warmup_rounds
from fedpart.engine.mixing import normalize_rows
from fedpart.errors import ConfigError
from fedpart.models import BlockModel
from fedpart.registry import register

State = dict[str, torch.Tensor]

#: FL-bench sets a client's similarity to itself to this value before −log(1 − s)
SELF_SIMILARITY = 0.9999


@dataclass
class PFedSimOptions:
    warmup_ratio: float = fraction(
        0.5,
        "ρ_general: the first int(ρ · federation.rounds) rounds are FedAvg "
        "(FedCMD and FL-bench: 0.5)",
    )

    warmup_rounds: int | None = option(
        None, "the number of FedAvg rounds instead (FL-bench's warmup_round >= 1)", ge=0
    )


def classifier_weight_key(model: BlockModel) -> str:
    """The weight matrix of the model's last head block (pFedSim compares classifiers by it)."""
    block = model.head_names[-1]
    keys = [k for k, p in model.named_parameters() if model.block_of(k) == block and p.ndim == 2]
    if not keys:
        raise ConfigError("model", f"the head block {block!r} has no weight matrix to compare")
    return keys[-1]


def classifier_similarity(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """max(0, mean over classes of cos(a_c, b_c)): one row per class of the two classifiers
    (a float64 0-d tensor where they are)."""
    cos = torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=-1)
    return clipped(cos.mean())


@register
class PFedSim(Algorithm):
    """Rounds t < T_w = int(ρ_general · T) are FedAvg. Then the classifier φ_i stays on client i,
    and the server keeps every client's latest body θ_j. Participant i receives

        θ̃_i = Σ_j w_ij θ_j,   w_ij ∝ −log(1 − s_ij),  s_ii = 0.9999,

    where s_ij = max(0, mean_c cos(φ_i[c], φ_j[c])) is last set when i and j were sampled in the
    same round (the N×N matrix starts as I; a client with no similar client keeps its own θ_i).
    This is FL-bench's rule, the implementation the FedCMD paper ran.
    """

    name = "pfedsim"
    needs_head_and_body = True
    summary = "FedAvg warm-up, then personal classifier and classifier-similarity-weighted body."
    setting = "cloud-edge"
    Options = PFedSimOptions
    checkpointed = (
        saved.Tensor("mixer.matrix", key="similarity", dtype=torch.float64),
        saved.Value("personalized"),
    )

    def setup(self) -> None:
        o = self.options
        rounds = self.ctx.cfg.federation.rounds
        self.warmup = warmup_rounds(rounds, o.warmup_ratio, o.warmup_rounds)
        self.classifier = classifier_weight_key(self.ctx.model)
        self.mixer = SimilarityMixer(
            self.ctx.data.num_clients,
            self.ctx.device,
            lambda a, b: classifier_similarity(a[self.classifier], b[self.classifier]),
        )
        self.personalized = False
        if self.warmup == 0:
            self._personalize()

    def _personalize(self) -> None:
        """End of warm-up: every client's classifier starts as the FedAvg one and stays local."""
        model = self.ctx.model
        head = set(model.head_names)
        self.ctx.store.make_personal(k for k in self.ctx.store.keys if model.block_of(k) in head)
        self.personalized = True

    # ------------------------------------------------------------------ server → client
    def mixing_weights(self, client: int) -> torch.Tensor | None:
        """Row ``client`` of the aggregation matrix (None: it keeps its own body)."""
        row = self.mixer.matrix[client].clone()
        if float(row.sum()) <= 1.0:
            return None
        row[client] = SELF_SIMILARITY
        # a perfectly similar pair would get an infinite weight
        scores = -torch.log1p(-row.clamp(max=SELF_SIMILARITY))
        return normalize_rows(scores[None], "linear")[0]

    def start_state(self, rnd: int, client: int) -> State:
        store = self.ctx.store
        state = store.client_state(client)
        weights = self.mixing_weights(client) if self.personalized else None
        if weights is None:
            return state
        body = self.mixer.mix_row(weights, store.server_state, store.shared_keys(), how=None)
        return {**state, **body}

    def received_state(self, rnd: int, client: int) -> State:
        # FL-bench's "test before": the aggregate the client receives (evaluation, FL-bench's
        # testing mode, uses its own latest model: eval_state)
        return self.start_state(rnd, client)

    # ------------------------------------------------------------------ client → server
    def upload(self, rnd: int, client: int, state: State, job: Any = None) -> State:
        sent = super().upload(rnd, client, state, job)
        if self.personalized:  # the classifier goes up for the similarity only
            sent[self.classifier] = state[self.classifier]
        return sent

    def aggregate(self, rnd: int, uploads: dict[int, State], weights: dict[int, float]) -> None:
        if not self.personalized:
            super().aggregate(rnd, uploads, weights)
            if rnd + 1 >= self.warmup:
                self._personalize()
            return
        store = self.ctx.store
        shared = store.shared_keys()
        clients = sorted(uploads)
        for c in clients:
            store.set_tailored(c, {k: uploads[c][k] for k in shared})
        self.mixer.observe(uploads)

    def state_restored(self) -> None:
        if self.personalized:
            self._personalize()
