"""The built-in datasets, registered through the public path a user's dataset takes
(:func:`fedpart.data.registry.register_dataset`, ``docs/extending.md``): one record each, with its
reader from :mod:`fedpart.data.readers` and the files it reads."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from fedpart.data.readers.cifar import load_cifar10, load_cifar100
from fedpart.data.readers.generated import load_digits, load_synthetic
from fedpart.data.readers.idx import IDX_FILES, load_emnist, load_fmnist, load_mnist
from fedpart.data.readers.image_folders import load_cinic10, load_tinyimagenet
from fedpart.data.readers.medmnist import MEDMNIST, load_medmnist
from fedpart.data.readers.svhn import load_svhn
from fedpart.data.registry import DatasetBundle, register_dataset

_IDX_GZ = tuple(f + ".gz" for f in IDX_FILES)


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
        return load_medmnist(name, root, download)

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
