"""The hyper-network itself (:class:`HyperNetwork`): client embeddings → MLP encoder →
[per-layer self-attention, Pa3dFL Eq. 9] → per-tensor decoders, with its diagnostics.

:mod:`fedpart.engine.hypernetwork` describes the whole (options, the network, its training
step); :mod:`fedpart.engine.hypernetwork_step` trains it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor, nn

from fedpart.models.width import slice_state
from fedpart.models.width_plan import IndexSets

__all__ = ["DECODER_INITS", "EMBED_INITS", "ENCODER_INITS", "SIMILARITIES", "HyperNetwork"]

#: how the client embeddings and the encoder may start (:class:`HyperNetwork`)
EMBED_INITS = ("unit", "normal")
ENCODER_INITS = ("default", "he")
#: the attention's scores: the paper's raw dot products, or cosines
SIMILARITIES = ("dot", "cosine")
#: how a method may start the decoders: at the model's initial tensors, or PyTorch's default
DECODER_INITS = ("model", "default")


def _safe(key: str) -> str:
    """A state key as a module name (``nn.ModuleDict`` refuses dots)."""
    return key.replace(".", "__")


class HyperNetwork(nn.Module):
    """Client embeddings → MLP encoder → [per-layer self-attention] → per-tensor decoders.

    ``targets`` maps each generated tensor's key to its full shape; ``layers`` maps a key to its
    layer (tensors of one layer share a temperature ``τ_l``; default: one layer per key).
    ``depth`` counts the encoder's linear layers: ``Linear(embed, hidden)`` followed by
    ``depth − 1`` times ``ReLU, Linear(hidden, hidden)`` (pFedHN's ``n_hidden`` is ``depth − 1``).

    Initialisation (the papers say only "randomly initialized"; ``docs/methods/pa3dfl.md``
    has the measurements behind each choice). ``embed_init``: ``"unit"`` draws the embeddings
    ``N(0, 1/d)`` (norm about 1), ``"normal"`` ``N(0, 1)`` (``nn.Embedding``'s default, the
    spec's suggestion; norm about ``√d``). ``encoder_init``: ``"default"`` is PyTorch's
    ``nn.Linear`` initialisation (pFedHN's code), under which every layer shrinks the
    embedding-dependent part of its output (by about 28× over four layers) while its bias adds
    a vector common to all clients, so the encoded embeddings of different clients nearly
    coincide; ``"he"`` draws the weights ``N(0, 2/fan_in)`` and zeroes the biases, so the encoded
    embeddings keep the embeddings' norm and differences. ``τ_l = tau``. With ``init`` (key →
    the model's initial tensor), each decoder's bias starts at that tensor, so every client
    starts at the model's usual initialisation instead of at the ``O(1/√hidden)`` entries a
    default decoder emits, and the decoders' weights are ``U(±√(3/n))`` with ``n`` the
    generated entries of all decoders together (``Σ_k W_kᵀW_k ≈ I``: a client's generated
    tensors differ from another's by about the distance of their decoder inputs). How far one
    step moves the generated tensors is measured, not assumed (:class:`HyperStep`): the bias
    path alone moves them by ``lr`` times the clients' mean update, each decoder's weight adds
    ``lr·‖x‖²`` of it (``x`` its input), which grows as training moves ``x``. ``seed`` fixes
    every draw.
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
        embed_init: str = "unit",
        encoder_init: str = "default",
        similarity: str = "dot",
        centred: bool = False,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if num_clients < 1 or embed_dim < 1 or hidden_dim < 1 or depth < 1 or tau <= 0:
            raise ValueError("num_clients, embed_dim, hidden_dim, depth and tau must be positive")
        if embed_init not in EMBED_INITS:
            raise ValueError(f"embed_init must be one of {EMBED_INITS}, got {embed_init!r}")
        if encoder_init not in ENCODER_INITS:
            raise ValueError(f"encoder_init must be one of {ENCODER_INITS}, got {encoder_init!r}")
        if similarity not in SIMILARITIES:
            raise ValueError(f"similarity must be one of {SIMILARITIES}, got {similarity!r}")
        self.similarity = similarity
        self.centred = centred
        self.shapes = {k: tuple(int(s) for s in shape) for k, shape in targets.items()}
        self.attention = attention
        layer_of = dict(layers or {k: k for k in self.shapes})
        self.layer_names = list(dict.fromkeys(layer_of[k] for k in self.shapes))
        self._layer_index = {k: self.layer_names.index(layer_of[k]) for k in self.shapes}
        generator = torch.Generator().manual_seed(seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            scale = 1.0 / math.sqrt(embed_dim) if embed_init == "unit" else 1.0
            self.embeddings = nn.Parameter(
                torch.randn(num_clients, embed_dim, generator=generator) * scale
            )
            modules: list[nn.Module] = [nn.Linear(embed_dim, hidden_dim)]
            for _ in range(depth - 1):
                modules += [nn.ReLU(), nn.Linear(hidden_dim, hidden_dim)]
            self.encoder = nn.Sequential(*modules)
            if encoder_init == "he":
                with torch.no_grad():
                    for layer in self.encoder:
                        if isinstance(layer, nn.Linear):
                            std = math.sqrt(2.0 / layer.in_features)
                            layer.weight.normal_(0.0, std, generator=generator)
                            layer.bias.zero_()
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

    def attention_weights(self, clients: Sequence[int], enc: Tensor | None = None) -> Tensor:
        """``softmax(s_i / τ_l)`` for every layer and client: ``[layers, m, N]``, each row
        summing to 1 (Eq. 9). ``s_i = E' e'_i`` (``similarity="dot"``, the paper's raw dot
        products) or the cosines of ``e'_i`` with every ``e'_j`` (``"cosine"``)."""
        enc = self.encoded() if enc is None else enc
        if self.centred:
            # scores of the clients' differences: the common part c of E' adds c·e'_j to every
            # row alike, which, as c grows, makes every client attend to the same one
            enc = enc - enc.mean(0, keepdim=True)
        if self.similarity == "cosine":
            enc = enc / torch.linalg.vector_norm(enc, dim=1, keepdim=True).clamp_min(1e-12)
        scores = enc[list(clients)] @ enc.t()
        return torch.softmax(scores[None] / self.tau[:, None, None], dim=-1)

    def forward(self, clients: Sequence[int]) -> dict[str, Tensor]:
        """Every target tensor of each listed client, full-sized: key → ``[m, *shape]``."""
        inputs = self.decoder_inputs(clients)
        return {
            k: self.decoders[_safe(k)](inputs[self._layer_index[k]]).view(len(clients), *shape)
            for k, shape in self.shapes.items()
        }

    def decoder_inputs(self, clients: Sequence[int]) -> list[Tensor]:
        """What each layer's decoders read for the listed clients, ``[layers][m, hidden]``: the
        attention-mixed embeddings ``e_i^(l)`` (Eq. 9), or each client's own ``e'_i``."""
        enc = self.encoded()
        n = enc.shape[0]
        if self.attention:
            if not self.centred:
                # the scores from an encoding of their own, as before issue 22: the same values,
                # and the gradients summed in the same order, so recorded runs rerun bit for bit
                return list(self.attention_weights(clients) @ enc)
            every = self.attention_weights(range(n), enc) @ enc  # [layers, N, hidden]
            centred = every - every.mean(1, keepdim=True)
            return list(centred[:, list(clients)])
        own = enc[list(clients)]
        if self.centred:
            own = own - enc.mean(0, keepdim=True)
        return [own] * len(self.layer_names)

    @torch.no_grad()
    def diagnostics(self) -> dict[str, dict[str, float] | float]:
        """Whether the hyper-network personalizes, over all ``N`` clients (no graph):

        - ``spread`` (per layer): the root-mean-square distance between two clients' generated
          full-size tensors of the layer, over the root-mean-square norm of one client's (0: every
          client gets the same tensors). Exact and without generating them: a decoder is affine,
          ``θ_i = W x_i + b``, so with ``G = Σ_k W_kᵀW_k`` over the layer's decoders the mean
          squared pairwise distance is ``2N/(N−1) · mean_i (x_i − x̄)ᵀ G (x_i − x̄)``.
        - with attention, ``entropy`` (per layer): the mean entropy of the attention rows
          ``softmax(s_i / τ_l)`` in nats, against ``entropy_max = ln N`` (uniform rows: no
          client attends to similar clients more than to the others), and ``tau``: ``τ_l``.
        """
        n = self.embeddings.shape[0]
        inputs = self.decoder_inputs(range(n))
        gram: dict[str, Tensor] = {}
        cross: dict[str, Tensor] = {}
        bias_sq: dict[str, Tensor] = {}
        for key in self.shapes:
            layer = self.layer_names[self._layer_index[key]]
            decoder = self.decoders[_safe(key)]
            w, b = decoder.weight, decoder.bias
            gram[layer] = gram.get(layer, 0) + w.t() @ w
            cross[layer] = cross.get(layer, 0) + w.t() @ b
            bias_sq[layer] = bias_sq.get(layer, 0) + b @ b
        spread: dict[str, Tensor] = {}
        for index, layer in enumerate(self.layer_names):
            x = inputs[index]
            g = gram[layer]
            centred = x - x.mean(0, keepdim=True)
            pairwise = ((centred @ g) * centred).sum(1).mean() * (2 * n / max(n - 1, 1))
            norm_sq = ((x @ g) * x).sum(1).mean() + 2 * (x @ cross[layer]).mean() + bias_sq[layer]
            spread[layer] = (pairwise / norm_sq.clamp_min(torch.finfo(x.dtype).tiny)).sqrt()
        values: dict[str, Tensor] = {"spread": torch.stack(list(spread.values()))}
        if self.attention:
            weights = self.attention_weights(range(n))
            entropy = -(weights * weights.clamp_min(torch.finfo(weights.dtype).tiny).log())
            values["entropy"] = entropy.sum(-1).mean(-1)
            # the weight of each client on itself, and the entropy of the mean row: rows that all
            # attend to one client have a low entropy too, but also a low mean-row entropy
            values["attention_self"] = weights.diagonal(dim1=1, dim2=2).mean(-1)
            mean_row = weights.mean(1)
            values["entropy_of_mean"] = -(
                mean_row * mean_row.clamp_min(torch.finfo(weights.dtype).tiny).log()
            ).sum(-1)
            values["tau"] = self.tau
        # one transfer to the host for all of them
        names = list(values)
        host = torch.cat([values[k].reshape(-1) for k in names]).double().cpu().tolist()
        out: dict[str, dict[str, float] | float] = {}
        start = 0
        for k in names:
            out[k] = dict(
                zip(self.layer_names, host[start : start + len(self.layer_names)], strict=True)
            )
            start += len(self.layer_names)
        if self.attention:
            out["entropy_max"] = math.log(n)
        return out

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
