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
    w = w / w.sum()
    out: dict[str, torch.Tensor] = {}
    for key in keys:
        stacked = torch.stack([s[key] for s in states])
        if stacked.is_floating_point():
            out[key] = mix(stacked, w[None].to(stacked.dtype))[0]
        else:
            out[key] = mix(stacked.double(), w[None])[0].round().to(stacked.dtype)
    return out


def tensor_bytes(tensors: Mapping[str, torch.Tensor]) -> int:
    """Bytes on the wire of a dict of tensors (their raw payload)."""
    return sum(t.numel() * t.element_size() for t in tensors.values())
