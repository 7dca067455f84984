"""pFedHN (Shamsian et al., ICML 2021): a server hyper-network generates each client's model."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from fedpart.algorithms.base import Algorithm
from fedpart.config import option
from fedpart.engine import method_state as saved
from fedpart.engine.hypernetwork import (
    ENCODER_INITS,
    HyperNetwork,
    HyperNetworkOptions,
    hn_metrics,
    hypernetwork_seed,
    step_on_uploads,
)
from fedpart.registry import register

State = dict[str, torch.Tensor]


@dataclasses.dataclass
class PFedHNOptions(HyperNetworkOptions):
    embed_dim: int = option(5, "client-embedding size", ge=1)
    hidden_dim: int = option(100, "hyper-network hidden size", ge=1)
    hidden_layers: int = option(
        2, "hidden layers of the encoder after its first linear layer", ge=0
    )

    encoder_init: str = option(
        "default",
        "HN encoder: PyTorch's default (collapses clients) or he (keeps them)",
        choices=ENCODER_INITS,
    )
    centred: bool = option(
        False, "decoders read e'_i minus its mean over all clients (bias: common)"
    )


@register
class PFedHN(Algorithm):
    """Each round the server generates θ_i = h(φ, e_i) for every participant, which trains it
    locally and returns it; the server takes one SGD step on (φ, e) of
    ``(1/m) Σ_i ½‖h(φ, e_i) − θ_i^trained‖²`` (the pFedHN rule, shared with Pa3dFL through
    ``engine.hypernetwork``). A client is evaluated with the model generated for it.
    Capacity-unaware: every client trains the model cut to ``p_min``. ``docs/methods/pfedhn.md``."""

    name = "pfedhn"
    summary = "A server hyper-network generates each client's whole model (pFedHN rule)."
    Options = PFedHNOptions
    backends = ("sequential", "flower")
    has_global_model = False  # the server holds a hyper-network, not a model
    checkpointed = (saved.Module("hn"), saved.Value("_hn_loss"))

    def setup(self) -> None:
        o = self.options
        state = self.ctx.store.global_state
        keys = [k for k, _ in self.ctx.model.named_parameters()]
        self.hn = HyperNetwork(
            self.ctx.data.num_clients,
            {k: state[k].shape for k in keys},
            embed_dim=o.embed_dim,
            hidden_dim=o.hidden_dim,
            depth=o.hidden_layers + 1,
            attention=False,
            init={k: state[k] for k in keys},
            embed_init=o.embed_init,
            encoder_init=o.encoder_init,
            centred=o.centred,
            seed=hypernetwork_seed(self.ctx.cfg.seed),
        ).to(self.ctx.device)
        self._hn_loss: float | None = None
        self._hn_row: dict[str, Any] = {}  # the last hyper-network step's measurements

    def personal_keys(self) -> set[str]:
        # buffers (BatchNorm statistics) are not generated: they stay on their client
        return {k for k, _ in self.ctx.model.named_buffers()} | super().personal_keys()

    def start_state(self, rnd: int, client: int) -> State:
        return {**self.ctx.store.client_state(client), **self.hn.generate([client])[0]}

    def eval_state(self, client: int) -> State:
        return self.start_state(0, client)

    def aggregate(self, rnd: int, uploads: dict[int, State], weights: dict[int, float]) -> None:
        clients = sorted(uploads)
        step = step_on_uploads(self.hn, self.options, clients, uploads, None)
        self._hn_loss = step.loss
        self._hn_row = hn_metrics(self.hn, step)

    def round_metrics(self) -> dict[str, Any]:
        row = {} if self._hn_loss is None else {"hn_loss": self._hn_loss}
        row.update(self._hn_row)
        self._hn_row = {}
        return row

    def summary_values(self) -> dict[str, Any]:
        # how far apart the generated models of two clients are at the end, per tensor
        return {"spread": self.hn.diagnostics()["spread"]}
