"""CIFAR-10 and CIFAR-100, binary version: records of label bytes and 32x32 RGB planes."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedpart.data.readers.bundle import check_labels, make_bundle
from fedpart.data.readers.files import ensure_files
from fedpart.data.registry import DatasetBundle
from fedpart.errors import DataError


def _read_cifar_bin(
    path: Path, label_bytes: int, label_index: int, num_classes: int
) -> tuple[np.ndarray, np.ndarray]:
    """Records of ``label_bytes`` label bytes then 3072 pixel bytes (R, G, B planes of 32x32)."""
    record = label_bytes + 3072
    data = np.fromfile(path, dtype=np.uint8)
    if data.size == 0 or data.size % record:
        raise DataError(
            f"{path} is truncated or corrupted ({data.size} bytes is not a multiple of {record}); "
            "delete it and place a fresh copy"
        )
    rows = data.reshape(-1, record)
    labels = check_labels(rows[:, label_index], num_classes, path)
    return rows[:, label_bytes:].reshape(-1, 3, 32, 32), labels


def load_cifar10(root: Path, download: bool) -> DatasetBundle:
    folder = root / "cifar-10-batches-bin"
    files = [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]
    ensure_files("cifar10", folder, files, download, archive_dir=root)
    parts = [_read_cifar_bin(folder / f, 1, 0, 10) for f in files[:5]]
    train = (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
    return make_bundle(
        "cifar10",
        train,
        _read_cifar_bin(folder / files[5], 1, 0, 10),
        10,
        (0.4914, 0.4822, 0.4465),
        (0.2470, 0.2435, 0.2616),
        "crop_flip",
    )


def load_cifar100(root: Path, download: bool) -> DatasetBundle:
    folder = root / "cifar-100-binary"
    ensure_files("cifar100", folder, ["train.bin", "test.bin"], download, archive_dir=root)
    return make_bundle(
        "cifar100",
        _read_cifar_bin(folder / "train.bin", 2, 1, 100),
        _read_cifar_bin(folder / "test.bin", 2, 1, 100),
        100,
        (0.5071, 0.4865, 0.4409),
        (0.2673, 0.2564, 0.2762),
        "crop_flip",
    )
