"""Aggregation as mixing: ``new[i] = Σ_j W[i, j] · old[j]`` over the stacked tensors of one key."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch


def mix(stacked: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Apply a mixing matrix ``weights`` [m, n] to ``stacked`` [n, ...]; returns [m, ...]."""
    flat = stacked.reshape(stacked.shape[0], -1)
    out = weights.to(flat.dtype) @ flat
    return out.reshape((weights.shape[0], *stacked.shape[1:]))


def weighted_average(
    states: Sequence[Mapping[str, torch.Tensor]], weights: Sequence[float], keys: Sequence[str]
) -> dict[str, torch.Tensor]:
    """Σ_j w_j · state_j[key] / Σ_j w_j for each key: one row of a mixing matrix.

    Integer tensors (e.g. BatchNorm's ``num_batches_tracked``) are averaged and rounded.
    """
    w = torch.tensor([float(x) for x in weights], dtype=torch.float64)
    return mix_states(states, (w / w.sum())[None], keys)[0]


def mix_states(
    states: Sequence[Mapping[str, torch.Tensor]], weights: torch.Tensor, keys: Sequence[str]
) -> list[dict[str, torch.Tensor]]:
    """Row i of the result is Σ_j W[i, j] · states[j] for each key: a general mixing matrix
    ``weights`` [m, n] (float64) over n states, giving m mixed states. Per-client server
    aggregation (pFedSim, FedCMD, FedFomo, FedAP) is one such matrix, row i being what client i
    receives; FedAvg is the rank-one case. Integer tensors are mixed in float64 and rounded.
    """
    w = weights.to(torch.float64)
    out: list[dict[str, torch.Tensor]] = [{} for _ in range(w.shape[0])]
    for key in keys:
        stacked = torch.stack([s[key] for s in states])
        if stacked.is_floating_point():
            mixed = mix(stacked, w.to(stacked.dtype))
        else:
            mixed = mix(stacked.double(), w).round().to(stacked.dtype)
        for i in range(w.shape[0]):
            out[i][key] = mixed[i]
    return out


def normalize_rows(weights: torch.Tensor, how: str = "linear") -> torch.Tensor:
    """Row-stochastic weights from non-negative scores: ``linear`` divides each row by its sum,
    ``softmax`` takes exp then divides (pFedSim's and FedCMD's code). A row of zeros under
    ``linear`` is left at zero (the caller decides what such a client receives)."""
    w = weights.to(torch.float64)
    if how == "softmax":
        e = torch.exp(w)
        return e / e.sum(1, keepdim=True)
    if how != "linear":
        raise ValueError(f"unknown normalisation {how!r}")
    sums = w.sum(1, keepdim=True)
    return torch.where(sums > 0, w / sums.clamp_min(1e-300), torch.zeros_like(w))


def tensor_bytes(tensors: Mapping[str, torch.Tensor]) -> int:
    """Bytes on the wire of a dict of tensors (their raw payload)."""
    return sum(t.numel() * t.element_size() for t in tensors.values())
