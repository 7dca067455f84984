"""``shards`` (McMahan et al.'s pathological non-IID): the pool sorted by label and cut into
``num_clients·shards_per_client`` shards, ``shards_per_client`` random shards per client."""

from __future__ import annotations

import numpy as np

from fedpart.errors import ConfigError


def partition_shards(
    y: np.ndarray, num_clients: int, shards_per_client: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """McMahan et al.: label-sorted shards, ``shards_per_client`` random shards per client."""
    n = len(y)
    if shards_per_client < 1:
        raise ConfigError(
            "partition.shards_per_client", f"expected an integer >= 1, got {shards_per_client}"
        )
    num_shards = num_clients * shards_per_client
    if num_shards > n:
        raise ConfigError(
            "partition.shards_per_client",
            f"{num_clients} clients x {shards_per_client} shards = {num_shards} shards but only "
            f"{n} samples; lower partition.shards_per_client or partition.num_clients",
        )
    shuffled = rng.permutation(n)
    order = shuffled[np.argsort(y[shuffled], kind="stable")]  # by label, ties in random order
    shards = np.array_split(order, num_shards)
    owner = rng.permutation(num_shards).reshape(num_clients, shards_per_client)
    return [np.concatenate([shards[s] for s in row]) for row in owner]
