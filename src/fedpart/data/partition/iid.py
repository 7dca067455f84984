"""``iid``: a uniform random split into equal-sized clients."""

from __future__ import annotations

import numpy as np


def partition_iid(n: int, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """A random permutation of the ``n`` samples cut into ``num_clients`` near-equal pieces."""
    return np.array_split(rng.permutation(n), num_clients)
