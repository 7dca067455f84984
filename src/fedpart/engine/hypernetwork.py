"""Server-side hyper-networks: pFedHN's (Shamsian et al., 2021) and Pa3dFL's (Sec. 3.2, Eq. 7–10).

A :class:`HyperNetwork` maps learnable client embeddings ``e_1 … e_N`` to tensors of a client
model. An MLP encoder maps every embedding, ``E' = Encoder(E)``. Without attention (pFedHN) client
``i``'s tensors are decoded from its own ``e'_i``. With attention (Pa3dFL Eq. 9) each *layer*
``l`` first mixes the encoded embeddings of all clients,

    e_i^(l) = E'ᵀ softmax(E' e'_i / τ_l),

raw dot products (client ``i`` included), one learnable temperature ``τ_l`` per layer, then a
decoder per tensor, ``Decoder_l(e_i^(l))``, gives the full-size tensor; a method prunes it to the
client's width. With a single client the softmax is 1 and the two forms coincide. With
``centred`` the scores and the decoders' inputs are taken from the encodings minus their mean
over all clients, so that the decoders' biases carry what is common and their weights what
differs (``docs/methods/pa3dfl.md`` has the measurements behind each departure).

:func:`hypernetwork_step` is the pFedHN rule both methods train it with (Eq. 7–8): after local
training, one SGD step on the hyper-network's parameters and every embedding on
``(1/m) Σ_i ½ ‖prune_i(h(i)) − θ_i‖²``, the clients' trained tensors ``θ_i`` held fixed; it
measures how far the step moved the generated tensors against what the clients asked
(:class:`HyperStep`) and can shorten it to that. :meth:`HyperNetwork.diagnostics` says whether
the clients' tensors differ at all (the attention's entropy, the temperatures, the spread of
the generated tensors); :func:`hn_metrics` makes a round's ``metrics.jsonl`` entries of both.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from fedpart.config import option
from fedpart.engine.seeding import seed_for
from fedpart.models.width import IndexSets, embed_state, index_masks, slice_state

__all__ = [
    "HyperNetwork",
    "HyperNetworkOptions",
    "DECODER_INITS",
    "EMBED_INITS",
    "ENCODER_INITS",
    "SIMILARITIES",
    "HyperStep",
    "hn_metrics",
    "hypernetwork_seed",
    "hypernetwork_step",
]

#: how the client embeddings and the encoder may start (:class:`HyperNetwork`)
EMBED_INITS = ("unit", "normal")
ENCODER_INITS = ("default", "he")
#: the attention's scores: the paper's raw dot products, or cosines
SIMILARITIES = ("dot", "cosine")
#: how a method may start the decoders: at the model's initial tensors, or PyTorch's default
DECODER_INITS = ("model", "default")

#: the key of the hyper-network's initialisation in the run's ``algorithm`` seed stream
_SEED_STREAM = 12


@dataclasses.dataclass
class HyperNetworkOptions:
    """The ``algorithm.*`` options every method with a server hyper-network shares (pFedHN,
    Pa3dFL): its step (:func:`hypernetwork_step`) and how its client embeddings start. A
    method's options dataclass derives from it and adds the sizes and switches it sets itself."""

    hn_lr: float = option(
        1.0, "hyper-network learning rate γ (Eq. 8; one SGD step per round)", ge=0
    )
    hn_max_gain: float = option(
        1.0, "HN step moves θ at most this many times the clients' updates (0: no limit)", ge=0
    )
    hn_clip: float = option(0.0, "clip the HN gradient to this global norm (0: none)", ge=0)
    embed_init: str = option(
        "unit",
        "client embeddings N(0, 1/d) (unit) or N(0, 1) (normal: the spec's)",
        choices=EMBED_INITS,
    )


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


@dataclasses.dataclass(frozen=True)
class HyperStep:
    """What one :func:`hypernetwork_step` did.

    ``loss``: ``L_HN`` before the step. ``grad_norm``: the gradient's global norm before any
    clipping. ``scale``: the factor the step limit applied to it (1: none). With ``measure``
    (or a limit), how the step taken moved the participants' generated tensors ``Δ_i`` against
    what they asked for, ``u_i = θ_i − prune_i(h(i))`` (a coordinate a client does not hold
    counts for neither; means are over the clients that hold a coordinate):

    - ``gain``: ``⟨Δ̄, ū⟩ / ‖ū‖²``, the step along the clients' mean update (1: the generated
      tensors moved by exactly the mean update, as FedAvg's server step would move a model);
    - ``gain_personal``: ``Σ_i ⟨Δ_i − Δ̄, u_i − ū⟩ / Σ_i ‖u_i − ū‖²``, the step along what each
      client asked for beyond the mean (0: every client is moved alike, nothing is personal);
    - ``move``: ``√(Σ_i ‖Δ_i‖² / Σ_i ‖u_i‖²)``, how far the tensors moved against how far the
      clients moved them.
    """

    loss: float
    grad_norm: float
    scale: float = 1.0
    gain: float | None = None
    gain_personal: float | None = None
    move: float | None = None


def _padded(
    values: Sequence[Mapping[str, Tensor]], index: Sequence[IndexSets] | None, shapes: Mapping
) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """Clients' (possibly pruned) tensors in full shape, zero where not held, and the masks."""
    out: dict[str, list[Tensor]] = {}
    held: dict[str, list[Tensor]] = {}
    for pos, value in enumerate(values):
        sets = index[pos] if index else {}
        zeros = {k: v.new_zeros(shapes[k]) for k, v in value.items()}
        for key, full in embed_state(zeros, value, sets).items():
            out.setdefault(key, []).append(full)
        for key, mask in index_masks(zeros, sets).items():
            held.setdefault(key, []).append(mask)
    return (
        {k: torch.stack(v) for k, v in out.items()},
        {k: torch.stack(v) for k, v in held.items()},
    )


def _gains(
    asked: dict[str, Tensor], moved: dict[str, Tensor], held: dict[str, Tensor]
) -> tuple[Tensor, Tensor, Tensor]:
    """``gain``, ``gain_personal`` and ``move`` of :class:`HyperStep` as 0-d tensors."""
    dot = common = dev_dot = dev_sq = moved_sq = asked_sq = 0
    for key, u in asked.items():
        d, m = moved[key], held[key]
        count = m.sum(0).clamp_min(1)
        u_mean, d_mean = u.sum(0) / count, d.sum(0) / count
        dot = dot + (u_mean * d_mean).sum()
        common = common + u_mean.pow(2).sum()
        u_dev = torch.where(m, u - u_mean, 0.0)
        d_dev = torch.where(m, d - d_mean, 0.0)
        dev_dot = dev_dot + (u_dev * d_dev).sum()
        dev_sq = dev_sq + u_dev.pow(2).sum()
        moved_sq = moved_sq + d.pow(2).sum()
        asked_sq = asked_sq + u.pow(2).sum()
    tiny = torch.finfo(torch.float32).tiny
    return (
        dot / common.clamp_min(tiny),
        dev_dot / dev_sq.clamp_min(tiny),
        (moved_sq / asked_sq.clamp_min(tiny)).sqrt(),
    )


def _pruned(
    out: Mapping[str, Tensor], pos: int, keys: Sequence[str], index: Sequence[IndexSets] | None
) -> dict[str, Tensor]:
    """Client ``pos``'s tensors ``keys`` of a generated batch, pruned to its index sets."""
    mine = {k: out[k][pos] for k in keys}
    return slice_state(mine, index[pos]) if index else mine


#: how many times a limited step is shortened and measured again (a fixed number: the decision
#: stays on the device, so a round reads it back once, whatever the step needed)
LIMIT_TRIES = 4


def hypernetwork_step(
    hn: HyperNetwork,
    clients: Sequence[int],
    trained: Sequence[Mapping[str, Tensor]],
    index: Sequence[IndexSets] | None,
    lr: float,
    *,
    max_grad_norm: float | None = None,
    max_gain: float | None = None,
    measure: bool = False,
) -> HyperStep:
    """One pFedHN step (Pa3dFL Eq. 7–8): regenerate the clients' tensors with a graph, and move
    the hyper-network's parameters, temperatures and every embedding by ``−lr`` times the
    gradient of ``(1/m) Σ_i ½ Σ_k ‖prune_i(h(i)_k) − θ_i,k‖²`` (``θ`` = ``trained[i]``, fixed).
    Pruned-away entries get no gradient; through the attention, unsampled clients' embeddings
    do.

    ``max_grad_norm``: the gradient is first scaled down to that global norm if it is longer
    (pFedHN's code clips at 50). ``max_gain``: the step is shortened until it moves the
    participants' generated tensors no further than ``max_gain`` times what they asked, both
    along their mean update and in total (:class:`HyperStep`'s ``gain`` and ``move``; 1: never
    further than FedAvg's server step would go): after the step the tensors are generated again
    and the step is scaled by ``max_gain`` over the larger of the two (a tenth if they are not
    finite), up to :data:`LIMIT_TRIES` times. ``measure``: report the gains of the step taken.
    Returns the :class:`HyperStep`; its numbers reach the host in one transfer."""
    if not clients:
        return HyperStep(0.0, 0.0)
    keys = [list(target) for target in trained]
    generated = hn(clients)
    loss = generated[next(iter(generated))].new_zeros(())
    before: list[dict[str, Tensor]] = []
    for pos, target in enumerate(trained):
        pruned = _pruned(generated, pos, keys[pos], index)
        before.append({k: v.detach() for k, v in pruned.items()})
        for key, value in target.items():
            loss = loss + 0.5 * (pruned[key] - value.detach().to(pruned[key].dtype)).pow(2).sum()
    loss = loss / len(clients)
    params = [p for p in hn.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    moves = [(p, g) for p, g in zip(params, grads, strict=True) if g is not None]
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for _, g in moves]))
    tiny = torch.finfo(norm.dtype).tiny
    with torch.no_grad():
        if max_grad_norm is not None:
            # a tensor factor, never a host read: min(1, max / ‖g‖)
            clip = (max_grad_norm / norm.clamp_min(tiny)).clamp(max=1.0)
            moves = [(p, g * clip) for p, g in moves]
        for p, g in moves:
            p.sub_(g, alpha=lr)
        scale = norm.new_ones(())
        values = [loss.detach(), norm]
        if max_gain is None and not measure:
            return HyperStep(*torch.stack([*values, scale]).double().cpu().tolist())
        asked, held = _padded(
            [
                {k: v.detach().to(before[pos][k].dtype) - before[pos][k] for k, v in t.items()}
                for pos, t in enumerate(trained)
            ],
            index,
            hn.shapes,
        )

        def gains() -> tuple[Tensor, Tensor, Tensor]:
            after = hn(clients)
            moved = [
                {k: v - before[pos][k] for k, v in _pruned(after, pos, keys[pos], index).items()}
                for pos in range(len(clients))
            ]
            return _gains(asked, _padded(moved, index, hn.shapes)[0], held)

        gain, personal, move = gains()
        if max_gain is not None:
            for _ in range(LIMIT_TRIES):
                excess = torch.maximum(gain, move) / max_gain
                excess = torch.where(torch.isfinite(excess), excess, torch.full_like(excess, 10.0))
                new = torch.where(excess > 1.0, scale / excess.clamp_min(tiny), scale)
                for p, g in moves:  # from −scale·lr·g to −new·lr·g
                    p.add_(g * (scale - new), alpha=lr)
                scale = new
                gain, personal, move = gains()
        values += [scale, gain, personal, move]
    host = torch.stack([v.reshape(()).double() for v in values]).cpu().tolist()
    if not measure:
        host = host[:3]
    return HyperStep(*host)


def hn_metrics(hn: HyperNetwork, step: HyperStep) -> dict[str, Any]:
    """A round's ``metrics.jsonl`` entries of a hyper-network method: the step's gradient norm
    and gains (:class:`HyperStep`) and :meth:`HyperNetwork.diagnostics`, as ``hn_*`` keys
    (per-layer values as ``{layer: value}``)."""
    row: dict[str, Any] = {"hn_grad_norm": step.grad_norm, "hn_step_scale": step.scale}
    if step.gain is not None:
        row["hn_gain"] = step.gain
        row["hn_gain_personal"] = step.gain_personal
        row["hn_move"] = step.move
    row.update({f"hn_{k}": v for k, v in hn.diagnostics().items()})
    return row
