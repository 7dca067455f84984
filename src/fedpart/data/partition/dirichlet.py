"""``dirichlet`` (PFLlib / FL-bench / MOON): per class, the clients' shares are drawn from
Dir(alpha·1), clients above the mean size take no more, and the draw is repeated until every
client has ``min_size`` samples."""

from __future__ import annotations

import numpy as np

from fedpart.data.partition.common import (
    Redraws,
    class_indices,
    draw_dirichlet,
    split_by_proportions,
)


def partition_dirichlet(
    y: np.ndarray,
    num_clients: int,
    alpha: float,
    min_size: int,
    max_tries: int,
    rng: np.random.Generator,
) -> list[np.ndarray]:
    """PFLlib / FL-bench / MOON: per class, client shares ~ Dir(alpha * 1), with a size cap."""
    n = len(y)
    _, by_class = class_indices(y)
    cap = n / num_clients
    concentration = np.full(num_clients, alpha)
    redraws = Redraws(min_size, num_clients, alpha, n)
    for _ in range(max(1, max_tries)):
        sizes = np.zeros(num_clients, dtype=np.int64)
        pieces: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for idx in by_class:
            idx = rng.permutation(idx)
            p = draw_dirichlet(rng, concentration)
            p = p * (sizes < cap)  # clients already above the mean take no more
            total = p.sum()
            p = p / total if total > 0 else (sizes < cap) / np.sum(sizes < cap)
            for j, piece in enumerate(split_by_proportions(idx, p)):
                pieces[j].append(piece)
                sizes[j] += len(piece)
        if sizes.min() >= min_size:
            return [np.concatenate(p) for p in pieces]
        redraws.failed(sizes)
    raise redraws.error()
