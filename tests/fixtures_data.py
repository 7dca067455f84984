"""Builders of tiny datasets in the REAL on-disk formats, for tests that must not need real data.

Each ``write_*_fixture(root, ...)`` writes one dataset under ``root`` exactly where
:func:`fedpart.data.load_dataset` looks for it (``load_dataset(name, root, download=False)``) and
returns what the loader should give back: ``{"train": (x, y), "test": (x, y)}`` with ``x`` uint8
``[N, C, H, W]`` (upright, channels first) and ``y`` int64 ``[N]``.

Images are learnable: every class has its own fixed random mask of bright pixels over a dim
noise background, so a small model trained on a fixture beats chance quickly. Labels are
balanced (``i % num_classes``, shuffled), so every class occurs once ``n >= num_classes``.
Everything is seeded: the same arguments write the same bytes.
"""

from __future__ import annotations

import gzip
import io
import struct
import tarfile
import zipfile
from pathlib import Path

import numpy as np

from fedpart.data.readers.idx import EMNIST_SPLITS
from fedpart.data.readers.image_folders import CINIC_CLASSES

Split = tuple[np.ndarray, np.ndarray]

TINY_WNIDS = ("n01443537", "n01629819", "n01641577")


def patterned_images(
    n: int,
    num_classes: int,
    channels: int,
    size: int,
    seed: int = 0,
    labels: np.ndarray | None = None,
) -> Split:
    """``n`` learnable uint8 images ``[n, channels, size, size]`` and balanced int64 labels.

    The class masks depend only on ``seed``'s first draw, so two calls with the same
    ``num_classes``/shape and seed share them. ``labels`` fixes the labels instead.
    """
    rng = np.random.default_rng(seed)
    masks = rng.random((num_classes, channels, size, size)) < 0.25
    if labels is None:
        y = np.arange(n, dtype=np.int64) % num_classes
        rng.shuffle(y)
    else:
        y = np.asarray(labels, dtype=np.int64)
    noise = rng.integers(0, 56, size=(n, channels, size, size))
    x = (masks[y] * 200 + noise).astype(np.uint8)
    return x, y


def idx_bytes(array: np.ndarray) -> bytes:
    """An IDX file (unsigned bytes) holding ``array``: magic, big-endian dims, data."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = struct.pack(">HBB", 0, 0x08, array.ndim)
    header += struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.tobytes()


def write_idx(path: Path, array: np.ndarray, *, gz: bool = True) -> Path:
    """Write ``array`` as an IDX file at ``path`` (``path.gz``, gzip-compressed, when ``gz``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = idx_bytes(array)
    if gz:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(data, mtime=0))
    else:
        path.write_bytes(data)
    return path


def write_idx_fixture(
    folder: Path,
    n_train: int,
    n_test: int,
    *,
    prefix: str = "",
    test_name: str = "t10k",
    num_classes: int = 10,
    label_offset: int = 0,
    transpose: bool = False,
    gz: bool = True,
    seed: int = 0,
) -> dict[str, Split]:
    """Write ``{prefix}{train,<test_name>}-{images-idx3,labels-idx1}-ubyte[.gz]`` into ``folder``.

    ``label_offset`` is added to the stored labels (EMNIST letters store 1..26); ``transpose``
    stores every image transposed (as EMNIST does). The returned arrays are what a loader that
    undoes both should produce.
    """
    out: dict[str, Split] = {}
    for split, file_split, n, s in (
        ("train", "train", n_train, seed),
        ("test", test_name, n_test, seed + 1),
    ):
        x, y = patterned_images(n, num_classes, 1, 28, seed=s)
        stored = x[:, 0].transpose(0, 2, 1) if transpose else x[:, 0]
        write_idx(folder / f"{prefix}{file_split}-images-idx3-ubyte", stored, gz=gz)
        write_idx(folder / f"{prefix}{file_split}-labels-idx1-ubyte", y + label_offset, gz=gz)
        out[split] = (x, y)
    return out


def write_mnist_fixture(
    root: Path, n_train: int = 60, n_test: int = 20, *, gz: bool = True, seed: int = 0
) -> dict[str, Split]:
    """MNIST in ``<root>/MNIST/raw`` (IDX, gzip by default)."""
    return write_idx_fixture(Path(root) / "MNIST" / "raw", n_train, n_test, gz=gz, seed=seed)


def write_fmnist_fixture(
    root: Path,
    n_train: int = 60,
    n_test: int = 20,
    *,
    gz: bool = True,
    seed: int = 0,
    folder: Path | None = None,
) -> dict[str, Split]:
    """Fashion-MNIST in ``<root>/FashionMNIST/raw`` (or in ``folder``, e.g. a Debian-like dir)."""
    target = Path(folder) if folder is not None else Path(root) / "FashionMNIST" / "raw"
    return write_idx_fixture(target, n_train, n_test, gz=gz, seed=seed)


EMNIST_CLASSES = EMNIST_SPLITS


def write_emnist_fixture(
    root: Path,
    split: str = "balanced",
    n_train: int = 60,
    n_test: int = 20,
    *,
    gz: bool = True,
    seed: int = 0,
    folder: Path | None = None,
) -> dict[str, Split]:
    """EMNIST ``split`` in ``<root>/EMNIST/raw``: images stored transposed, letters as 1..26."""
    target = Path(folder) if folder is not None else Path(root) / "EMNIST" / "raw"
    return write_idx_fixture(
        target,
        n_train,
        n_test,
        prefix=f"emnist-{split}-",
        test_name="test",
        num_classes=EMNIST_CLASSES[split],
        label_offset=1 if split == "letters" else 0,
        transpose=True,
        gz=gz,
        seed=seed,
    )


def cifar_records(x: np.ndarray, labels: list[np.ndarray]) -> bytes:
    """CIFAR binary records: the label bytes (coarse, fine, ...) then 3072 pixel bytes (CHW)."""
    cols = [np.asarray(lab, dtype=np.uint8)[:, None] for lab in labels]
    rows = np.concatenate([*cols, x.reshape(len(x), -1)], axis=1)
    return rows.astype(np.uint8).tobytes()


def write_cifar10_fixture(
    root: Path, n_per_batch: int = 10, n_test: int = 10, *, seed: int = 0
) -> dict[str, Split]:
    """CIFAR-10 binary version in ``<root>/cifar-10-batches-bin`` (5 train batches + test)."""
    folder = Path(root) / "cifar-10-batches-bin"
    folder.mkdir(parents=True, exist_ok=True)
    x, y = patterned_images(5 * n_per_batch, 10, 3, 32, seed=seed)
    for i in range(5):
        part = slice(i * n_per_batch, (i + 1) * n_per_batch)
        (folder / f"data_batch_{i + 1}.bin").write_bytes(cifar_records(x[part], [y[part]]))
    tx, ty = patterned_images(n_test, 10, 3, 32, seed=seed + 1)
    (folder / "test_batch.bin").write_bytes(cifar_records(tx, [ty]))
    (folder / "batches.meta.txt").write_text("\n".join(CINIC_CLASSES) + "\n")
    return {"train": (x, y), "test": (tx, ty)}


def write_cifar100_fixture(
    root: Path, n_train: int = 200, n_test: int = 100, *, seed: int = 0
) -> dict[str, Split]:
    """CIFAR-100 binary version in ``<root>/cifar-100-binary``; coarse label = fine // 5."""
    folder = Path(root) / "cifar-100-binary"
    folder.mkdir(parents=True, exist_ok=True)
    out: dict[str, Split] = {}
    for split, name, n, s in (
        ("train", "train.bin", n_train, seed),
        ("test", "test.bin", n_test, seed + 1),
    ):
        x, y = patterned_images(n, 100, 3, 32, seed=s)
        (folder / name).write_bytes(cifar_records(x, [y // 5, y]))
        out[split] = (x, y)
    return out


def write_svhn_fixture(
    root: Path, n_train: int = 30, n_test: int = 20, *, seed: int = 0
) -> dict[str, Split]:
    """SVHN ``<root>/SVHN/{train,test}_32x32.mat``: X is 32x32x3xN, y in 1..10 (10 = digit 0)."""
    from scipy.io import savemat

    folder = Path(root) / "SVHN"
    folder.mkdir(parents=True, exist_ok=True)
    out: dict[str, Split] = {}
    for split, n, s in (("train", n_train, seed), ("test", n_test, seed + 1)):
        x, y = patterned_images(n, 10, 3, 32, seed=s)
        stored_y = np.where(y == 0, 10, y).astype(np.uint8)[:, None]
        savemat(folder / f"{split}_32x32.mat", {"X": x.transpose(2, 3, 1, 0), "y": stored_y})
        out[split] = (x, y)
    return out


def _save_image(path: Path, chw: np.ndarray) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.ascontiguousarray(chw.transpose(1, 2, 0))).save(path)


def write_cinic10_fixture(
    root: Path,
    n_per_class: int = 2,
    *,
    classes: tuple[str, ...] = CINIC_CLASSES,
    seed: int = 0,
) -> dict[str, Split]:
    """CINIC-10 PNG folders ``<root>/CINIC-10/{train,valid,test}/<class>/*.png``.

    ``n_per_class`` images per class and split; the returned train split is train then valid,
    each in sorted class order then file-name order (the loader's order).
    """
    base = Path(root) / "CINIC-10"
    order = sorted(classes)
    parts: dict[str, Split] = {}
    for i, split in enumerate(("train", "valid", "test")):
        y = np.repeat(np.arange(len(order), dtype=np.int64), n_per_class)
        x, _ = patterned_images(len(y), len(order), 3, 32, seed=seed + i, labels=y)
        for j, (img, label) in enumerate(zip(x, y, strict=True)):
            name = f"cifar10-{split}-{j:05d}.png" if j % 2 else f"n0000{label}_{j:05d}.png"
            _save_image(base / split / order[label] / name, img)
        # the loader reads each class folder in file-name order
        keys = [
            (label, f"cifar10-{split}-{j:05d}.png" if j % 2 else f"n0000{label}_{j:05d}.png")
            for j, label in enumerate(y)
        ]
        perm = sorted(range(len(y)), key=lambda k: keys[k])
        parts[split] = (x[perm], y[perm])
    train = (
        np.concatenate([parts["train"][0], parts["valid"][0]]),
        np.concatenate([parts["train"][1], parts["valid"][1]]),
    )
    return {"train": train, "test": parts["test"]}


def write_tinyimagenet_fixture(
    root: Path,
    wnids: tuple[str, ...] = TINY_WNIDS,
    n_train_per_class: int = 2,
    n_val_per_class: int = 1,
    *,
    seed: int = 0,
) -> dict[str, Split]:
    """Tiny-ImageNet layout under ``<root>/tiny-imagenet-200`` with 64x64 JPEGs.

    JPEG is lossy: compare returned pixels approximately. Labels follow ``wnids.txt`` order.
    """
    base = Path(root) / "tiny-imagenet-200"
    base.mkdir(parents=True, exist_ok=True)
    (base / "wnids.txt").write_text("\n".join(wnids) + "\n")
    (base / "words.txt").write_text("".join(f"{w}\tthing {i}\n" for i, w in enumerate(wnids)))
    k = len(wnids)
    y = np.repeat(np.arange(k, dtype=np.int64), n_train_per_class)
    x, _ = patterned_images(len(y), k, 3, 64, seed=seed, labels=y)
    for j, (img, label) in enumerate(zip(x, y, strict=True)):
        w = wnids[label]
        _save_image(base / "train" / w / "images" / f"{w}_{j:04d}.JPEG", img)
        with open(base / "train" / w / f"{w}_boxes.txt", "a") as fh:
            fh.write(f"{w}_{j:04d}.JPEG\t0\t0\t63\t63\n")
    vy = np.tile(np.arange(k, dtype=np.int64), n_val_per_class)
    vx, _ = patterned_images(len(vy), k, 3, 64, seed=seed, labels=vy)
    lines = []
    for j, (img, label) in enumerate(zip(vx, vy, strict=True)):
        _save_image(base / "val" / "images" / f"val_{j}.JPEG", img)
        lines.append(f"val_{j}.JPEG\t{wnids[label]}\t0\t0\t63\t63")
    (base / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")
    return {"train": (x, y), "test": (vx, vy)}


MEDMNIST_SHAPES = {"pathmnist": (3, 9), "organamnist": (1, 11), "organcmnist": (1, 11)}


def write_medmnist_fixture(
    root: Path,
    name: str = "pathmnist",
    n_train: int = 30,
    n_val: int = 10,
    n_test: int = 15,
    *,
    flat: bool = False,
    seed: int = 0,
) -> dict[str, Split]:
    """A MedMNIST ``<root>/MedMNIST/<name>.npz`` (``<root>/<name>.npz`` when ``flat``).

    Arrays as MedMNIST ships them: images ``[N, 28, 28, 3]`` (RGB) or ``[N, 28, 28]``, labels
    ``[N, 1]``. The returned train split is train then val.
    """
    channels, num_classes = MEDMNIST_SHAPES[name]
    folder = Path(root) if flat else Path(root) / "MedMNIST"
    folder.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray] = {}
    parts: dict[str, Split] = {}
    for i, (split, n) in enumerate((("train", n_train), ("val", n_val), ("test", n_test))):
        x, y = patterned_images(n, num_classes, channels, 28, seed=seed + i)
        arrays[f"{split}_images"] = x.transpose(0, 2, 3, 1) if channels == 3 else x[:, 0]
        arrays[f"{split}_labels"] = y[:, None].astype(np.uint8)
        parts[split] = (x, y)
    np.savez_compressed(folder / f"{name}.npz", **arrays)
    train = (
        np.concatenate([parts["train"][0], parts["val"][0]]),
        np.concatenate([parts["train"][1], parts["val"][1]]),
    )
    return {"train": train, "test": parts["test"]}


def tar_gz_of(folder: Path, arcname: str, dest: Path) -> Path:
    """Pack ``folder`` as ``arcname/`` into the gzip tarball ``dest`` (like the CIFAR archives)."""
    with tarfile.open(dest, "w:gz") as tf:
        tf.add(folder, arcname=arcname)
    return dest


def zip_of(files: dict[str, bytes], dest: Path) -> Path:
    """A zip archive at ``dest`` holding ``files`` (member name -> content)."""
    with zipfile.ZipFile(dest, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return dest


def evil_tar(dest: Path, member: str = "../escaped.txt", *, symlink: bool = False) -> Path:
    """A tar.gz whose member tries to leave the extraction directory (path or symlink)."""
    with tarfile.open(dest, "w:gz") as tf:
        info = tarfile.TarInfo(member)
        if symlink:
            info.type = tarfile.SYMTYPE
            info.linkname = "/etc/passwd"
            tf.addfile(info)
        else:
            data = b"gotcha"
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return dest
