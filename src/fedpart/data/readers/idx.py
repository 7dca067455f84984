"""IDX files (MNIST's format): MNIST, Fashion-MNIST (also from Debian's package) and EMNIST."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedpart.data.download import PAYLOAD_MD5, verify_md5
from fedpart.data.readers.bundle import check_labels, make_bundle
from fedpart.data.readers.files import FIX, ensure_files, find_file, read_payload
from fedpart.data.registry import DatasetBundle
from fedpart.errors import ConfigError, DataError

IDX_FILES = [f"{s}-{k}-ubyte" for s in ("train", "t10k") for k in ("images-idx3", "labels-idx1")]


def read_idx(path: Path, known_md5_key: str | None = None) -> np.ndarray:
    """Read an IDX file (``.gz`` or raw), checking its header against its size."""
    data = read_payload(path)
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise DataError(
            f"{path} is not an IDX file of unsigned bytes (bad header); delete it and place a fresh copy"
        )
    ndim = data[3]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DataError(
            f"{path} is truncated (header incomplete); delete it and place a fresh copy"
        )
    dims = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    expected = header + int(np.prod(dims))
    if len(data) != expected:
        raise DataError(
            f"{path} is truncated or corrupted: {len(data)} bytes, the header says {expected}; "
            "delete it and place a fresh copy"
        )
    # A file whose header says it is the full official file must match it byte for byte; smaller
    # files (subsets, test fixtures) are checked by their header and size only.
    official = 60000 if "/train-" in (known_md5_key or "") else 10000
    if known_md5_key and known_md5_key in PAYLOAD_MD5 and dims[0] == official:
        verify_md5(path, PAYLOAD_MD5[known_md5_key], payload=data)
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims)


def _idx_pair(folder: Path, prefix: str, md5_folder: str | None) -> tuple[np.ndarray, np.ndarray]:
    img_name = f"{prefix}-images-idx3-ubyte"
    lbl_name = f"{prefix}-labels-idx1-ubyte"
    img_path, lbl_path = find_file(folder, img_name), find_file(folder, lbl_name)
    assert img_path is not None and lbl_path is not None
    key = (lambda n: f"{md5_folder}/{n}") if md5_folder else (lambda n: None)
    images = read_idx(img_path, key(img_name))
    labels = read_idx(lbl_path, key(lbl_name))
    if images.shape[0] != labels.shape[0]:
        raise DataError(
            f"{img_path} holds {images.shape[0]} images but {lbl_path} holds {labels.shape[0]} "
            f"labels; one of them is from another copy: {FIX}"
        )
    return images, labels


def _load_mnist_like(
    name: str,
    folder_name: str,
    mean: float,
    std: float,
    root: Path,
    download: bool,
    fallback: Path | None = None,
) -> DatasetBundle:
    folder = root / folder_name / "raw"
    if fallback is not None and not all(find_file(folder, f) for f in IDX_FILES):
        if all(find_file(fallback, f) for f in IDX_FILES):
            folder = fallback
    ensure_files(
        name, folder, [f + ".gz" if not find_file(folder, f) else f for f in IDX_FILES], download
    )
    train = _idx_pair(folder, "train", folder_name)
    test = _idx_pair(folder, "t10k", folder_name)
    train = (train[0], check_labels(train[1], 10, folder / "train-labels-idx1-ubyte"))
    test = (test[0], check_labels(test[1], 10, folder / "t10k-labels-idx1-ubyte"))
    return make_bundle(name, train, test, 10, (mean,), (std,), "none")


def load_mnist(root: Path, download: bool) -> DatasetBundle:
    return _load_mnist_like("mnist", "MNIST", 0.1307, 0.3081, root, download)


def load_fmnist(root: Path, download: bool) -> DatasetBundle:
    return _load_mnist_like(
        "fmnist",
        "FashionMNIST",
        0.2860,
        0.3530,
        root,
        download,
        fallback=DEBIAN_FASHION_MNIST,
    )


#: Where Debian's ``dataset-fashion-mnist`` package installs the Fashion-MNIST gzip files (the
#: same four names as torchvision's ``FashionMNIST/raw``); read when ``<root>/FashionMNIST/raw``
#: lacks them.
DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")

#: EMNIST splits read, and their number of classes.
EMNIST_SPLITS = {"byclass": 62, "balanced": 47, "letters": 26, "digits": 10}


def load_emnist(root: Path, download: bool, split: str = "balanced") -> DatasetBundle:
    if split not in EMNIST_SPLITS:
        raise ConfigError(
            "dataset.split",
            f"unknown EMNIST split '{split}'; valid choices: {', '.join(EMNIST_SPLITS)}",
        )
    folder = root / "EMNIST" / "raw"
    names = [
        f"emnist-{split}-{s}-{k}-ubyte"
        for s in ("train", "test")
        for k in ("images-idx3", "labels-idx1")
    ]
    alt = folder / "gzip"  # where NIST's gzip.zip puts them, unpacked as is

    def flatten() -> None:
        for f in alt.glob("emnist-*-ubyte.gz") if alt.is_dir() else ():
            f.replace(folder / f.name)

    missing = [n for n in names if not find_file(folder, n)]
    if missing:
        if all(find_file(alt, n) for n in names):
            folder = alt
        else:
            ensure_files(
                "emnist",
                folder,
                [n + ".gz" for n in missing],
                download,
                archive_dir=folder,
                after_download=flatten,
            )
    out = []
    for s in ("train", "test"):
        x, y = _idx_pair(folder, f"emnist-{split}-{s}", None)
        x = np.ascontiguousarray(x.transpose(0, 2, 1))  # EMNIST images are stored transposed
        y = y.astype(np.int64) - (1 if split == "letters" else 0)  # letters: a..z are 1..26
        y = check_labels(y, EMNIST_SPLITS[split], folder / f"emnist-{split}-{s}-labels-idx1-ubyte")
        out.append((x, y))
    return make_bundle("emnist", out[0], out[1], EMNIST_SPLITS[split], (0.1751,), (0.3332,), "none")
