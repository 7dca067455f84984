"""MedMNIST's ``.npz`` files (the 28x28 PathMNIST, OrganAMNIST and OrganCMNIST)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedpart.data.readers.bundle import check_labels, make_bundle
from fedpart.data.readers.files import FIX, ensure_files
from fedpart.data.registry import DatasetBundle
from fedpart.errors import DataError

MEDMNIST = {"pathmnist": (9, 3), "organamnist": (11, 1), "organcmnist": (11, 1)}


def load_medmnist(name: str, root: Path, download: bool) -> DatasetBundle:
    num_classes, channels = MEDMNIST[name]
    path = root / "MedMNIST" / f"{name}.npz"
    if not path.is_file() and (root / f"{name}.npz").is_file():
        path = root / f"{name}.npz"
    ensure_files(name, path.parent, [path.name], download)
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except Exception as exc:  # noqa: BLE001 - zip/npy decoding failures
        raise DataError(f"{path} is corrupted or truncated ({exc}); {FIX}") from exc
    need = [f"{s}_{k}" for s in ("train", "val", "test") for k in ("images", "labels")]
    absent = [k for k in need if k not in arrays]
    if absent:
        raise DataError(f"{path} lacks arrays {', '.join(absent)}; it is not a MedMNIST file")
    want = (28, 28, 3) if channels == 3 else (28, 28)

    def images(key: str) -> np.ndarray:
        x = arrays[key]
        if x.shape[1:] != want or x.dtype != np.uint8:
            raise DataError(
                f"{path}: {key} has shape {x.shape} ({x.dtype}), expected "
                f"N x {' x '.join(map(str, want))} uint8 (the 28x28 {name}.npz); {FIX}"
            )
        return x.transpose(0, 3, 1, 2) if x.ndim == 4 else x  # HWC -> CHW

    def labels(key: str, n: int) -> np.ndarray:
        y = arrays[key]
        if y.size != n:
            raise DataError(f"{path}: {key} has {y.size} labels for {n} images; {FIX}")
        return check_labels(y, num_classes, path)

    parts = {s: images(f"{s}_images") for s in ("train", "val", "test")}
    ys = {s: labels(f"{s}_labels", len(parts[s])) for s in parts}
    train = (
        np.concatenate([parts["train"], parts["val"]]),
        np.concatenate([ys["train"], ys["val"]]),
    )
    test = (parts["test"], ys["test"])
    return make_bundle(name, train, test, num_classes, (0.5,) * channels, (0.5,) * channels, "none")
