"""``classes`` (FedFomo / Dis-PFL): ``classes_per_client`` classes per client, every class
used about equally often and split evenly among the clients that hold it."""

from __future__ import annotations

import numpy as np

from fedpart.data.partition.common import class_indices
from fedpart.errors import ConfigError


def partition_classes(
    y: np.ndarray, num_clients: int, classes_per_client: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """FedFomo / Dis-PFL: ``classes_per_client`` classes per client, classes used equally."""
    classes, by_class = class_indices(y)
    num_classes = len(classes)
    if classes_per_client < 1 or classes_per_client > num_classes:
        raise ConfigError(
            "partition.classes_per_client",
            f"expected 1..{num_classes} (the number of classes), got {classes_per_client}",
        )
    times = np.zeros(num_classes, dtype=np.int64)
    holders: list[list[int]] = [[] for _ in range(num_classes)]
    for client in range(num_clients):
        # the least-used classes, ties broken at random
        chosen = np.lexsort((rng.random(num_classes), times))[:classes_per_client]
        times[chosen] += 1
        for k in chosen:
            holders[k].append(client)
    pieces: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for k, idx in enumerate(by_class):
        if not holders[k]:
            continue  # more classes than client slots: this class stays unassigned
        for client, piece in zip(
            holders[k], np.array_split(rng.permutation(idx), len(holders[k])), strict=True
        ):
            pieces[client].append(piece)
    return [np.concatenate(p) for p in pieces]


# ------------------------------------------------------------------------------- splits
