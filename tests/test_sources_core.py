"""Dataset readers on small fixtures written in the real on-disk formats (no network, no shared data)."""

import gzip
import struct

import numpy as np
import pytest
import torch

from fedpart.data import load_dataset
from fedpart.data.transforms import prepare_batch
from fedpart.errors import ConfigError, DataError


def idx_bytes(array: np.ndarray) -> bytes:
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + b"".join(
        struct.pack(">I", d) for d in array.shape
    )
    return header + array.astype(np.uint8).tobytes()


def write_idx_dataset(folder, prefix="", n_train=20, n_test=8, classes=10, size=28, gz=True):
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    out = {}
    for split, n in (("train", n_train), ("t10k" if not prefix else "test", n_test)):
        x = rng.integers(0, 256, size=(n, size, size), dtype=np.uint8)
        y = rng.integers(0, classes, size=n, dtype=np.uint8)
        for kind, arr in (("images-idx3", x), ("labels-idx1", y)):
            name = f"{prefix}{split}-{kind}-ubyte"
            data = idx_bytes(arr)
            if gz:
                (folder / f"{name}.gz").write_bytes(gzip.compress(data))
            else:
                (folder / name).write_bytes(data)
        out[split] = (x, y)
    return out


def test_mnist_idx_gz_and_raw(tmp_path):
    arrays = write_idx_dataset(tmp_path / "MNIST" / "raw")
    b = load_dataset("mnist", tmp_path, download=False)
    assert b.train_x.shape == (20, 1, 28, 28) and b.train_x.dtype == torch.uint8
    assert torch.equal(b.train_y, torch.tensor(arrays["train"][1], dtype=torch.long))
    assert b.test_x.shape == (8, 1, 28, 28) and b.num_classes == 10
    write_idx_dataset(tmp_path / "FashionMNIST" / "raw", gz=False)
    assert load_dataset("fmnist", tmp_path, download=False).train_x.shape[0] == 20


def test_missing_files_are_named(tmp_path):
    with pytest.raises(DataError) as err:
        load_dataset("mnist", tmp_path, download=False)
    msg = str(err.value)
    assert (
        "train-images-idx3-ubyte" in msg
        and str(tmp_path / "MNIST" / "raw") in msg
        and "\n" not in msg
    )


def test_truncated_file_is_detected_and_named(tmp_path):
    folder = tmp_path / "MNIST" / "raw"
    write_idx_dataset(folder, gz=False)
    path = folder / "train-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(DataError, match="train-images-idx3-ubyte is truncated"):
        load_dataset("mnist", tmp_path, download=False)


def test_corrupted_gzip_is_detected_and_named(tmp_path):
    folder = tmp_path / "MNIST" / "raw"
    write_idx_dataset(folder)
    path = folder / "t10k-labels-idx1-ubyte.gz"
    path.write_bytes(path.read_bytes()[:20])
    with pytest.raises(DataError, match="t10k-labels-idx1-ubyte.gz is corrupted"):
        load_dataset("mnist", tmp_path, download=False)


def test_known_file_with_wrong_checksum(tmp_path):
    """A file whose header claims the full official MNIST size must match its published MD5."""
    folder = tmp_path / "MNIST" / "raw"
    write_idx_dataset(folder)
    labels = np.zeros(60000, dtype=np.uint8)
    (folder / "train-labels-idx1-ubyte.gz").write_bytes(gzip.compress(idx_bytes(labels)))
    with pytest.raises(DataError, match="train-labels-idx1-ubyte.gz is corrupted: MD5"):
        load_dataset("mnist", tmp_path, download=False)


def test_emnist_is_transposed_and_letters_shifted(tmp_path):
    folder = tmp_path / "EMNIST" / "raw"
    arrays = write_idx_dataset(folder, prefix="emnist-letters-", classes=26)
    (folder / "emnist-letters-train-labels-idx1-ubyte.gz").write_bytes(
        gzip.compress(idx_bytes(arrays["train"][1] + 1))
    )
    b = load_dataset("emnist", tmp_path, download=False, split="letters")
    assert b.num_classes == 26
    assert torch.equal(b.train_x[0, 0], torch.tensor(arrays["train"][0][0].T))
    assert int(b.train_y.min()) >= 0 and torch.equal(
        b.train_y, torch.tensor(arrays["train"][1], dtype=torch.long)
    )
    with pytest.raises(ConfigError, match="dataset.split"):
        load_dataset("emnist", tmp_path, download=False, split="everything")


def test_cifar_binary(tmp_path):
    folder = tmp_path / "cifar-10-batches-bin"
    folder.mkdir()
    rng = np.random.default_rng(1)
    for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
        rows = np.concatenate(
            [rng.integers(0, 10, (3, 1)), rng.integers(0, 256, (3, 3072))], axis=1
        )
        (folder / name).write_bytes(rows.astype(np.uint8).tobytes())
    b = load_dataset("cifar10", tmp_path, download=False)
    assert (
        b.train_x.shape == (15, 3, 32, 32)
        and b.test_x.shape == (3, 3, 32, 32)
        and b.augment == "crop_flip"
    )
    (folder / "test_batch.bin").write_bytes(b"\x00" * 100)
    with pytest.raises(DataError, match="test_batch.bin is truncated"):
        load_dataset("cifar10", tmp_path, download=False)


def test_cifar100_fine_labels(tmp_path):
    folder = tmp_path / "cifar-100-binary"
    folder.mkdir()
    for name in ("train.bin", "test.bin"):
        rows = np.zeros((4, 3074), dtype=np.uint8)
        rows[:, 0] = 3  # coarse
        rows[:, 1] = [10, 20, 30, 99]  # fine
        (folder / name).write_bytes(rows.tobytes())
    b = load_dataset("cifar100", tmp_path, download=False)
    assert b.train_y.tolist() == [10, 20, 30, 99] and b.num_classes == 100


def test_svhn_mat_label_ten_is_zero(tmp_path):
    from scipy.io import savemat

    folder = tmp_path / "SVHN"
    folder.mkdir()
    x = np.random.default_rng(0).integers(0, 256, (32, 32, 3, 5), dtype=np.uint8)
    for split in ("train", "test"):
        savemat(folder / f"{split}_32x32.mat", {"X": x, "y": np.array([[10], [1], [2], [10], [9]])})
    b = load_dataset("svhn", tmp_path, download=False)
    assert b.train_y.tolist() == [0, 1, 2, 0, 9]
    assert torch.equal(b.train_x[0], torch.tensor(x[..., 0]).permute(2, 0, 1))


def test_medmnist_npz(tmp_path):
    folder = tmp_path / "MedMNIST"
    folder.mkdir()
    rng = np.random.default_rng(0)
    arrays = {}
    for split, n in (("train", 6), ("val", 2), ("test", 3)):
        arrays[f"{split}_images"] = rng.integers(0, 256, (n, 28, 28, 3), dtype=np.uint8)
        arrays[f"{split}_labels"] = rng.integers(0, 9, (n, 1))
    np.savez(folder / "pathmnist.npz", **arrays)
    b = load_dataset("pathmnist", tmp_path, download=False)
    assert (
        b.train_x.shape == (8, 3, 28, 28)
        and b.test_x.shape == (3, 3, 28, 28)
        and b.num_classes == 9
    )
    (folder / "organamnist.npz").write_bytes(b"not a zip")
    with pytest.raises(DataError, match="organamnist.npz is corrupted"):
        load_dataset("organamnist", tmp_path, download=False)


def test_image_folders(tmp_path):
    from PIL import Image

    root = tmp_path / "tiny-imagenet-200"
    (root / "val" / "images").mkdir(parents=True)
    (root / "wnids.txt").write_text("n01\nn02\n")
    lines = []
    for k, wnid in enumerate(("n01", "n02")):
        (root / "train" / wnid / "images").mkdir(parents=True)
        Image.new("RGB", (64, 64), (k * 100, 0, 0)).save(
            root / "train" / wnid / "images" / f"{wnid}_0.JPEG"
        )
        Image.new("RGB", (64, 64), (0, k * 100, 0)).save(root / "val" / "images" / f"val_{k}.JPEG")
        lines.append(f"val_{k}.JPEG\t{wnid}\t0\t0\t63\t63")
    (root / "val" / "val_annotations.txt").write_text("\n".join(lines))
    b = load_dataset("tinyimagenet", tmp_path, download=False)
    assert b.train_x.shape == (2, 3, 64, 64) and b.test_y.tolist() == [0, 1] and b.num_classes == 2


def test_offline_sources_and_options():
    d = load_dataset("digits")
    assert d.train_x.shape == (1797, 1, 8, 8) and d.test_x is None and int(d.train_x.max()) == 255
    s = load_dataset("synthetic", num_samples=100, num_features=7, num_classes=3)
    assert s.train_x.shape == (100, 7) and s.test_x.shape == (20, 7) and int(s.train_y.max()) <= 2
    with pytest.raises(ConfigError, match="dataset.bogus"):
        load_dataset("digits", bogus=1)
    with pytest.raises(ConfigError, match="valid choices"):
        load_dataset("imagenet22k")


def test_prepare_batch_normalises_and_augments_deterministically():
    x = torch.randint(0, 256, (6, 3, 8, 8), dtype=torch.uint8)
    plain = prepare_batch(x, (0.5, 0.5, 0.5), (0.25, 0.25, 0.25))
    assert torch.allclose(plain, (x.float() / 255 - 0.5) / 0.25)
    a = prepare_batch(
        x, (0.0,) * 3, (1.0,) * 3, augment="crop_flip", generator=torch.Generator().manual_seed(3)
    )
    b = prepare_batch(
        x, (0.0,) * 3, (1.0,) * 3, augment="crop_flip", generator=torch.Generator().manual_seed(3)
    )
    assert torch.equal(a, b) and a.shape == x.shape
    assert not torch.equal(a, x.float() / 255)
    ones = torch.full((1, 1, 4, 4), 255, dtype=torch.uint8)
    cropped = prepare_batch(
        ones, (), (), augment="crop", generator=torch.Generator().manual_seed(0)
    )
    assert cropped.sum() <= 16  # zero padding shows up unless the offset is exactly centred
    from fedpart.data.transforms import random_flip

    img = torch.arange(16.0).view(1, 1, 4, 4).repeat(64, 1, 1, 1)
    out = random_flip(img, torch.Generator().manual_seed(0))
    flipped = [torch.equal(o, img[0].flip(2)) for o in out]
    kept = [torch.equal(o, img[0]) for o in out]
    assert all(f or k for f, k in zip(flipped, kept, strict=True)) and 10 < sum(flipped) < 54
