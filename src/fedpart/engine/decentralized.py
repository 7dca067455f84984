"""The decentralized round: every client trains, then (or first) exchanges along the round's graph.

There is no server. Each client's whole model lives in the state store; what a method sends
travels along the directed edges of the round's :class:`~fedpart.topology.Graph` and is counted
per edge by :class:`Exchange`. Mixing is synchronous: it reads a snapshot of every client taken
before anyone changes, so the order in which clients are visited never matters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from fedpart.engine.mixing import mix, tensor_bytes

State = dict[str, torch.Tensor]

#: columns of one key mixed at a time by :func:`push_sum`
PUSH_SUM_CHUNK = 8192


class Exchange:
    """One round's messages: bytes sent and received per client, and the number of messages."""

    def __init__(self, num_clients: int) -> None:
        self.sent = np.zeros(num_clients, dtype=np.int64)
        self.received = np.zeros(num_clients, dtype=np.int64)
        self.messages = 0

    def send(self, sender: int, receiver: int, nbytes: int) -> None:
        """Count one message of ``nbytes`` on the edge ``sender → receiver``."""
        if sender == receiver or nbytes <= 0:
            return
        self.sent[sender] += nbytes
        self.received[receiver] += nbytes
        self.messages += 1

    def send_along(self, weights: torch.Tensor, nbytes: Sequence[int] | int) -> None:
        """Count the messages a mixing matrix implies: ``sender j → receiver i`` for every
        off-diagonal ``W[i, j] ≠ 0``, each carrying ``nbytes[j]`` bytes."""
        w = weights.detach().cpu().numpy()
        receivers, senders = np.nonzero(w)
        for i, j in zip(receivers, senders, strict=True):
            if i != j:
                self.send(int(j), int(i), nbytes if isinstance(nbytes, int) else int(nbytes[j]))

    def row(self) -> dict[str, int]:
        """The round's accounting columns."""
        return {
            "up_bytes": int(self.sent.sum()),
            "down_bytes": int(self.received.sum()),
            "messages": int(self.messages),
            "max_client_bytes": int(max(self.sent.max(initial=0), self.received.max(initial=0))),
        }


def stack(states: Sequence[Mapping[str, torch.Tensor]], key: str) -> torch.Tensor:
    """``[m, ...]``: one key of every client's state."""
    return torch.stack([s[key] for s in states])


def gossip(
    states: Sequence[Mapping[str, torch.Tensor]], weights: torch.Tensor, keys: Sequence[str]
) -> list[State]:
    """``new_i[k] = Σ_j W[i, j] · states_j[k]`` for every key in ``keys`` (others untouched).

    Integer tensors (BatchNorm's batch counters) are mixed in float64 and rounded.
    """
    out = [dict(s) for s in states]
    for key in keys:
        stacked = stack(states, key)
        if stacked.is_floating_point():
            mixed = mix(stacked, weights.to(stacked.dtype))
        else:
            mixed = mix(stacked.double(), weights).round().to(stacked.dtype)
        for i, row in enumerate(mixed):
            out[i][key] = row
    return out


def push_sum(
    states: Sequence[Mapping[str, torch.Tensor]],
    mu: torch.Tensor,
    weights: torch.Tensor,
    keys: Sequence[str],
) -> tuple[list[State], torch.Tensor]:
    """One push-sum step on de-biased states ``z_i`` with push-sum weights ``μ_i``.

    With column-stochastic ``P`` (``weights``): ``u_i = μ_i z_i`` is pushed,
    ``u'_i = Σ_j P[i, j] u_j``, ``μ'_i = Σ_j P[i, j] μ_j``, and ``z'_i = u'_i / μ'_i`` is returned
    with ``μ'``. Σ_i μ_i and Σ_i u_i are conserved exactly in exact arithmetic.
    """
    # μ and P are brought to the states' device (a graph's matrix is made on the host)
    device = states[0][keys[0]].device if keys else mu.device
    mu64 = mu.to(device=device, dtype=torch.float64)
    w64 = weights.to(device=device, dtype=torch.float64)
    new_mu = w64 @ mu64
    out = [dict(s) for s in states]
    for key in keys:
        stacked = stack(states, key)
        dtype = stacked.dtype
        flat = stacked.reshape(stacked.shape[0], -1)
        result = torch.empty_like(flat)
        # Column chunks bound the float64 temporaries (a whole layer of 100 clients in float64,
        # several times over, was gigabytes); each element's sum over senders is unchanged.
        for lo in range(0, flat.shape[1], PUSH_SUM_CHUNK):
            cols = flat[:, lo : lo + PUSH_SUM_CHUNK].to(torch.float64) * mu64[:, None]
            debiased = (w64 @ cols) / new_mu[:, None]
            if not dtype.is_floating_point:
                debiased = debiased.round()
            result[:, lo : lo + PUSH_SUM_CHUNK] = debiased.to(dtype)
        for i, row in enumerate(result.reshape(stacked.shape)):
            out[i][key] = row
    return out, new_mu


def keys_bytes(state: Mapping[str, torch.Tensor], keys: Sequence[str]) -> int:
    """Bytes of ``keys`` of one state."""
    return tensor_bytes({k: state[k] for k in keys})
