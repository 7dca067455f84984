"""Dataset readers, downloads and checksums on fixtures in the real formats (never the network)."""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch

from fedpart.data import DATASETS, load_dataset, resolve_root
from fedpart.data import download as dl
from fedpart.data.readers import files as reader_files
from fedpart.data.readers import idx as idx_reader
from fedpart.errors import ConfigError, DataError
from fixtures_data import (
    CINIC_CLASSES,
    TINY_WNIDS,
    evil_tar,
    idx_bytes,
    tar_gz_of,
    write_cifar10_fixture,
    write_cifar100_fixture,
    write_cinic10_fixture,
    write_emnist_fixture,
    write_fmnist_fixture,
    write_medmnist_fixture,
    write_mnist_fixture,
    write_svhn_fixture,
    write_tinyimagenet_fixture,
    zip_of,
)

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    """No test may reach the network; no test may see a Debian-installed Fashion-MNIST."""
    monkeypatch.setenv("FEDPART_OFFLINE", "1")
    monkeypatch.setattr(idx_reader, "DEBIAN_FASHION_MNIST", tmp_path / "no-debian-fmnist")


def assert_split(x: torch.Tensor, y: torch.Tensor, expected, shape) -> None:
    assert x.dtype == torch.uint8 and y.dtype == torch.int64
    assert tuple(x.shape) == (len(expected[1]), *shape)
    assert torch.equal(x, torch.from_numpy(expected[0]))
    assert torch.equal(y, torch.from_numpy(expected[1]))


# ----------------------------------------------------------------------------- registry & root


def test_registry_lists_every_dataset_with_docs():
    expected = {
        "mnist", "fmnist", "emnist", "cifar10", "cifar100", "svhn", "cinic10", "tinyimagenet",
        "pathmnist", "organamnist", "organcmnist", "digits", "synthetic",
    }  # fmt: skip
    assert set(DATASETS) == expected
    for name, info in DATASETS.items():
        assert info.name == name and info.description and info.num_classes >= 2
        assert info.offline == (name in ("digits", "synthetic"))
        assert info.files or info.offline
        # every downloadable dataset lists its sources, each with an MD5
        if not info.offline:
            assert all(r.md5 for r in dl.RESOURCES[name])
    assert DATASETS["emnist"].options.keys() == {"split"}
    assert DATASETS["synthetic"].options.keys() == {
        "num_samples", "num_features", "num_classes", "seed", "noise",
    }  # fmt: skip


def test_resolve_root(monkeypatch, tmp_path):
    monkeypatch.delenv("FEDPART_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert resolve_root(None) == tmp_path / "xdg" / "fedpart" / "data"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert resolve_root(None) == tmp_path / "home" / ".cache" / "fedpart" / "data"
    monkeypatch.setenv("FEDPART_DATA", str(tmp_path / "env"))
    assert resolve_root(None) == tmp_path / "env"
    assert resolve_root(tmp_path / "arg") == tmp_path / "arg"
    assert resolve_root("~/d") == tmp_path / "home" / "d"


def test_unknown_dataset_and_options():
    with pytest.raises(ConfigError, match="unknown dataset 'cifar11'; valid choices: cifar10, "):
        load_dataset("cifar11")
    with pytest.raises(ConfigError) as err:
        load_dataset("mnist", download=False, split="balanced")
    assert err.value.key == "dataset.split" and "unknown option for mnist" in str(err.value)
    with pytest.raises(ConfigError) as err:
        load_dataset("synthetic", samples=10)
    assert err.value.key == "dataset.samples" and "valid: noise, num_classes" in str(err.value)
    with pytest.raises(ConfigError, match="dataset.split"):
        load_dataset("emnist", download=False, split="bymerge2")


# ----------------------------------------------------------------------------- IDX family


@pytest.mark.parametrize("gz", [True, False])
def test_mnist_fixture_roundtrip(tmp_path, gz):
    expected = write_mnist_fixture(tmp_path, 30, 12, gz=gz)
    b = load_dataset("mnist", tmp_path, download=False)
    assert_split(b.train_x, b.train_y, expected["train"], (1, 28, 28))
    assert_split(b.test_x, b.test_y, expected["test"], (1, 28, 28))
    assert (b.name, b.num_classes, b.input_shape, b.augment) == ("mnist", 10, (1, 28, 28), "none")
    assert b.mean == (0.1307,) and b.std == (0.3081,)


def test_fmnist_reads_debian_folder_when_root_lacks_it(tmp_path, monkeypatch):
    debian = tmp_path / "usr-share-datasets-fashion-mnist"
    expected = write_fmnist_fixture(tmp_path, 20, 10, folder=debian)
    monkeypatch.setattr(idx_reader, "DEBIAN_FASHION_MNIST", debian)
    b = load_dataset("fmnist", tmp_path / "empty-root", download=False)
    assert_split(b.train_x, b.train_y, expected["train"], (1, 28, 28))
    assert b.mean == (0.2860,) and b.std == (0.3530,)
    # a complete copy under the root wins over the Debian one
    mine = write_fmnist_fixture(tmp_path / "root", 7, 3, gz=False, seed=5)
    b = load_dataset("fmnist", tmp_path / "root", download=False)
    assert_split(b.train_x, b.train_y, mine["train"], (1, 28, 28))


def test_missing_files_named_in_one_line(tmp_path):
    write_fmnist_fixture(tmp_path, 5, 5)
    (tmp_path / "FashionMNIST" / "raw" / "t10k-images-idx3-ubyte.gz").unlink()
    with pytest.raises(DataError) as err:
        load_dataset("fmnist", tmp_path, download=False)
    msg = str(err.value)
    assert "\n" not in msg
    assert "t10k-images-idx3-ubyte.gz" in msg and "train-images" not in msg
    assert str(tmp_path / "FashionMNIST" / "raw") in msg
    assert "FEDPART_DATA" in msg and "dataset.download=false" in msg


def test_failed_download_reason_is_reported(tmp_path):
    with pytest.raises(DataError) as err:
        load_dataset("mnist", tmp_path, download=True)  # FEDPART_OFFLINE=1: no network attempt
    msg = str(err.value)
    assert msg.startswith("MNIST not found: place ")
    for name in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                 "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):  # fmt: skip
        assert name in msg
    assert "download failed" in msg and "FEDPART_OFFLINE" in msg


def test_truncated_and_corrupted_idx_files_are_named(tmp_path):
    write_mnist_fixture(tmp_path, 10, 5)
    raw = tmp_path / "MNIST" / "raw"
    # a gzip stream cut short
    path = raw / "train-images-idx3-ubyte.gz"
    good = path.read_bytes()
    path.write_bytes(good[: len(good) // 2])
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte\.gz.*delete it"):
        load_dataset("mnist", tmp_path, download=False)
    # not gzip at all
    path.write_bytes(b"this is not gzip data")
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte\.gz"):
        load_dataset("mnist", tmp_path, download=False)
    # valid gzip, IDX payload shorter than its header says
    path.write_bytes(gzip.compress(gzip.decompress(good)[:-28]))
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte\.gz is truncated"):
        load_dataset("mnist", tmp_path, download=False)
    path.write_bytes(good)
    # images and labels of different lengths
    (raw / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(idx_bytes(np.zeros(4))))
    with pytest.raises(DataError, match="t10k-labels-idx1-ubyte"):
        load_dataset("mnist", tmp_path, download=False)
    # labels out of range
    (raw / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(idx_bytes(np.full(5, 12))))
    with pytest.raises(DataError, match=r"t10k-labels-idx1-ubyte.*0\.\.9"):
        load_dataset("mnist", tmp_path, download=False)


def test_official_size_file_must_match_known_md5(tmp_path):
    write_mnist_fixture(tmp_path, 10, 5)
    raw = tmp_path / "MNIST" / "raw"
    (raw / "t10k-labels-idx1-ubyte.gz").unlink()
    (raw / "t10k-labels-idx1-ubyte").write_bytes(idx_bytes(np.zeros(10000)))
    (raw / "t10k-images-idx3-ubyte.gz").write_bytes(
        gzip.compress(idx_bytes(np.zeros((10000, 28, 28))))
    )
    with pytest.raises(DataError, match=r"t10k-images-idx3-ubyte\.gz is corrupted: MD5"):
        load_dataset("mnist", tmp_path, download=False)


@pytest.mark.parametrize("split", ["byclass", "balanced", "letters", "digits"])
def test_emnist_splits_transposed_and_labels(tmp_path, split):
    classes = {"byclass": 62, "balanced": 47, "letters": 26, "digits": 10}[split]
    expected = write_emnist_fixture(tmp_path, split, n_train=2 * classes, n_test=classes)
    b = load_dataset("emnist", tmp_path, download=False, split=split)
    assert b.num_classes == classes
    assert_split(b.train_x, b.train_y, expected["train"], (1, 28, 28))  # upright again
    assert_split(b.test_x, b.test_y, expected["test"], (1, 28, 28))
    assert int(b.train_y.min()) == 0 and int(b.train_y.max()) == classes - 1
    raw = tmp_path / "EMNIST" / "raw"
    stored = gzip.decompress((raw / f"emnist-{split}-train-images-idx3-ubyte.gz").read_bytes())
    first = np.frombuffer(stored, np.uint8, 28 * 28, 16).reshape(28, 28)
    assert np.array_equal(first.T, b.train_x[0, 0].numpy()) and not np.array_equal(first, first.T)


def test_emnist_missing_split_files_named(tmp_path):
    write_emnist_fixture(tmp_path, "digits", 10, 10)
    with pytest.raises(DataError) as err:
        load_dataset("emnist", tmp_path, download=False)  # default split: balanced
    assert "emnist-balanced-train-images-idx3-ubyte.gz" in str(err.value)
    assert str(tmp_path / "EMNIST" / "raw") in str(err.value)


# ----------------------------------------------------------------------------- CIFAR, SVHN


def test_cifar10_binary_layout(tmp_path):
    expected = write_cifar10_fixture(tmp_path, n_per_batch=4, n_test=6)
    b = load_dataset("cifar10", tmp_path, download=False)
    assert_split(b.train_x, b.train_y, expected["train"], (3, 32, 32))
    assert_split(b.test_x, b.test_y, expected["test"], (3, 32, 32))
    assert b.augment == "crop_flip" and len(b.mean) == 3 and len(b.std) == 3
    # the record's pixel bytes are the R, G, B planes, row-major
    raw = (tmp_path / "cifar-10-batches-bin" / "data_batch_1.bin").read_bytes()
    assert raw[0] == int(b.train_y[0])
    assert bytes(b.train_x[0].flatten().tolist()) == raw[1:3073]


def test_cifar10_truncated_and_bad_labels(tmp_path):
    write_cifar10_fixture(tmp_path, n_per_batch=2, n_test=2)
    path = tmp_path / "cifar-10-batches-bin" / "data_batch_3.bin"
    good = path.read_bytes()
    path.write_bytes(good[:-1])
    with pytest.raises(DataError, match=r"data_batch_3\.bin is truncated"):
        load_dataset("cifar10", tmp_path, download=False)
    path.write_bytes(bytes([200]) + good[1:])
    with pytest.raises(DataError, match=r"data_batch_3\.bin holds labels"):
        load_dataset("cifar10", tmp_path, download=False)
    path.unlink()
    with pytest.raises(DataError) as err:
        load_dataset("cifar10", tmp_path, download=False)
    assert "data_batch_3.bin" in str(err.value) and "data_batch_1.bin" not in str(err.value)


def test_cifar100_uses_fine_labels(tmp_path):
    expected = write_cifar100_fixture(tmp_path, n_train=120, n_test=30)
    b = load_dataset("cifar100", tmp_path, download=False)
    assert_split(b.train_x, b.train_y, expected["train"], (3, 32, 32))
    assert b.num_classes == 100 and int(b.train_y.max()) == 99


def test_svhn_mat_layout_and_label_ten(tmp_path):
    expected = write_svhn_fixture(tmp_path, n_train=25, n_test=12)
    b = load_dataset("svhn", tmp_path, download=False)
    assert_split(b.train_x, b.train_y, expected["train"], (3, 32, 32))
    assert_split(b.test_x, b.test_y, expected["test"], (3, 32, 32))
    assert 0 in b.train_y.tolist() and 10 not in b.train_y.tolist()
    assert b.augment == "crop"  # no flips for digits
    (tmp_path / "SVHN" / "test_32x32.mat").write_bytes(b"MATLAB 5.0 MAT-file, garbage")
    with pytest.raises(DataError, match=r"test_32x32\.mat is corrupted"):
        load_dataset("svhn", tmp_path, download=False)
    (tmp_path / "SVHN" / "test_32x32.mat").unlink()
    with pytest.raises(DataError) as err:
        load_dataset("svhn", tmp_path, download=False)
    assert "test_32x32.mat" in str(err.value) and "train_32x32.mat" not in str(err.value)


# ----------------------------------------------------------------------------- image folders


def test_cinic10_png_folders(tmp_path):
    expected = write_cinic10_fixture(tmp_path, n_per_class=2)
    b = load_dataset("cinic10", tmp_path, download=False)
    assert_split(b.train_x, b.train_y, expected["train"], (3, 32, 32))  # train + valid
    assert_split(b.test_x, b.test_y, expected["test"], (3, 32, 32))
    assert b.num_classes == 10 and len(b.train_y) == 40 and b.augment == "crop_flip"
    assert b.train_y.bincount().tolist() == [4] * 10


def test_cinic10_nested_folder_and_missing_split(tmp_path):
    write_cinic10_fixture(tmp_path / "x", n_per_class=1, classes=CINIC_CLASSES[:2])
    (tmp_path / "CINIC-10").mkdir()
    (tmp_path / "x" / "CINIC-10").rename(tmp_path / "CINIC-10" / "CINIC-10")
    b = load_dataset("cinic10", tmp_path, download=False)
    assert b.num_classes == 2 and len(b.train_y) == 4
    root2 = tmp_path / "r2"
    write_cinic10_fixture(root2, n_per_class=1, classes=CINIC_CLASSES[:2])
    for p in (root2 / "CINIC-10" / "valid").rglob("*.png"):
        p.unlink()
    for d in sorted((root2 / "CINIC-10" / "valid").rglob("*"), reverse=True):
        d.rmdir()
    (root2 / "CINIC-10" / "valid").rmdir()
    with pytest.raises(DataError, match="valid/"):
        load_dataset("cinic10", root2, download=False)


def test_tinyimagenet_layout(tmp_path):
    expected = write_tinyimagenet_fixture(tmp_path, n_train_per_class=2, n_val_per_class=2)
    b = load_dataset("tinyimagenet", tmp_path, download=False)
    k = len(TINY_WNIDS)
    assert b.train_x.shape == (2 * k, 3, 64, 64) and b.test_x.shape == (2 * k, 3, 64, 64)
    assert torch.equal(b.train_y, torch.from_numpy(expected["train"][1]))
    assert torch.equal(b.test_y, torch.from_numpy(expected["test"][1]))
    assert b.num_classes == k and b.input_shape == (3, 64, 64)
    # JPEG is lossy (and the fixture's pixel noise is its worst case): compare by correlation
    for got, want in (
        (b.train_x, expected["train"][0]),
        (b.test_x, expected["test"][0]),
    ):
        flat = torch.cat([got.flatten(1), torch.from_numpy(want).flatten(1)]).double()
        corr = torch.corrcoef(flat)[: len(got), len(got) :]
        assert corr.diagonal().min() > 0.4
    (tmp_path / "tiny-imagenet-200" / "val" / "images" / "val_0.JPEG").write_bytes(b"junk")
    with pytest.raises(DataError, match=r"val_0\.JPEG cannot be read"):
        load_dataset("tinyimagenet", tmp_path, download=False)


def test_tinyimagenet_missing_class_folder(tmp_path):
    write_tinyimagenet_fixture(tmp_path, n_train_per_class=1)
    base = tmp_path / "tiny-imagenet-200"
    (base / "wnids.txt").write_text("\n".join([*TINY_WNIDS, "n09999999"]))
    with pytest.raises(DataError, match="n09999999"):
        load_dataset("tinyimagenet", tmp_path, download=False)


# ----------------------------------------------------------------------------- MedMNIST


@pytest.mark.parametrize("name", ["pathmnist", "organamnist", "organcmnist"])
def test_medmnist_npz(tmp_path, name):
    expected = write_medmnist_fixture(tmp_path, name, n_train=25, n_val=5, n_test=11)
    b = load_dataset(name, tmp_path, download=False)
    channels = 3 if name == "pathmnist" else 1
    assert_split(b.train_x, b.train_y, expected["train"], (channels, 28, 28))  # train + val
    assert_split(b.test_x, b.test_y, expected["test"], (channels, 28, 28))
    assert b.num_classes == (9 if name == "pathmnist" else 11)
    assert b.mean == (0.5,) * channels and b.std == (0.5,) * channels


def test_medmnist_flat_location_and_bad_files(tmp_path):
    write_medmnist_fixture(tmp_path, "organamnist", flat=True)
    assert load_dataset("organamnist", tmp_path, download=False).train_x.shape[1:] == (1, 28, 28)
    np.savez(tmp_path / "pathmnist.npz", train_images=np.zeros((2, 28, 28, 3), np.uint8))
    with pytest.raises(DataError, match="lacks arrays"):
        load_dataset("pathmnist", tmp_path, download=False)
    write_medmnist_fixture(tmp_path, "organcmnist")
    path = tmp_path / "MedMNIST" / "organcmnist.npz"
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(DataError, match=r"organcmnist\.npz is corrupted"):
        load_dataset("organcmnist", tmp_path, download=False)
    with pytest.raises(DataError, match=r"organcmnist\.npz"):  # missing
        path.unlink()
        load_dataset("organcmnist", tmp_path, download=False)


# ----------------------------------------------------------------------------- offline sources


def test_digits_bundle():
    b = load_dataset("digits")
    assert b.train_x.shape == (1797, 1, 8, 8) and b.train_x.dtype == torch.uint8
    assert b.test_x is None and b.test_y is None and b.num_classes == 10
    x = b.train_x.double() / 255
    assert b.mean[0] == pytest.approx(float(x.mean()), abs=1e-9)
    assert b.std[0] == pytest.approx(float(x.std(unbiased=False)), abs=1e-9)
    assert int(b.train_x.max()) == 255 and b.train_y.bincount().min() > 150


def test_synthetic_is_seeded_and_options_are_checked():
    a = load_dataset("synthetic", num_samples=120, num_features=9, num_classes=4, seed=3)
    b = load_dataset("synthetic", num_samples="120", num_features=9.0, num_classes=4, seed=3)
    assert a.train_x.dtype == torch.float32 and a.train_x.shape == (120, 9)
    assert a.test_x.shape == (24, 9) and a.input_shape == (9,) and a.mean == ()
    assert torch.equal(a.train_x, b.train_x) and torch.equal(a.test_y, b.test_y)
    c = load_dataset("synthetic", num_samples=120, num_features=9, num_classes=4, seed=4)
    assert not torch.equal(a.train_x, c.train_x)
    assert int(a.train_y.max()) < 4
    with pytest.raises(ConfigError, match="dataset.noise"):
        load_dataset("synthetic", noise=-1)
    with pytest.raises(ConfigError, match="dataset.num_classes"):
        load_dataset("synthetic", num_classes="many")


# ----------------------------------------------------------------------------- downloads


def test_fetch_verifies_md5_and_extracts_safely(tmp_path, monkeypatch):
    monkeypatch.delenv("FEDPART_OFFLINE")
    write_cifar10_fixture(tmp_path / "src", n_per_batch=1, n_test=1)
    archive = tar_gz_of(tmp_path / "src" / "cifar-10-batches-bin", "cifar-10-batches-bin",
                        tmp_path / "c.tar.gz")  # fmt: skip
    md5 = hashlib.md5(archive.read_bytes()).hexdigest()
    out = tmp_path / "out"
    with pytest.raises(dl.DownloadError, match="MD5"):
        dl.fetch(archive.as_uri(), out / "c.tar.gz", "0" * 32)
    assert not out.exists() or not any(out.iterdir())  # no partial file left behind
    dl.fetch(archive.as_uri(), out / "c.tar.gz", md5, extract_to=out)
    assert (out / "cifar-10-batches-bin" / "test_batch.bin").is_file()
    with pytest.raises(dl.DownloadError, match="unsafe path"):
        dl.extract_archive(evil_tar(tmp_path / "e1.tar.gz"), tmp_path / "x")
    with pytest.raises(dl.DownloadError, match="link"):
        dl.extract_archive(evil_tar(tmp_path / "e2.tar.gz", "ok", symlink=True), tmp_path / "x")
    with pytest.raises(dl.DownloadError, match="unsafe path"):
        dl.extract_archive(zip_of({"../../z.txt": b"z"}, tmp_path / "e.zip"), tmp_path / "x")
    assert not (tmp_path / "escaped.txt").exists() and not (tmp_path / "z.txt").exists()
    with pytest.raises(dl.DownloadError):
        dl.fetch((tmp_path / "absent.tar.gz").as_uri(), tmp_path / "y" / "z" / "absent.tar.gz")
    assert not (tmp_path / "y").exists()  # a failed download leaves no empty folders


def test_load_downloads_when_allowed(tmp_path, monkeypatch):
    """The whole download path, offline: the canonical URL is swapped for a file:// one."""
    monkeypatch.delenv("FEDPART_OFFLINE")
    expected = write_cifar10_fixture(tmp_path / "src", n_per_batch=2, n_test=3)
    archive = tar_gz_of(tmp_path / "src" / "cifar-10-batches-bin", "cifar-10-batches-bin",
                        tmp_path / "cifar-10-binary.tar.gz")  # fmt: skip
    md5 = hashlib.md5(archive.read_bytes()).hexdigest()
    res = dl.Resource(archive.as_uri(), "cifar-10-binary.tar.gz", md5)
    monkeypatch.setitem(dl.RESOURCES, "cifar10", (res,))
    root = tmp_path / "root"
    with pytest.raises(DataError, match="dataset.download=false"):
        load_dataset("cifar10", root, download=False)
    b = load_dataset("cifar10", root, download=True)
    assert_split(b.train_x, b.train_y, expected["train"], (3, 32, 32))
    assert not (root / "cifar-10-binary.tar.gz").exists()  # archive removed after extraction
    # a checksum mismatch is a failed download, reported with the files to place
    monkeypatch.setitem(
        dl.RESOURCES, "cifar100", (dl.Resource(archive.as_uri(), "a.tgz", "0" * 32),)
    )
    with pytest.raises(DataError, match=r"train\.bin, test\.bin .*download failed: .*MD5"):
        load_dataset("cifar100", root, download=True)


def test_emnist_zip_download_is_flattened(tmp_path, monkeypatch):
    monkeypatch.delenv("FEDPART_OFFLINE")
    src = tmp_path / "src"
    expected = write_emnist_fixture(tmp_path, "digits", 20, 10, folder=src)
    archive = zip_of({f"gzip/{p.name}": p.read_bytes() for p in src.iterdir()}, tmp_path / "g.zip")
    md5 = hashlib.md5(archive.read_bytes()).hexdigest()
    monkeypatch.setitem(dl.RESOURCES, "emnist", (dl.Resource(archive.as_uri(), "gzip.zip", md5),))
    b = load_dataset("emnist", tmp_path / "root", split="digits")
    assert_split(b.train_x, b.train_y, expected["train"], (1, 28, 28))
    raw = tmp_path / "root" / "EMNIST" / "raw"
    assert (raw / "emnist-digits-test-labels-idx1-ubyte.gz").is_file()


def test_only_missing_files_are_downloaded(tmp_path, monkeypatch):
    write_svhn_fixture(tmp_path, 5, 5)
    (tmp_path / "SVHN" / "test_32x32.mat").unlink()
    asked: list[str] = []

    def fake_fetch(url, dest, md5=None, **kw):
        asked.append(Path(dest).name)
        raise dl.DownloadError("no network in tests")

    monkeypatch.setattr(reader_files, "fetch", fake_fetch)
    with pytest.raises(DataError, match="no network in tests"):
        load_dataset("svhn", tmp_path, download=True)
    assert asked == ["test_32x32.mat"]


def test_read_only_root_reports_instead_of_crashing(tmp_path, monkeypatch):
    def failing_fetch(url, dest, md5=None, **kw):
        raise PermissionError(13, "Permission denied", str(dest))

    monkeypatch.setattr(reader_files, "fetch", failing_fetch)
    with pytest.raises(DataError, match="download failed: .*Permission denied"):
        load_dataset("pathmnist", tmp_path, download=True)


# ----------------------------------------------------------------------------- real data


@pytest.mark.skipif(
    not (SHARED_DATA / "MNIST" / "raw").is_dir(), reason="no local copy of MNIST (shared/data)"
)
def test_real_mnist_if_present():
    b = load_dataset("mnist", SHARED_DATA, download=False)  # also verifies the payload MD5s
    assert b.train_x.shape == (60000, 1, 28, 28) and b.test_x.shape == (10000, 1, 28, 28)
    assert b.train_y.bincount().tolist()[:3] == [5923, 6742, 5958]
    x = b.train_x.float() / 255
    assert float(x.mean()) == pytest.approx(b.mean[0], abs=1e-3)
    assert float(x.std()) == pytest.approx(b.std[0], abs=1e-3)
