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

This module holds the options methods share and the seed; the network lives in
:mod:`fedpart.engine.hypernetwork_model`, its training step in
:mod:`fedpart.engine.hypernetwork_step`, and every name is importable from here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from torch import Tensor

from fedpart.config import option
from fedpart.engine.hypernetwork_model import (
    DECODER_INITS,
    EMBED_INITS,
    ENCODER_INITS,
    SIMILARITIES,
    HyperNetwork,
)
from fedpart.engine.hypernetwork_step import HyperStep, hn_metrics, hypernetwork_step
from fedpart.models.width_plan import IndexSets
from fedpart.seeding import seed_for

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
    "step_on_uploads",
]

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


def step_on_uploads(
    hn: HyperNetwork,
    options: HyperNetworkOptions,
    clients: Sequence[int],
    uploads: Mapping[int, Mapping[str, Tensor]],
    index: Sequence[IndexSets] | None,
) -> HyperStep:
    """The round's :func:`hypernetwork_step` of a method with these options: towards the
    participants' uploaded values of the generated tensors (pruned by ``index``), with the
    options' learning rate, gradient clip and step limit, measured for the round's metrics."""
    targets = [{k: uploads[c][k] for k in hn.shapes} for c in clients]
    return hypernetwork_step(
        hn,
        clients,
        targets,
        index,
        options.hn_lr,
        max_grad_norm=options.hn_clip or None,
        max_gain=options.hn_max_gain or None,
        measure=True,
    )


def hypernetwork_seed(seed: int) -> int:
    """The seed of a run's hyper-network initialisation (independent of the model's)."""
    return seed_for(seed, "algorithm", _SEED_STREAM)
