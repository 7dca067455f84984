"""Per-client aggregation by similarity: the server's N×N matrix of how alike clients are, and
each client's own aggregate as a normalised row of it.

pFedSim (classifier cosines) and FedCMD's phase 2 (personalized-layer cosines) differ only in
the similarity they measure, how a row becomes weights and which states the server holds; the
bookkeeping is :class:`SimilarityMixer`'s. A method's warm-up (rounds of plain FedAvg before the
per-client aggregation starts) is :func:`warmup_rounds`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from fedpart.engine.mixing import mix_states, normalize_rows

State = dict[str, torch.Tensor]


def cosine(a: State, b: State, keys: Sequence[str], eps: float) -> torch.Tensor:
    """a·b / (‖a‖‖b‖ + ε) of the tensors ``keys`` of two states, flattened into one vector each
    (FedCMD Eq. 8): a float64 0-d tensor where the states are."""
    va = torch.cat([a[k].flatten() for k in keys]).double()
    vb = torch.cat([b[k].flatten() for k in keys]).double()
    return va @ vb / (va.norm() * vb.norm() + eps)


def rowwise_cosine(a: State, b: State, keys: Sequence[str], eps: float) -> torch.Tensor:
    """The mean over ``keys`` of the mean row-wise cosine (one row per output unit) of two
    states' tensors (FedCMD's code, on weight updates): a float64 0-d tensor."""
    sims = []
    for k in keys:
        ra, rb = a[k].double().flatten(1), b[k].double().flatten(1)
        sims.append(torch.nn.functional.cosine_similarity(ra, rb, dim=-1, eps=eps).mean())
    return torch.stack(sims).mean()


def clipped(t: torch.Tensor) -> torch.Tensor:
    """``max(0, t)`` as Python's ``max(0.0, float(t))`` gives it (NaN and −0 become 0), on the
    device: a similarity clipped at 0."""
    return torch.where(t > 0, t, torch.zeros_like(t))


def warmup_rounds(rounds: int, ratio: float, fixed: int | None) -> int:
    """The rounds of warm-up: ``fixed`` when given, else ``int(ratio · rounds)`` (FL-bench)."""
    return int(rounds * ratio) if fixed is None else fixed


class SimilarityMixer:
    """A persistent similarity matrix ``S`` (``I`` at the start, float64 on ``device``) and
    client ``i``'s aggregate ``Σ_j W_ij x_j`` with ``W_i`` a normalised row of it.

    ``similarity(a, b)`` measures two clients' uploads (symmetric, ≥ 0) as a 0-d tensor where
    the uploads are; :meth:`observe` sets ``S_ij = S_ji`` for every pair of a round's
    participants, all at once on the device (nothing is read back). Pairs that never met keep
    their last value."""

    def __init__(
        self,
        num_clients: int,
        device: torch.device,
        similarity: Callable[[State, State], torch.Tensor],
    ) -> None:
        self.matrix = torch.eye(num_clients, dtype=torch.float64, device=device)
        self.similarity = similarity

    def observe(self, uploads: Mapping[int, State]) -> None:
        """Set the similarity of every pair of this round's participants from their uploads."""
        clients = sorted(uploads)
        pairs = [(i, j) for a, i in enumerate(clients) for j in clients[a + 1 :]]
        if not pairs:
            return
        values = torch.stack([self.similarity(uploads[i], uploads[j]) for i, j in pairs])
        rows, cols = torch.tensor(pairs, device=self.matrix.device).T
        values = values.to(self.matrix.dtype)
        self.matrix[rows, cols] = values
        self.matrix[cols, rows] = values

    @staticmethod
    def mix_row(
        row: torch.Tensor,
        state_of: Callable[[int], State | None],
        keys: Sequence[str],
        how: str | None = "linear",
    ) -> State:
        """``Σ_j w_j · state_of(j)`` over the clients ``j`` whose state the server holds
        (``state_of(j)`` is not None), with ``w`` the row normalised over them: ``linear``
        (entries ≤ 0 skipped: they weigh nothing), ``softmax`` (every entry weighs), or
        ``None`` for a row that is weights already (entries ≤ 0 skipped)."""
        every = range(row.shape[0])
        candidates = every if how == "softmax" else [j for j in every if row[j] > 0]
        held = [(j, s) for j in candidates if (s := state_of(j)) is not None]
        index = [j for j, _ in held]
        weights = row[index][None] if how is None else normalize_rows(row[index][None], how)
        return mix_states([s for _, s in held], weights, keys)[0]


def similarity_statistics(phi: torch.Tensor, norm: str) -> dict[str, Any]:
    """How far the similarity-weighted aggregation (Eq. 7) is from plain averaging: the
    measured off-diagonal S_ij (pairs seen together in a round; the others stay 0) and, for each
    client's row of mixing weights (``linear`` over S_ij > 0, or ``softmax`` over all clients),
    its total-variation distance from the uniform weights on the same clients (0: the weighted
    aggregation is an unweighted mean). FedCMD's summary and ``benchmarks/fedcmd/similarity.py``."""
    n = phi.shape[0]
    off = phi[~torch.eye(n, dtype=torch.bool, device=phi.device)]
    seen = off[off > 0]
    if seen.numel() == 0:
        return {"pairs": 0}
    distances = []
    for i in range(n):
        row = phi[i][phi[i] > 0] if norm == "linear" else phi[i]
        weights = normalize_rows(row[None], norm)[0]
        distances.append(0.5 * float((weights - 1.0 / weights.numel()).abs().sum()))
    tv = torch.tensor(distances, dtype=torch.float64)
    return {
        "pairs": int(seen.numel()) // 2,
        "phi_min": float(seen.min()),
        "phi_mean": float(seen.mean()),
        "phi_max": float(seen.max()),
        "tv_from_uniform_median": float(tv.median()),
        "tv_from_uniform_max": float(tv.max()),
    }
