"""FedCMD (Chen et al., IEEE TC 2024): Wasserstein personalized-layer selection, then
similarity-weighted aggregation of the layers after it.

Phase 1 (rounds 0..K_p−1, K_p = ⌊ρK⌋): FedAvg, while every participant scores each candidate
layer l on every local batch by the feature-distribution transfer of Eq. (6),

    s_l = | (W2(z^{o_l}, z^y) − W2(z^{o_l}, z^x)) − (W2(z^{o_{l−1}}, z^y) − W2(z^{o_{l−1}}, z^x)) |,

with scalar Gaussians z fitted to each tensor's mean and std and the closed-form 1-D W2
(Eq. 4); a batch votes for argmin_l s_l, a client for its batches' majority, a round for its
clients' majority (Alg. 2 line 17), and l* is the majority over the K_p rounds (line 22).
What the paper leaves open — the fit, y's encoding, the tie rule of every majority, when a
client votes, what a degenerate batch contributes — is an option each.

Phase 2 (Alg. 3): l* stays on every client (never aggregated, never broadcast); layers before
l* are averaged with data-size weights (Eq. 2); layers after l* are aggregated per client,
Σ_j Φ_ij ω_j / Σ_j Φ_ij (Eq. 7), with Φ_ij = max(0, cos(φ_i, φ_j)) of the clients'
personalized-layer parameters (Eq. 8) in a persistent N×N matrix. ``variant=code`` switches every
point where the authors' code departs from the paper (docs/methods/fedcmd.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from fedpart.algorithms.base import Algorithm, State
from fedpart.config import fraction, option
from fedpart.engine import method_state as saved
from fedpart.engine.functional import call_method
from fedpart.engine.layer_selection import (  # noqa: F401 - also importable from here
    DEGENERATE,
    FITS,
    LABELS,
    TIES,
    BlockVote,
    batch_vote,
    gaussian,
    majority,
    score_chain,
    tally,
    transfer_scores,
    vote,
    w2_gaussian,
)
from fedpart.engine.mixers import (
    SimilarityMixer,
    clipped,
    cosine,
    rowwise_cosine,
    similarity_statistics,
)
from fedpart.engine.mixing import weighted_average
from fedpart.engine.recipe import Observer, Recipe, bind
from fedpart.errors import ConfigError, FedpartError
from fedpart.registry import register

VARIANTS = ("paper", "code")
#: every switch, with its value under variant=paper and variant=code (spec §2.5)
SWITCHES: dict[str, tuple[tuple[str, ...], str, str]] = {
    # option: (choices, paper, code)
    "w2": (("closed_form", "mean_only"), "closed_form", "mean_only"),
    "score": (("paper", "code"), "paper", "code"),
    # the vote's open choices: the text where it states them, else the authors' code
    # (docs/results/fedcmd.md, "Which reading is the default"), so only the fit differs
    "fit": (FITS, "raw", "minmax"),
    "tie_break": (("first", "prefer_fc2"), "prefer_fc2", "prefer_fc2"),
    "similarity": (("parameters", "weight_deltas"), "parameters", "weight_deltas"),
    "phi_norm": (("linear", "softmax"), "linear", "softmax"),
    "phase1_weights": (("data_size", "all_clients_uniform"), "data_size", "all_clients_uniform"),
}


def _switch(name: str, doc: str) -> Any:
    """A switch option: ``auto`` (the variant's value) or one of its choices."""
    return option("auto", doc, choices=("auto", *SWITCHES[name][0]))


@dataclass
class FedCMDOptions:
    variant: str = option(
        "paper", "paper or code: the default of every switch below (spec §2.5)", choices=VARIANTS
    )
    rho: float = fraction(0.1, "ρ: the selection phase lasts K_p = ⌊ρ·rounds⌋ rounds")
    selection_rounds: int | None = option(
        None, "K_p directly (overrides rho; Table IX: 20..100)", ge=0
    )
    candidates: list[str] | None = option(
        None,
        "candidate layers in forward order (default: the blocks after the last "
        "convolutional one, e.g. fc1, fc2, classifier)",
    )
    personal_layer: str | None = option(
        None, "fix l* to this block and skip selection (Tables I-IV motivation runs)"
    )
    weighted_aggregation: bool = option(
        True, "false: the Fig. 5 ablation (l* kept local, every other layer FedAvg)"
    )
    granularity: str = option(
        "batch",
        "batch: every local batch votes (the code); post_train: one vote per client "
        "from its trained model on its training data (Alg. 2 lines 9-11)",
        choices=("batch", "post_train"),
    )
    fit: str = _switch(
        "fit",
        "the scalar Gaussian of a tensor: raw (its mean and std, the text) or minmax (scaled "
        "to [0, 1] first, the code)",
    )
    labels: str = option(
        "index", "y as the class-index vector (the code) or its one-hot matrix", choices=LABELS
    )
    client_tie: str = option(
        "first_seen", "tie rule of a client's batch majority (the code: first_seen)", choices=TIES
    )
    round_tie: str = option(
        "first_seen", "tie rule of a round's client majority (the code: first_seen)", choices=TIES
    )
    final_tie: str = option(
        "first_seen",
        "tie rule of the majority over the rounds (the code: first_seen)",
        choices=TIES,
    )
    degenerate: str = option(
        "skip_single",
        "score: every batch votes (an undefined fit counts W2 = 0); skip_single: not a batch "
        "of one sample (the code); skip: nor one of one class",
        choices=DEGENERATE,
    )
    eps: float = option(1e-8, "ε of the cosine similarity (Eq. 8)", ge=0)
    w2: str = _switch("w2", "closed_form (paper) or mean_only |μ1−μ2| (code)")
    score: str = _switch(
        "score", "paper |(A_y−A_x)−(B_y−B_x)| or code ||A_y−B_y|−|A_x−B_x|| (Eq. 6)"
    )
    tie_break: str = _switch(
        "tie_break", "first (lowest index) or prefer_fc2 (the code; both variants) on equal s_l"
    )
    similarity: str = _switch(
        "similarity",
        "parameters: cos of flattened φ (paper); weight_deltas: row-wise cos of the "
        "weight update, mean (code); both clipped at 0",
    )
    phi_norm: str = _switch(
        "phi_norm", "linear Φ_ij/Σ_j Φ_ij over Φ_ij > 0 (paper) or softmax over all N (code)"
    )
    phase1_weights: str = _switch(
        "phase1_weights",
        "data_size FedAvg of the participants (paper) or all_clients_uniform: uniform "
        "mean of every client's latest model, stale ones included (code)",
    )

    def switch(self, name: str) -> str:
        """The value of a switch: its own setting, or the variant's."""
        value = getattr(self, name)
        if value != "auto":
            return value
        _, paper, code = SWITCHES[name]
        return paper if self.variant == "paper" else code


# ----------------------------------------------------------------------------- the method
@register
class FedCMD(Algorithm):
    """Selection phase (FedAvg + votes for l*), then l* personal, layers before it averaged,
    layers after it aggregated per client by personalized-layer similarity."""

    name = "fedcmd"
    summary = (
        "Wasserstein-selected personal layer; similarity-weighted layers after it (cloud-edge)."
    )
    setting = "cloud-edge"
    checkpointed = (
        saved.Tensor("mixer.matrix", key="phi", dtype=torch.float64),
        saved.PerClient("latest"),
        saved.PerClient("latest_models"),
        saved.Value("layer"),
        saved.Value("votes.winners", key="round_winners"),
    )
    Options = FedCMDOptions
    backends = ("sequential", "ray", "processes", "flower")

    def setup(self) -> None:
        o = self.options
        self.blocks = list(self.ctx.model.block_names)
        #: the candidates, and o_0 (the block before the first), o_1, …: what Eq. (6) compares
        self.candidates, self.chain = score_chain(
            self.ctx.model, o.candidates, {"algorithm.personal_layer": o.personal_layer}
        )
        #: a batch's vote (the observer of phase-1 training)
        self.batch_vote = bind(
            batch_vote,
            chain=tuple(self.chain),
            w2=o.switch("w2"),
            score=o.switch("score"),
            tie_break=o.switch("tie_break"),
            fit=o.switch("fit"),
            labels=o.labels,
            num_classes=self.ctx.data.num_classes if o.labels == "onehot" else 0,
            degenerate=o.degenerate,
        )
        # K_p: none with a fixed l*; else as given, or ⌊ρ·rounds⌋ (at least 1 when ρ > 0)
        by_rho = max(1, int(o.rho * self.ctx.cfg.federation.rounds)) if o.rho > 0 else 0
        given = o.selection_rounds
        self.selection_rounds = 0 if o.personal_layer else by_rho if given is None else given
        if self.selection_rounds == 0 and not o.personal_layer:
            raise ConfigError(
                "algorithm.selection_rounds",
                "no selection round and no algorithm.personal_layer: nothing would choose l*",
            )
        self.layer: str | None = None
        self.votes = BlockVote(self.candidates, (o.client_tie, o.round_tie, o.final_tie))
        #: Φ (Eq. 8), clipped at 0, of every pair of clients that met in a round
        self.mixer = SimilarityMixer(
            self.ctx.data.num_clients,
            self.ctx.device,
            lambda a, b: clipped(self._similarity(a, b, o.eps)),
        )
        #: the server's copy of each client's latest upload of the layers after l* (Eq. 7)
        self.latest: dict[int, State] = {}
        #: the whole latest model of every client (phase 1 under all_clients_uniform)
        self.latest_models: dict[int, State] = {}
        if o.personal_layer:
            self._fix(o.personal_layer)

    # ------------------------------------------------------------------ phases
    def selecting(self, rnd: int) -> bool:
        return self.layer is None and rnd < self.selection_rounds

    def _fix(self, layer: str) -> None:
        """l* is chosen: from now on it stays on every client."""
        self.layer = layer
        self.ctx.store.make_personal(self._keys([layer]))

    def _keys(self, blocks: list[str], *, trainable: bool = False) -> list[str]:
        model = self.ctx.model
        wanted = set(blocks)
        params = {k for k, _ in model.named_parameters()}
        return [
            k
            for k in self.ctx.store.keys
            if model.block_of(k) in wanted and (not trainable or k in params)
        ]

    def pre_blocks(self) -> list[str]:
        assert self.layer is not None
        return self.blocks[: self.blocks.index(self.layer)]

    def post_blocks(self) -> list[str]:
        assert self.layer is not None
        return self.blocks[self.blocks.index(self.layer) + 1 :]

    # ------------------------------------------------------------ client side
    def recipe(self, rnd: int, client: int) -> Recipe:
        if not self.selecting(rnd) or self.options.granularity != "batch":
            return Recipe()
        return Recipe(observe=Observer(blocks=self.chain, fn=self.batch_vote))

    def _weight_keys(self) -> list[str]:
        """The personalized layer's weight matrices (the code's similarity excludes biases)."""
        assert self.layer is not None
        return [k for k in self._keys([self.layer], trainable=True) if k.endswith("weight")]

    def trained(self, rnd: int, client: int, result: Any) -> None:
        if not self.selecting(rnd):
            return
        if self.options.granularity == "batch":
            votes = [(int(v), bool(t)) for v, t in result.observations]
        else:
            votes = [self._post_train_vote(client, result.state)]
        self.votes.client_voted(client, votes)

    def _post_train_vote(self, client: int, state: State) -> tuple[int, bool]:
        """Alg. 2 lines 9-11: one vote from the trained model's outputs on the client's data."""
        data = self.ctx.data
        idx = data.clients[client].train
        model = self.ctx.model
        model.eval()
        with torch.no_grad():
            x, y = data.batch(idx)
            outputs = call_method(model, "block_outputs", state, x)
        return self.batch_vote(x, y, outputs)

    def upload(self, rnd: int, client: int, state: State, job: Any = None) -> State:
        sent = super().upload(rnd, client, state, job)
        if self.layer is not None and self.options.weighted_aggregation and self.post_blocks():
            # Alg. 3 line 9: φ goes up for the similarity only (never aggregated or sent back)
            if self.options.switch("similarity") == "parameters":
                signal = {k: state[k] for k in self._keys([self.layer], trainable=True)}
            else:
                signal = {k: job.start[k] - state[k] for k in self._weight_keys()}
            sent.update({f"similarity/{k}": v for k, v in signal.items()})
        return sent

    # ------------------------------------------------------------ server side
    def aggregate(self, rnd: int, uploads: dict[int, State], weights: dict[int, float]) -> None:
        if not uploads:
            return
        if self.layer is None:
            self._aggregate_selection(rnd, uploads, weights)
        else:
            self._aggregate_personalized(uploads, weights)

    def _aggregate_selection(
        self, rnd: int, uploads: dict[int, State], weights: dict[int, float]
    ) -> None:
        clients = sorted(uploads)
        self.votes.close_round(clients)
        keys = list(uploads[clients[0]])
        store = self.ctx.store
        if self.options.switch("phase1_weights") == "data_size":
            mixed = weighted_average(
                [uploads[c] for c in clients], [weights[c] for c in clients], keys
            )
        else:
            for c in clients:
                self.latest_models[c] = uploads[c]
            n = self.ctx.data.num_clients
            states = [self.latest_models.get(c, store.global_state) for c in range(n)]
            mixed = weighted_average(states, [1.0] * n, keys)
        store.global_state.update(mixed)
        if rnd + 1 >= self.selection_rounds and self.votes.winners:
            self.latest_models.clear()
            self._fix(self.votes.choice())

    def _aggregate_personalized(self, uploads: dict[int, State], weights: dict[int, float]) -> None:
        store = self.ctx.store
        clients = sorted(uploads)
        pre = [k for k in self._keys(self.pre_blocks()) if k in uploads[clients[0]]]
        post = [k for k in self._keys(self.post_blocks()) if k in uploads[clients[0]]]
        w = [weights[c] for c in clients]
        if not self.options.weighted_aggregation:
            store.global_state.update(
                weighted_average([uploads[c] for c in clients], w, pre + post)
            )
            return
        store.global_state.update(weighted_average([uploads[c] for c in clients], w, pre))
        if not post:  # l* = classifier: nothing after it (FedPer with a FedAvg body)
            return
        for c in clients:
            self.latest[c] = {k: uploads[c][k] for k in post}
        self.mixer.observe(uploads)
        phi = self.mixer.matrix
        if self.options.switch("phi_norm") == "linear":  # Eq. 7 over the clients the server holds
            for i in clients:
                store.set_tailored(i, self.mixer.mix_row(phi[i], self.latest.get, post))
            return
        # the code: a softmax over all N, a client never uploaded counting as the global model
        for i in clients:
            if not bool((torch.cat([phi[i, :i], phi[i, i + 1 :]]) > 0).any()):
                store.set_tailored(i, dict(self.latest[i]))  # the code: its own parameters
                continue
            held = lambda j: self.latest.get(j, store.global_state)  # noqa: E731
            store.set_tailored(i, self.mixer.mix_row(phi[i], held, post, how="softmax"))

    def _similarity(self, a: State, b: State, eps: float) -> torch.Tensor:
        keys = sorted(k for k in a if k.startswith("similarity/"))
        if self.options.switch("similarity") == "parameters":
            return cosine(a, b, keys, eps)
        return rowwise_cosine(a, b, keys, eps)  # the code: of the weight updates

    # -------------------------------------------------------------- reporting
    def round_metrics(self) -> dict[str, Any]:
        return {"fedcmd_layer": self.layer, **self.votes.round_metrics("fedcmd")}

    def summary_values(self) -> dict[str, Any]:
        return {
            "layer": self.layer,
            "selection_rounds": self.selection_rounds,
            "round_winner_counts": self.votes.counts(),
            "final_tie": self.votes.final_tie(),
            "reading": self.reading(),
            "variant": self.options.variant,
            "similarity": similarity_statistics(self.mixer.matrix, self.options.switch("phi_norm")),
        }

    def reading(self) -> dict[str, str]:
        """The choices the vote rests on (docs/methods/fedcmd.md, "The vote's open choices")."""
        o = self.options
        return {
            "fit": o.switch("fit"),
            "labels": o.labels,
            "w2": o.switch("w2"),
            "score": o.switch("score"),
            "granularity": o.granularity,
            "degenerate": o.degenerate,
            "ties": f"{o.switch('tie_break')}/{o.client_tie}/{o.round_tie}/{o.final_tie}",
        }

    def state_restored(self) -> None:
        if self.layer is not None and self.layer not in self.blocks:
            raise FedpartError(f"checkpoint names an unknown personalized layer {self.layer!r}")
        if self.layer is not None:
            self._fix(self.layer)

    def remote_limitation(self) -> str | None:
        if self.options.switch("similarity") == "weight_deltas":
            return (
                "similarity=weight_deltas (variant=code) takes the personal layer's update "
                "against its start values, which only the node holds; use "
                "algorithm.similarity=parameters"
            )
        return None
