"""Server-side hyper-networks: pFedHN's (Shamsian et al., 2021) and Pa3dFL's (Sec. 3.2, Eq. 7–10).

A :class:`HyperNetwork` maps learnable client embeddings ``e_1 … e_N`` to tensors of a client
model. An MLP encoder maps every embedding, ``E' = Encoder(E)``. Without attention (pFedHN) client
``i``'s tensors are decoded from its own ``e'_i``. With attention (Pa3dFL Eq. 9) each *layer*
``l`` first mixes the encoded embeddings of all clients,

    e_i^(l) = E'ᵀ softmax(E' e'_i / τ_l),

raw dot products (client ``i`` included), one learnable temperature ``τ_l`` per layer, then a
decoder per tensor, ``Decoder_l(e_i^(l))``, gives the full-size tensor; a method prunes it to the
client's width. With a single client the softmax is 1 and the two forms coincide.

:func:`hypernetwork_step` is the pFedHN rule both methods train it with (Eq. 7–8): after local
training, one SGD step on the hyper-network's parameters and every embedding on
``(1/m) Σ_i ½ ‖prune_i(h(i)) − θ_i‖²``, the clients' trained tensors ``θ_i`` held fixed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor, nn

from fedpart.engine.seeding import seed_for
from fedpart.models.width import IndexSets, slice_state

__all__ = ["HyperNetwork", "hypernetwork_seed", "hypernetwork_step"]

#: the key of the hyper-network's initialisation in the run's ``algorithm`` seed stream
_SEED_STREAM = 12


def hypernetwork_seed(seed: int) -> int:
    """The seed of a run's hyper-network initialisation (independent of the model's)."""
    return seed_for(seed, "algorithm", _SEED_STREAM)


def _safe(key: str) -> str:
    """A state key as a module name (``nn.ModuleDict`` refuses dots)."""
    return key.replace(".", "__")


class HyperNetwork(nn.Module):
    """Client embeddings → MLP encoder → [per-layer self-attention] → per-tensor decoders.

    ``targets`` maps each generated tensor's key to its full shape; ``layers`` maps a key to its
    layer (tensors of one layer share a temperature ``τ_l``; default: one layer per key).
    ``depth`` counts the encoder's linear layers: ``Linear(embed, hidden)`` followed by
    ``depth − 1`` times ``ReLU, Linear(hidden, hidden)`` (pFedHN's ``n_hidden`` is ``depth − 1``).

    Initialisation (the papers say only "randomly initialized"): embeddings ``N(0, 1/d)``
    (unit norm), the encoder PyTorch's default, ``τ_l = tau``. With ``init`` (key → the model's
    initial tensor), each decoder's bias starts at that tensor, so every client starts at the
    model's usual initialisation instead of at the ``O(1/√hidden)`` entries a default decoder
    emits, and the decoders' weights are ``U(±√(3/n))`` with ``n`` the generated entries of all
    decoders together (``Σ_k W_kᵀW_k ≈ I``). Then one step of learning rate 1 moves the generated
    tensors by about the clients' mean update (the bias path alone is exactly that) rather than
    by a multiple of it; with default decoders the Fashion-MNIST CNN diverged at the paper's HN
    learning rate 1.0. ``seed`` fixes every draw.
    """

    def __init__(
        self,
        num_clients: int,
        targets: Mapping[str, Sequence[int]],
        *,
        embed_dim: int,
        hidden_dim: int,
        depth: int,
        attention: bool,
        layers: Mapping[str, str] | None = None,
        tau: float = 1.0,
        init: Mapping[str, Tensor] | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if num_clients < 1 or embed_dim < 1 or hidden_dim < 1 or depth < 1 or tau <= 0:
            raise ValueError("num_clients, embed_dim, hidden_dim, depth and tau must be positive")
        self.shapes = {k: tuple(int(s) for s in shape) for k, shape in targets.items()}
        self.attention = attention
        layer_of = dict(layers or {k: k for k in self.shapes})
        self.layer_names = list(dict.fromkeys(layer_of[k] for k in self.shapes))
        self._layer_index = {k: self.layer_names.index(layer_of[k]) for k in self.shapes}
        generator = torch.Generator().manual_seed(seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            # N(0, 1/d): unit-norm embeddings, so that a step on the first encoder layer moves
            # its output by about the step itself (with N(0, 1) it is d times that)
            scale = 1.0 / math.sqrt(embed_dim)
            self.embeddings = nn.Parameter(
                torch.randn(num_clients, embed_dim, generator=generator) * scale
            )
            modules: list[nn.Module] = [nn.Linear(embed_dim, hidden_dim)]
            for _ in range(depth - 1):
                modules += [nn.ReLU(), nn.Linear(hidden_dim, hidden_dim)]
            self.encoder = nn.Sequential(*modules)
            self.decoders = nn.ModuleDict(
                {_safe(k): nn.Linear(hidden_dim, math.prod(s)) for k, s in self.shapes.items()}
            )
        # τ_l > 0 through its logarithm, so that an SGD step cannot flip its sign
        self.log_tau = nn.Parameter(
            torch.full((len(self.layer_names),), math.log(tau)), requires_grad=attention
        )
        if init is not None:
            self._start_at(init, generator)

    @torch.no_grad()
    def _start_at(self, init: Mapping[str, Tensor], generator: torch.Generator) -> None:
        # every decoder's weight entries ~ U(±√(3/n)), n the number of generated entries of all
        # decoders together: Σ_k W_kᵀW_k ≈ I, so a step through the shared encoder moves the
        # generated tensors by about the step itself, not by one step per decoder
        total = sum(math.prod(s) for s in self.shapes.values())
        bound = math.sqrt(3.0 / total)
        for key in self.shapes:
            decoder = self.decoders[_safe(key)]
            decoder.bias.copy_(init[key].detach().reshape(-1).to(decoder.bias.dtype))
            decoder.weight.uniform_(-bound, bound, generator=generator)

    # ------------------------------------------------------------------ forward
    @property
    def tau(self) -> Tensor:
        """The temperatures ``τ_l``, one per layer (in :attr:`layer_names` order)."""
        return self.log_tau.exp()

    def encoded(self) -> Tensor:
        """``E'``: every client's encoded embedding, ``[N, hidden]``."""
        return self.encoder(self.embeddings)

    def attention_weights(self, clients: Sequence[int]) -> Tensor:
        """``softmax(E' e'_i / τ_l)`` for every layer and client: ``[layers, m, N]``, each row
        summing to 1 (Eq. 9)."""
        enc = self.encoded()
        scores = enc[list(clients)] @ enc.t()
        return torch.softmax(scores[None] / self.tau[:, None, None], dim=-1)

    def forward(self, clients: Sequence[int]) -> dict[str, Tensor]:
        """Every target tensor of each listed client, full-sized: key → ``[m, *shape]``."""
        enc = self.encoded()
        if self.attention:
            mixed = self.attention_weights(clients) @ enc  # [layers, m, hidden]
            inputs = [mixed[self._layer_index[k]] for k in self.shapes]
        else:
            own = enc[list(clients)]
            inputs = [own] * len(self.shapes)
        return {
            k: self.decoders[_safe(k)](x).view(len(clients), *shape)
            for (k, shape), x in zip(self.shapes.items(), inputs, strict=True)
        }

    def generate(
        self, clients: Sequence[int], index: Sequence[IndexSets] | None = None
    ) -> list[dict[str, Tensor]]:
        """Each listed client's tensors, pruned by its index sets (``models.width`` form; none:
        full-sized), without a graph."""
        with torch.no_grad():
            out = self(clients)
        return [
            slice_state({k: v[pos] for k, v in out.items()}, index[pos] if index else {})
            for pos in range(len(clients))
        ]


def hypernetwork_step(
    hn: HyperNetwork,
    clients: Sequence[int],
    trained: Sequence[Mapping[str, Tensor]],
    index: Sequence[IndexSets] | None,
    lr: float,
) -> float:
    """One pFedHN step (Pa3dFL Eq. 7–8): regenerate the clients' tensors with a graph, and move
    the hyper-network's parameters, temperatures and every embedding by ``−lr`` times the
    gradient of ``(1/m) Σ_i ½ Σ_k ‖prune_i(h(i)_k) − θ_i,k‖²`` (``θ`` = ``trained[i]``, fixed).
    Pruned-away entries get no gradient; through the attention, unsampled clients' embeddings
    do. Returns the loss before the step."""
    if not clients:
        return 0.0
    generated = hn(clients)
    loss = generated[next(iter(generated))].new_zeros(())
    for pos, target in enumerate(trained):
        mine = {k: generated[k][pos] for k in target}
        pruned = slice_state(mine, index[pos]) if index else mine
        for key, value in target.items():
            loss = loss + 0.5 * (pruned[key] - value.detach().to(pruned[key].dtype)).pow(2).sum()
    loss = loss / len(clients)
    params = [p for p in hn.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    with torch.no_grad():
        for p, g in zip(params, grads, strict=True):
            if g is not None:
                p.sub_(g, alpha=lr)
    return float(loss.detach())
