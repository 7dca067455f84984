"""Arrays read from a dataset's files made a :class:`~fedpart.data.registry.DatasetBundle`,
and labels checked against the number of classes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from fedpart.data.readers.files import FIX
from fedpart.data.registry import DatasetBundle
from fedpart.errors import DataError


def check_labels(y: np.ndarray, num_classes: int, path: Path) -> np.ndarray:
    """``y`` as int64, or :class:`DataError` naming ``path`` if a label is out of range."""
    y = np.asarray(y).reshape(-1).astype(np.int64)
    if y.size and (int(y.min()) < 0 or int(y.max()) >= num_classes):
        raise DataError(
            f"{path} holds labels in {int(y.min())}..{int(y.max())}, expected 0..{num_classes - 1}; "
            f"the file is corrupted or of another dataset: {FIX}"
        )
    return y


def make_bundle(
    name: str,
    train: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray] | None,
    num_classes: int,
    mean: tuple[float, ...],
    std: tuple[float, ...],
    augment: str,
) -> DatasetBundle:
    def images(x: np.ndarray) -> torch.Tensor:
        t = torch.from_numpy(np.array(x, copy=True, order="C"))
        return t.unsqueeze(1) if t.dim() == 3 else t

    tx, ty = images(train[0]), torch.from_numpy(np.asarray(train[1], dtype=np.int64)).reshape(-1)
    if test is not None:
        vx, vy = images(test[0]), torch.from_numpy(np.asarray(test[1], dtype=np.int64)).reshape(-1)
    else:
        vx = vy = None
    return DatasetBundle(name, tx, ty, vx, vy, num_classes, tuple(tx.shape[1:]), mean, std, augment)
