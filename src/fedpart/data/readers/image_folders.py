"""Folders of image files, decoded with Pillow: CINIC-10 (PNG) and Tiny-ImageNet (JPEG)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from fedpart.data.readers.bundle import make_bundle
from fedpart.data.readers.files import FIX, ensure_files
from fedpart.data.registry import DatasetBundle
from fedpart.errors import DataError


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
            raise DataError(f"{p} cannot be read as an image ({exc}); {FIX}") from exc
        if arr.shape[:2] != (size, size):
            raise DataError(f"{p} is {arr.shape[1]}x{arr.shape[0]}, expected {size}x{size}; {FIX}")
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
    ensure_files(
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

    return make_bundle(
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
    ensure_files(
        "tinyimagenet",
        folder,
        ["wnids.txt", "train/", "val/images/", "val/val_annotations.txt"],
        download,
        archive_dir=root,
    )
    wnids = [w.strip() for w in (folder / "wnids.txt").read_text().split() if w.strip()]
    if not wnids:
        raise DataError(f"{folder / 'wnids.txt'} lists no classes; {FIX}")
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
                f"{annotations} line {lineno} is malformed or names a class not in wnids.txt; {FIX}"
            )
        vpaths.append(folder / "val" / "images" / parts[0])
        vlabels.append(index[parts[1]])
    test = (_read_images(vpaths, 64), np.asarray(vlabels, dtype=np.int64))
    return make_bundle(
        "tinyimagenet",
        train,
        test,
        len(wnids),
        (0.4802, 0.4481, 0.3975),
        (0.2302, 0.2265, 0.2262),
        "crop_flip",
    )
