"""Per-client train/validation/test splits, stratified by label, and client test sets drawn
from an official test split with each client's label distribution."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedpart.data.partition.common import as_labels, class_indices, split_by_proportions
from fedpart.data.partition.inspection import label_matrix
from fedpart.errors import ConfigError


@dataclass
class ClientSplit:
    """One client's samples, as indices into the pool its partition came from."""

    train: np.ndarray
    val: np.ndarray
    test: np.ndarray


def _check_fractions(fractions: tuple[float, float, float]) -> np.ndarray:
    f = np.asarray(fractions, dtype=np.float64)
    if f.shape != (3,) or np.any(f < 0) or not np.all(np.isfinite(f)) or abs(f.sum() - 1) > 1e-6:
        raise ConfigError(
            "partition.split",
            f"expected three fractions [train, val, test] summing to 1, got {list(fractions)}",
        )
    return f


def _stratified_counts(n: int, f: np.ndarray, carry: np.ndarray) -> np.ndarray:
    """Counts per split for a class of ``n`` samples; ``carry`` holds the client's rounding debt.

    Largest-remainder rounding of ``f * n + carry`` (so a client's totals stay within one sample
    of its fractions even when it has many small classes), then at least one training sample.
    """
    target = f * n + carry
    counts = np.floor(np.maximum(target, 0)).astype(np.int64)
    counts[f == 0] = 0
    while counts.sum() < n:
        counts[np.argmax(np.where(f > 0, target - counts, -np.inf))] += 1
    while counts.sum() > n:
        counts[np.argmax(np.where(counts > 0, counts - target, -np.inf))] -= 1
    if n >= 1 and f[0] > 0 and counts[0] == 0:
        counts[1 + int(np.argmax(counts[1:]))] -= 1
        counts[0] += 1
    carry[:] = target - counts
    return counts


def split_clients(
    parts: list[np.ndarray],
    labels: np.ndarray,
    fractions: tuple[float, float, float],
    rng: np.random.Generator,
) -> list[ClientSplit]:
    """Split every client's samples into train/validation/test, stratified by label.

    For each class a client holds, its indices are shuffled and cut by ``fractions``; rounding
    carries over from class to class (in random order) so the client's split sizes match the
    fractions to within a sample, and every class with a sample keeps at least one training
    sample. Each split therefore has (up to rounding) the client's label distribution.

    Args:
        parts: per client, indices into ``labels``.
        labels: labels of the pool.
        fractions: ``(train, val, test)``, non-negative, summing to 1.
        rng: the only source of randomness.

    Raises:
        ConfigError: ``partition.split`` is not three non-negative fractions summing to 1.
    """
    f = _check_fractions(fractions)
    y = np.asarray(labels)
    out = []
    for part in parts:
        part = np.asarray(part, dtype=np.int64)
        _, by_class = class_indices(y[part])
        carry = np.zeros(3)
        splits: list[list[np.ndarray]] = [[], [], []]
        for k in rng.permutation(len(by_class)):
            idx = rng.permutation(part[by_class[k]])
            counts = _stratified_counts(len(idx), f, carry)
            for s, piece in enumerate(np.split(idx, np.cumsum(counts)[:-1])):
                splits[s].append(piece)
        train, val, test = (
            np.sort(np.concatenate(s)).astype(np.int64) if s else np.empty(0, np.int64)
            for s in splits
        )
        out.append(ClientSplit(train=train, val=val, test=test))
    return out


def assign_test_like_train(
    train_parts: list[np.ndarray],
    train_labels: np.ndarray,
    test_labels: np.ndarray,
    rng: np.random.Generator,
) -> list[np.ndarray]:
    """Client test sets from the official test split, with each client's label distribution.

    For every class ``c``, the official test samples of ``c`` are shuffled and divided among the
    clients in proportion to their training counts of ``c``; clients without ``c`` get none of
    it, and a class no client trains on is left out. No test sample goes to two clients.

    Returns:
        Per client, a sorted ``int64`` array of indices into ``test_labels``.
    """
    y_train = np.asarray(train_labels)
    y_test = as_labels(test_labels)
    num_classes = int(max(y_train.max(initial=-1), y_test.max(initial=-1))) + 1
    counts = label_matrix(train_parts, y_train, num_classes).astype(np.float64)
    classes, by_class = class_indices(y_test)
    pieces: list[list[np.ndarray]] = [[] for _ in train_parts]
    for c, idx in zip(classes, by_class, strict=True):
        total = counts[:, c].sum()
        if total <= 0:
            continue
        for j, piece in enumerate(split_by_proportions(rng.permutation(idx), counts[:, c] / total)):
            pieces[j].append(piece)
    return [
        np.sort(np.concatenate(p)).astype(np.int64) if p else np.empty(0, np.int64) for p in pieces
    ]


# ------------------------------------------------------------------------- inspection
