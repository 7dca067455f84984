"""Dataset readers: each dataset's standard on-disk format, read into in-memory tensors.

Images are kept as ``uint8`` ``[N, C, H, W]`` until a batch is prepared
(:func:`fedpart.data.transforms.prepare_batch`), so even Tiny-ImageNet fits in memory.
A missing file is downloaded (checksum verified) when allowed; otherwise, and when the download
fails, a :class:`~fedpart.errors.DataError` names the files to place and the directory. A
truncated or corrupted file is detected (header/size checks, MD5 of known files) and named.
"""

from __future__ import annotations

import gzip
import math
import os
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedpart.data.download import PAYLOAD_MD5, RESOURCES, DownloadError, fetch, verify_md5
from fedpart.data.registry import (
    DATASETS,
    DatasetBundle,
    DatasetInfo,
    load_dataset,
    register_dataset,
    resolve_root,
)
from fedpart.errors import ConfigError, DataError

__all__ = ["DATASETS", "DatasetBundle", "DatasetInfo", "load_dataset", "resolve_root"]


# ----------------------------------------------------------------------------- helpers
_FIX = "delete it and place a fresh copy"


def _missing(name: str, folder: Path, files: list[str], reason: str = "") -> DataError:
    why = f"; {reason}" if reason else ""
    return DataError(
        f"{DATASETS[name].display_name if name in DATASETS else name} not found: place {', '.join(files)} in {folder} "
        f"(or set dataset.root / FEDPART_DATA){why}"
    )


def _present(folder: Path, name: str) -> bool:
    """``name`` (a file, ``name.gz``, or a directory when it ends in ``/``) exists in ``folder``."""
    if name.endswith("/"):
        return (folder / name).is_dir()
    return _find(folder, name) is not None or _find(folder, name.removesuffix(".gz")) is not None


def _ensure(
    name: str,
    folder: Path,
    files: list[str],
    download: bool,
    archive_dir: Path | None = None,
    after_download: Callable[[], None] | None = None,
) -> None:
    """Make sure ``files`` exist under ``folder``; download the dataset's resources if allowed.

    ``files`` are names relative to ``folder``; ``x.gz`` is satisfied by ``x`` too, and a name
    ending in ``/`` is a directory. Downloads make one attempt per missing resource (archives
    are extracted into ``archive_dir``, then ``after_download`` may rearrange them); on failure, or with ``download`` false, one
    :class:`DataError` line names the missing files, the directory and the reason.
    """
    missing = [f for f in files if not _present(folder, f)]
    if not missing:
        return
    if not download:
        reason = "downloading is turned off (dataset.download=false)"
    elif name not in RESOURCES:
        reason = "there is no download source for it"
    else:
        try:
            for res in RESOURCES[name]:
                target_dir = archive_dir or folder
                dest = target_dir / res.filename
                is_archive = res.filename.endswith((".tar.gz", ".tgz", ".zip", ".tar"))
                if not is_archive and _present(target_dir, res.filename):
                    continue  # only fetch what is missing
                fetch(res.url, dest, res.md5, extract_to=target_dir if is_archive else None)
                if is_archive:
                    dest.unlink(missing_ok=True)  # extracted: the archive is not needed again
            if after_download is not None:
                after_download()
            missing = [f for f in files if not _present(folder, f)]
            if not missing:
                return
            reason = "the download did not contain the expected files"
        except (DownloadError, OSError) as exc:  # OSError: e.g. a read-only data root
            reason = f"download failed: {exc}"
    raise _missing(name, folder, missing, reason)


def _check_labels(y: np.ndarray, num_classes: int, path: Path) -> np.ndarray:
    """``y`` as int64, or :class:`DataError` naming ``path`` if a label is out of range."""
    y = np.asarray(y).reshape(-1).astype(np.int64)
    if y.size and (int(y.min()) < 0 or int(y.max()) >= num_classes):
        raise DataError(
            f"{path} holds labels in {int(y.min())}..{int(y.max())}, expected 0..{num_classes - 1}; "
            f"the file is corrupted or of another dataset: {_FIX}"
        )
    return y


def _find(folder: Path, name: str) -> Path | None:
    """``name`` or ``name.gz`` under ``folder``."""
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    return None


def _read_payload(path: Path) -> bytes:
    data = path.read_bytes()
    if path.suffix == ".gz":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise DataError(
                f"{path} is corrupted or truncated ({exc}); delete it and place a fresh copy"
            ) from exc
    return data


def read_idx(path: Path, known_md5_key: str | None = None) -> np.ndarray:
    """Read an IDX file (``.gz`` or raw), checking its header against its size."""
    data = _read_payload(path)
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
    img_path, lbl_path = _find(folder, img_name), _find(folder, lbl_name)
    assert img_path is not None and lbl_path is not None
    key = (lambda n: f"{md5_folder}/{n}") if md5_folder else (lambda n: None)
    images = read_idx(img_path, key(img_name))
    labels = read_idx(lbl_path, key(lbl_name))
    if images.shape[0] != labels.shape[0]:
        raise DataError(
            f"{img_path} holds {images.shape[0]} images but {lbl_path} holds {labels.shape[0]} "
            f"labels; one of them is from another copy: {_FIX}"
        )
    return images, labels


def _bundle(
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


_IDX_FILES = [f"{s}-{k}-ubyte" for s in ("train", "t10k") for k in ("images-idx3", "labels-idx1")]


# ----------------------------------------------------------------------------- readers
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
    if fallback is not None and not all(_find(folder, f) for f in _IDX_FILES):
        if all(_find(fallback, f) for f in _IDX_FILES):
            folder = fallback
    _ensure(name, folder, [f + ".gz" if not _find(folder, f) else f for f in _IDX_FILES], download)
    train = _idx_pair(folder, "train", folder_name)
    test = _idx_pair(folder, "t10k", folder_name)
    train = (train[0], _check_labels(train[1], 10, folder / "train-labels-idx1-ubyte"))
    test = (test[0], _check_labels(test[1], 10, folder / "t10k-labels-idx1-ubyte"))
    return _bundle(name, train, test, 10, (mean,), (std,), "none")


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

    missing = [n for n in names if not _find(folder, n)]
    if missing:
        if all(_find(alt, n) for n in names):
            folder = alt
        else:
            _ensure(
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
        y = _check_labels(y, EMNIST_SPLITS[split], folder / f"emnist-{split}-{s}-labels-idx1-ubyte")
        out.append((x, y))
    return _bundle("emnist", out[0], out[1], EMNIST_SPLITS[split], (0.1751,), (0.3332,), "none")


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
    labels = _check_labels(rows[:, label_index], num_classes, path)
    return rows[:, label_bytes:].reshape(-1, 3, 32, 32), labels


def load_cifar10(root: Path, download: bool) -> DatasetBundle:
    folder = root / "cifar-10-batches-bin"
    files = [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]
    _ensure("cifar10", folder, files, download, archive_dir=root)
    parts = [_read_cifar_bin(folder / f, 1, 0, 10) for f in files[:5]]
    train = (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
    return _bundle(
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
    _ensure("cifar100", folder, ["train.bin", "test.bin"], download, archive_dir=root)
    return _bundle(
        "cifar100",
        _read_cifar_bin(folder / "train.bin", 2, 1, 100),
        _read_cifar_bin(folder / "test.bin", 2, 1, 100),
        100,
        (0.5071, 0.4865, 0.4409),
        (0.2673, 0.2564, 0.2762),
        "crop_flip",
    )


_SVHN_COUNTS = {"train_32x32.mat": 73257, "test_32x32.mat": 26032}


def load_svhn(root: Path, download: bool) -> DatasetBundle:
    from scipy.io import loadmat

    folder = root / "SVHN"
    _ensure("svhn", folder, ["train_32x32.mat", "test_32x32.mat"], download)
    out = []
    for split in ("train", "test"):
        path = folder / f"{split}_32x32.mat"
        try:
            mat = loadmat(str(path), variable_names=("X", "y"))
            x, y = np.asarray(mat["X"]), np.asarray(mat["y"])
        except Exception as exc:  # noqa: BLE001 - any parse failure means a bad file
            raise DataError(f"{path} is corrupted or truncated ({exc}); {_FIX}") from exc
        if x.ndim != 4 or x.shape[:3] != (32, 32, 3) or x.size == 0:
            raise DataError(f"{path} holds X of shape {x.shape}, expected 32x32x3xN; {_FIX}")
        if y.size != x.shape[3]:
            raise DataError(f"{path} holds {x.shape[3]} images but {y.size} labels; {_FIX}")
        # The full official file must match its published MD5 (subsets are checked by shape).
        if y.size == _SVHN_COUNTS[path.name]:
            verify_md5(path, PAYLOAD_MD5[f"SVHN/{path.name}"])
        x = np.ascontiguousarray(np.asarray(x, dtype=np.uint8).transpose(3, 2, 0, 1))
        y = np.asarray(y, dtype=np.int64).reshape(-1)
        if y.size and (y.min() < 1 or y.max() > 10):
            raise DataError(f"{path} holds labels outside 1..10; {_FIX}")
        out.append((x, y % 10))  # label 10 is the digit 0
    return _bundle(
        "svhn", out[0], out[1], 10, (0.4377, 0.4438, 0.4728), (0.1980, 0.2010, 0.1970), "crop"
    )


def _read_images(paths: list[Path], size: int) -> np.ndarray:
    """Decode image files with Pillow into ``uint8 [N, 3, size, size]`` (converted to RGB).

    Decoding runs on a few threads (Pillow releases the GIL while decoding); an unreadable
    image or one of another size raises :class:`DataError` naming it.
    """
    from concurrent.futures import ThreadPoolExecutor

    from PIL import Image

    out = np.empty((len(paths), 3, size, size), dtype=np.uint8)

    def decode(i: int) -> None:
        p = paths[i]
        try:
            with Image.open(p) as img:
                arr = np.asarray(img.convert("RGB"), dtype=np.uint8)
        except Exception as exc:  # noqa: BLE001 - any decode failure means a bad file
            raise DataError(f"{p} cannot be read as an image ({exc}); {_FIX}") from exc
        if arr.shape[:2] != (size, size):
            raise DataError(f"{p} is {arr.shape[1]}x{arr.shape[0]}, expected {size}x{size}; {_FIX}")
        out[i] = arr.transpose(2, 0, 1)

    workers = min(8, os.cpu_count() or 1)
    if len(paths) < 512 or workers < 2:
        for i in range(len(paths)):
            decode(i)
    else:
        with ThreadPoolExecutor(workers) as pool:
            for _ in pool.map(decode, range(len(paths)), chunksize=256):
                pass
    return out


def _list_images(folder: Path, suffixes: tuple[str, ...]) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in suffixes)


CINIC_CLASSES = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)


def load_cinic10(root: Path, download: bool) -> DatasetBundle:
    folder = root / "CINIC-10"
    splits = ("train", "valid", "test")

    def unnest() -> None:  # an archive with a top-level CINIC-10/ folder of its own
        inner = folder / "CINIC-10"
        for s in splits:
            if (inner / s).is_dir() and not (folder / s).exists():
                (inner / s).replace(folder / s)

    if not (folder / "train").is_dir():
        unnest()
    _ensure(
        "cinic10",
        folder,
        [f"{s}/" for s in splits],
        download,
        archive_dir=folder,
        after_download=unnest,
    )
    classes = sorted(d.name for d in (folder / "train").iterdir() if d.is_dir())
    if not classes:
        raise DataError(
            f"{folder / 'train'} has no class folders; place the CINIC-10 images there "
            f"({', '.join(CINIC_CLASSES)})"
        )
    for s in splits[1:]:
        other = sorted(d.name for d in (folder / s).iterdir() if d.is_dir())
        if other != classes:
            raise DataError(
                f"{folder / s} has class folders {', '.join(other) or '(none)'} but "
                f"{folder / 'train'} has {', '.join(classes)}; the copy is incomplete"
            )

    def split(names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        paths, labels = [], []
        for name in names:
            for k, cls in enumerate(classes):
                files = _list_images(folder / name / cls, (".png",))
                paths += files
                labels += [k] * len(files)
        return _read_images(paths, 32), np.asarray(labels, dtype=np.int64)

    return _bundle(
        "cinic10",
        split(("train", "valid")),
        split(("test",)),
        len(classes),
        (0.47889522, 0.47227842, 0.43047404),
        (0.24205776, 0.23828046, 0.25874835),
        "crop_flip",
    )


def load_tinyimagenet(root: Path, download: bool) -> DatasetBundle:
    folder = root / "tiny-imagenet-200"
    _ensure(
        "tinyimagenet",
        folder,
        ["wnids.txt", "train/", "val/images/", "val/val_annotations.txt"],
        download,
        archive_dir=root,
    )
    wnids = [w.strip() for w in (folder / "wnids.txt").read_text().split() if w.strip()]
    if not wnids:
        raise DataError(f"{folder / 'wnids.txt'} lists no classes; {_FIX}")
    index = {w: i for i, w in enumerate(wnids)}  # classes in the order of wnids.txt
    paths, labels = [], []
    for w in wnids:
        class_dir = folder / "train" / w / "images"
        if not class_dir.is_dir():
            raise DataError(
                f"{class_dir} is missing (class {w} of wnids.txt); the copy is incomplete: "
                "place the whole tiny-imagenet-200 folder again"
            )
        files = _list_images(class_dir, (".jpeg", ".jpg"))
        paths += files
        labels += [index[w]] * len(files)
    train = (_read_images(paths, 64), np.asarray(labels, dtype=np.int64))
    vpaths, vlabels = [], []
    annotations = folder / "val" / "val_annotations.txt"
    for lineno, line in enumerate(annotations.read_text().splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) < 2 or parts[1] not in index:
            raise DataError(
                f"{annotations} line {lineno} is malformed or names a class not in wnids.txt; "
                f"{_FIX}"
            )
        vpaths.append(folder / "val" / "images" / parts[0])
        vlabels.append(index[parts[1]])
    test = (_read_images(vpaths, 64), np.asarray(vlabels, dtype=np.int64))
    return _bundle(
        "tinyimagenet",
        train,
        test,
        len(wnids),
        (0.4802, 0.4481, 0.3975),
        (0.2302, 0.2265, 0.2262),
        "crop_flip",
    )


MEDMNIST = {"pathmnist": (9, 3), "organamnist": (11, 1), "organcmnist": (11, 1)}


def _load_medmnist(name: str, root: Path, download: bool) -> DatasetBundle:
    num_classes, channels = MEDMNIST[name]
    path = root / "MedMNIST" / f"{name}.npz"
    if not path.is_file() and (root / f"{name}.npz").is_file():
        path = root / f"{name}.npz"
    _ensure(name, path.parent, [path.name], download)
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except Exception as exc:  # noqa: BLE001 - zip/npy decoding failures
        raise DataError(f"{path} is corrupted or truncated ({exc}); {_FIX}") from exc
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
                f"N x {' x '.join(map(str, want))} uint8 (the 28x28 {name}.npz); {_FIX}"
            )
        return x.transpose(0, 3, 1, 2) if x.ndim == 4 else x  # HWC -> CHW

    def labels(key: str, n: int) -> np.ndarray:
        y = arrays[key]
        if y.size != n:
            raise DataError(f"{path}: {key} has {y.size} labels for {n} images; {_FIX}")
        return _check_labels(y, num_classes, path)

    parts = {s: images(f"{s}_images") for s in ("train", "val", "test")}
    ys = {s: labels(f"{s}_labels", len(parts[s])) for s in parts}
    train = (
        np.concatenate([parts["train"], parts["val"]]),
        np.concatenate([ys["train"], ys["val"]]),
    )
    test = (parts["test"], ys["test"])
    return _bundle(name, train, test, num_classes, (0.5,) * channels, (0.5,) * channels, "none")


def load_digits(root: Path, download: bool) -> DatasetBundle:
    """scikit-learn's bundled UCI digits: 1,797 8x8 images, values 0..16 scaled to 0..255."""
    from sklearn.datasets import load_digits as sk_digits

    d = sk_digits()
    x = np.round(d.images * (255.0 / 16.0)).astype(np.uint8)
    scaled = x.astype(np.float64) / 255.0
    return _bundle(
        "digits", (x, d.target), None, 10, (float(scaled.mean()),), (float(scaled.std()),), "none"
    )


def _int_option(key: str, value: Any, low: int) -> int:
    """``value`` as an int >= ``low`` (integral floats and digit strings accepted)."""
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ConfigError(f"dataset.{key}", f"expected an integer >= {low}, got {value!r}")
    return value


def load_synthetic(
    root: Path,
    download: bool,
    num_samples: int = 6000,
    num_features: int = 60,
    num_classes: int = 10,
    seed: int = 0,
    noise: float = 1.0,
) -> DatasetBundle:
    """Gaussian features labelled by a random linear teacher (with ``noise`` on the logits).

    ``x ~ N(0, I_D)``; a teacher ``W ~ N(0, 1/D)`` of shape ``[D, K]`` gives logits
    ``4 x W + noise * N(0, 1)`` and the label is their argmax. ``num_samples`` are generated
    for training and ``num_samples // 5`` more for the test split (1/6 of all samples). The
    same options give the same data (``torch.Generator`` seeded with ``seed``).
    """
    num_samples = _int_option("num_samples", num_samples, 10)
    num_features = _int_option("num_features", num_features, 1)
    num_classes = _int_option("num_classes", num_classes, 2)
    seed = _int_option("seed", seed, 0)
    try:
        noise = float(noise)
    except (TypeError, ValueError):
        raise ConfigError("dataset.noise", f"expected a number, got {noise!r}") from None
    if not math.isfinite(noise) or noise < 0:
        raise ConfigError("dataset.noise", f"expected a finite number >= 0, got {noise!r}")
    g = torch.Generator().manual_seed(int(seed))
    n = num_samples + num_samples // 5
    x = torch.randn(n, num_features, generator=g)
    teacher = torch.randn(num_features, num_classes, generator=g) / num_features**0.5
    logits = x @ teacher * 4 + float(noise) * torch.randn(n, num_classes, generator=g)
    y = logits.argmax(1)
    return DatasetBundle(
        "synthetic",
        x[:num_samples],
        y[:num_samples],
        x[num_samples:],
        y[num_samples:],
        num_classes,
        (num_features,),
        (),
        (),
        "none",
    )


# ----------------------------------------------------------------------------- the records
# The built-in datasets take the public path a user's dataset takes (docs/extending.md).
_IDX_GZ = tuple(f + ".gz" for f in _IDX_FILES)


def _files(folder: str, title: str, *files: str, options: dict[str, str] | None = None) -> dict:
    """The record fields of a dataset read from files (downloaded when allowed)."""
    return {
        "files": files,
        "folder": folder,
        "title": title,
        "offline": False,
        "options": options or {},
    }


def _medmnist(name: str) -> Callable[[Path, bool], DatasetBundle]:
    def load(root: Path, download: bool) -> DatasetBundle:
        return _load_medmnist(name, root, download)

    load.__qualname__ = f"load_{name}"
    return load


_EMNIST_FILES = tuple(
    f"emnist-<split>-{p}-ubyte.gz"
    for p in ("train-images-idx3", "train-labels-idx1", "test-images-idx3", "test-labels-idx1")
)
_EMNIST_SPLIT = {"split": "byclass, balanced (default), letters or digits"}
_SYNTHETIC_OPTIONS = {
    "num_samples": "training samples (default 6000; test adds 1/5)",
    "num_features": "feature dimension (default 60)",
    "num_classes": "classes (default 10)",
    "seed": "generator seed (default 0)",
    "noise": "logit noise (default 1.0)",
}
_GREY28, _RGB32 = (1, 28, 28), (3, 32, 32)

register_dataset(
    "mnist",
    num_classes=10,
    input_shape=_GREY28,
    description="MNIST handwritten digits, 60k+10k, 1x28x28",
    **_files("MNIST/raw", "MNIST", *_IDX_GZ),
)(load_mnist)
register_dataset(
    "fmnist",
    num_classes=10,
    input_shape=_GREY28,
    description="Fashion-MNIST, 60k+10k, 1x28x28 (also read from /usr/share/datasets/fashion-mnist)",
    **_files("FashionMNIST/raw", "Fashion-MNIST", *_IDX_GZ),
)(load_fmnist)
register_dataset(
    "emnist",
    num_classes=47,
    input_shape=_GREY28,
    description="EMNIST (byclass 62, balanced 47, letters 26, digits 10 classes), 1x28x28",
    **_files("EMNIST/raw", "EMNIST", *_EMNIST_FILES, options=_EMNIST_SPLIT),
)(load_emnist)
register_dataset(
    "cifar10",
    num_classes=10,
    input_shape=_RGB32,
    description="CIFAR-10 (binary version), 50k+10k, 3x32x32",
    **_files(
        "cifar-10-batches-bin",
        "CIFAR-10",
        *(f"data_batch_{i}.bin" for i in range(1, 6)),
        "test_batch.bin",
    ),
)(load_cifar10)
register_dataset(
    "cifar100",
    num_classes=100,
    input_shape=_RGB32,
    description="CIFAR-100 (binary version, fine labels), 50k+10k, 3x32x32",
    **_files("cifar-100-binary", "CIFAR-100", "train.bin", "test.bin"),
)(load_cifar100)
register_dataset(
    "svhn",
    num_classes=10,
    input_shape=_RGB32,
    description="SVHN cropped digits (.mat), 73k+26k, 3x32x32",
    **_files("SVHN", "SVHN", "train_32x32.mat", "test_32x32.mat"),
)(load_svhn)
register_dataset(
    "cinic10",
    num_classes=10,
    input_shape=_RGB32,
    description="CINIC-10 PNG folders (train+valid as train), 3x32x32",
    **_files(
        "CINIC-10",
        "CINIC-10",
        "train/<class>/*.png",
        "valid/<class>/*.png",
        "test/<class>/*.png",
    ),
)(load_cinic10)
register_dataset(
    "tinyimagenet",
    num_classes=200,
    input_shape=(3, 64, 64),
    description="Tiny-ImageNet-200 (val as test), 3x64x64",
    **_files(
        "tiny-imagenet-200",
        "Tiny-ImageNet",
        "wnids.txt",
        "train/<wnid>/images/*.JPEG",
        "val/images/*.JPEG",
        "val/val_annotations.txt",
    ),
)(load_tinyimagenet)
for _name, _title, _what in (
    ("pathmnist", "PathMNIST", "PathMNIST (.npz, train+val as train)"),
    ("organamnist", "OrganAMNIST", "OrganAMNIST (.npz)"),
    ("organcmnist", "OrganCMNIST", "OrganCMNIST (.npz)"),
):
    _classes, _channels = MEDMNIST[_name]
    register_dataset(
        _name,
        num_classes=_classes,
        input_shape=(_channels, 28, 28),
        description=f"MedMNIST {_what}, {_channels}x28x28",
        **_files("MedMNIST", _title, f"{_name}.npz"),
    )(_medmnist(_name))
register_dataset(
    "digits",
    num_classes=10,
    input_shape=(1, 8, 8),
    description="scikit-learn UCI digits, 1,797 images 1x8x8 (bundled)",
)(load_digits)
register_dataset(
    "synthetic",
    num_classes=10,
    input_shape=(60,),
    description="Gaussian features with a random softmax teacher",
    options=_SYNTHETIC_OPTIONS,
)(load_synthetic)
