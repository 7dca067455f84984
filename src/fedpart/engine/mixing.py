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
        first = states[0][key]
        step = max(1, MIX_BLOCK_ELEMENTS // max(1, len(states)))
        # a rank-one mix (an average) is a matrix-vector product, whose sum per coordinate does
        # not depend on the columns around it; a [m > 1, n] product's kernel may
        if w.shape[0] > 1 or first.numel() <= step:
            mixed = _mix_block([s[key] for s in states], w)
        else:
            # column blocks: the same products and sums per coordinate (bit for bit, tested)
            # without stacking every state's whole tensor — 1,000 uploads of a 2 MB layer would
            # otherwise take another 2 GB
            flat = torch.empty((w.shape[0], first.numel()), dtype=first.dtype, device=first.device)
            for a in range(0, first.numel(), step):
                flat[:, a : a + step] = _mix_block(
                    [s[key].reshape(-1)[a : a + step] for s in states], w
                )
            mixed = flat.reshape((w.shape[0], *first.shape))
        for i in range(w.shape[0]):
            out[i][key] = mixed[i]
    return out


#: :func:`mix_states` stacks at most about this many elements of the states at a time
MIX_BLOCK_ELEMENTS = 1 << 24


def _mix_block(tensors: Sequence[torch.Tensor], w: torch.Tensor) -> torch.Tensor:
    stacked = torch.stack(list(tensors))
    if stacked.is_floating_point():
        return mix(stacked, w.to(stacked.dtype))
    return mix(stacked.double(), w).round().to(stacked.dtype)


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
