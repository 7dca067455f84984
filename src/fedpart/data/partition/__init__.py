"""Partitions of a labelled pool over clients, and per-client train/validation/test splits.

Every function draws its randomness from the ``numpy.random.Generator`` it is given, so the same
seed gives the same partition. Indices are positions in the ``labels`` array passed in; the caller
maps them back to its own pool. See ``docs/partitions.md`` for the conventions each kind follows.

:func:`partition` checks its arguments and hands them to the scheme's module (one per kind:
:mod:`~fedpart.data.partition.iid`, :mod:`~fedpart.data.partition.dirichlet`,
:mod:`~fedpart.data.partition.dirichlet_prior`, :mod:`~fedpart.data.partition.shards`,
:mod:`~fedpart.data.partition.classes`; what they share is in
:mod:`~fedpart.data.partition.common`); the splits are :mod:`~fedpart.data.partition.splits`, the
count matrix, its summary and plot :mod:`~fedpart.data.partition.inspection`.
"""

from __future__ import annotations

import numpy as np

from fedpart.data.partition.classes import partition_classes
from fedpart.data.partition.common import as_labels
from fedpart.data.partition.dirichlet import partition_dirichlet
from fedpart.data.partition.dirichlet_prior import partition_dirichlet_prior
from fedpart.data.partition.iid import partition_iid
from fedpart.data.partition.inspection import (
    describe_partition,
    label_matrix,
    plot_label_matrix,
    skew,
)
from fedpart.data.partition.shards import partition_shards
from fedpart.data.partition.splits import ClientSplit, assign_test_like_train, split_clients
from fedpart.errors import ConfigError, DataError

__all__ = [
    "PARTITIONS",
    "ClientSplit",
    "assign_test_like_train",
    "describe_partition",
    "label_matrix",
    "partition",
    "plot_label_matrix",
    "skew",
    "split_clients",
]

PARTITIONS: dict[str, str] = {
    "iid": "uniform random split into equal-sized clients",
    "dirichlet": "per class, p ~ Dir(alpha*1) over clients; clients above the mean size capped; "
    "redrawn until every client has min_size samples (PFLlib / FL-bench / MOON)",
    "dirichlet_prior": "per client, label proportions q ~ Dir(alpha*p_global), equal client sizes "
    "(FLGo / Pa3dFL)",
    "shards": "sort by label, cut into num_clients*shards_per_client shards, shards_per_client "
    "random shards per client (McMahan et al. pathological non-IID)",
    "classes": "classes_per_client classes per client, every class used about equally often, "
    "each class split evenly among its holders (FedFomo / Dis-PFL)",
}


def partition(
    labels: np.ndarray,
    num_clients: int,
    kind: str,
    rng: np.random.Generator,
    *,
    alpha: float = 0.5,
    min_size: int = 10,
    shards_per_client: int = 2,
    classes_per_client: int = 2,
    max_tries: int = 1000,
) -> list[np.ndarray]:
    """Spread the samples of ``labels`` over ``num_clients`` clients.

    Args:
        labels: integer class label of every sample of the pool, shape ``[N]``.
        num_clients: number of clients.
        kind: one of :data:`PARTITIONS`.
        rng: the only source of randomness.
        alpha: Dirichlet concentration (``dirichlet``, ``dirichlet_prior``); smaller = more skew.
        min_size: minimum samples per client (``dirichlet``, ``dirichlet_prior``).
        shards_per_client: shards per client (``shards``).
        classes_per_client: classes per client (``classes``).
        max_tries: draws attempted before a ``min_size`` requirement is declared impossible.

    Returns:
        One sorted ``int64`` array of sample indices per client. No sample is given to two
        clients; ``iid``, ``dirichlet``, ``dirichlet_prior`` and ``shards`` assign every sample.

    Raises:
        ConfigError: unknown ``kind`` or an invalid option (the key is named).
        DataError: the partition is impossible for this pool (e.g. ``min_size`` cannot be met).
    """
    if kind not in PARTITIONS:
        raise ConfigError(
            "partition.kind",
            f"unknown partition '{kind}'; valid choices: {', '.join(sorted(PARTITIONS))}",
        )
    y = as_labels(labels)
    n = len(y)
    if isinstance(num_clients, bool) or int(num_clients) != num_clients or num_clients < 1:
        raise ConfigError("partition.num_clients", f"expected an integer >= 1, got {num_clients}")
    num_clients = int(num_clients)
    if num_clients > n:
        raise ConfigError(
            "partition.num_clients",
            f"{num_clients} clients but only {n} samples; use at most {n} clients",
        )
    if kind == "iid":
        parts = partition_iid(n, num_clients, rng)
    elif kind in ("dirichlet", "dirichlet_prior"):
        if not alpha > 0 or not np.isfinite(alpha):
            raise ConfigError("partition.alpha", f"expected a positive number, got {alpha}")
        if min_size < 0:
            raise ConfigError("partition.min_size", f"expected an integer >= 0, got {min_size}")
        if num_clients * min_size > n:
            raise DataError(
                f"partition.min_size={min_size} cannot be met: {num_clients} clients x {min_size} "
                f"> {n} samples; lower partition.min_size or partition.num_clients"
            )
        fn = partition_dirichlet if kind == "dirichlet" else partition_dirichlet_prior
        parts = fn(y, num_clients, float(alpha), int(min_size), int(max_tries), rng)
    elif kind == "shards":
        parts = partition_shards(y, num_clients, int(shards_per_client), rng)
    else:
        parts = partition_classes(y, num_clients, int(classes_per_client), rng)
    return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]
