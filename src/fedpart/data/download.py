"""Downloads with checksum verification, and safe archive extraction.

Every downloadable dataset lists its canonical URLs and the MD5 sums published for them in
:data:`RESOURCES`. :func:`fetch` downloads one file in a single attempt with a short timeout,
verifies its MD5, moves it into place and, for archives, extracts it without letting any member
escape the target directory. :data:`PAYLOAD_MD5` holds the MD5 of known *uncompressed* files, used
to check local copies (see :func:`verify_md5`).

No function here is called by the test suite with network access: the loaders take
``download=False``, and ``FEDPART_OFFLINE=1`` turns every download attempt off.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tarfile
import tempfile
import urllib.request
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from fedpart.errors import DataError

__all__ = [
    "PAYLOAD_MD5",
    "RESOURCES",
    "DownloadError",
    "Resource",
    "downloads_disabled",
    "extract_archive",
    "fetch",
    "md5_bytes",
    "md5_file",
    "verify_md5",
]

log = logging.getLogger("fedpart.data")

#: Seconds to wait for a server to answer (and between two received chunks).
TIMEOUT_S = 20.0
_CHUNK = 1 << 20


class DownloadError(Exception):
    """A download failed (network, HTTP status, checksum); the message is the reason."""


@dataclass(frozen=True)
class Resource:
    """One file to download: where from, the name to store it under, and its published MD5.

    ``md5`` is ``None`` where no published checksum could be confirmed; such a file is then
    only checked by its size and format when it is read.
    """

    url: str
    filename: str
    md5: str | None


_MNIST_URL = "https://ossci-datasets.s3.amazonaws.com/mnist/"
_FMNIST_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
_MEDMNIST_URL = "https://zenodo.org/records/10519652/files/"  # MedMNIST v3 (MedMNIST+) release

#: Canonical download sources per dataset name, MD5 as published for the downloaded file.
RESOURCES: dict[str, tuple[Resource, ...]] = {
    # MNIST / Fashion-MNIST: the gzip files and MD5s torchvision lists.
    "mnist": (
        Resource(
            _MNIST_URL + "train-images-idx3-ubyte.gz",
            "train-images-idx3-ubyte.gz",
            "f68b3c2dcbeaaa9fbdd348bbdeb94873",
        ),
        Resource(
            _MNIST_URL + "train-labels-idx1-ubyte.gz",
            "train-labels-idx1-ubyte.gz",
            "d53e105ee54ea40749a09fcbcd1e9432",
        ),
        Resource(
            _MNIST_URL + "t10k-images-idx3-ubyte.gz",
            "t10k-images-idx3-ubyte.gz",
            "9fb629c4189551a2d022fa330f9573f3",
        ),
        Resource(
            _MNIST_URL + "t10k-labels-idx1-ubyte.gz",
            "t10k-labels-idx1-ubyte.gz",
            "ec29112dd5afa0611ce80d1b7f02629c",
        ),
    ),
    "fmnist": (
        Resource(
            _FMNIST_URL + "train-images-idx3-ubyte.gz",
            "train-images-idx3-ubyte.gz",
            "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
        ),
        Resource(
            _FMNIST_URL + "train-labels-idx1-ubyte.gz",
            "train-labels-idx1-ubyte.gz",
            "25c81989df183df01b3e8a0aad5dffbe",
        ),
        Resource(
            _FMNIST_URL + "t10k-images-idx3-ubyte.gz",
            "t10k-images-idx3-ubyte.gz",
            "bef4ecab320f06d8554ea6380940ec79",
        ),
        Resource(
            _FMNIST_URL + "t10k-labels-idx1-ubyte.gz",
            "t10k-labels-idx1-ubyte.gz",
            "bb300cfdad3c16e7a12a480ee83cd310",
        ),
    ),
    # EMNIST: one zip holding every split as IDX gzip files under gzip/.
    "emnist": (
        Resource(
            "https://biometrics.nist.gov/cs_links/EMNIST/gzip.zip",
            "gzip.zip",
            "58c8d27c78d21e728a6bc7b3cc06412e",
        ),
    ),
    # CIFAR: the binary ("for C programs") versions, MD5 as on the CIFAR page.
    "cifar10": (
        Resource(
            "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz",
            "cifar-10-binary.tar.gz",
            "c32a1d4ab5d03f1284b67883e8d87530",
        ),
    ),
    "cifar100": (
        Resource(
            "https://www.cs.toronto.edu/~kriz/cifar-100-binary.tar.gz",
            "cifar-100-binary.tar.gz",
            "03b5dce01913d631647c71ecec9e9cb8",
        ),
    ),
    "svhn": (
        Resource(
            "http://ufldl.stanford.edu/housenumbers/train_32x32.mat",
            "train_32x32.mat",
            "e26dedcc434d2e4c54c9b2d4a06d8373",
        ),
        Resource(
            "http://ufldl.stanford.edu/housenumbers/test_32x32.mat",
            "test_32x32.mat",
            "eb5a983be6a315427106f1b164d9cef3",
        ),
    ),
    # CINIC-10: the Edinburgh DataShare archive. The MD5 is the one torchvision-style loaders
    # in the wild agree on; the DataShare page itself does not print it.
    "cinic10": (
        Resource(
            "https://datashare.ed.ac.uk/bitstream/handle/10283/3192/CINIC-10.tar.gz",
            "CINIC-10.tar.gz",
            "6ee4d0c996905fe93221de577967a372",
        ),
    ),
    "tinyimagenet": (
        Resource(
            "http://cs231n.stanford.edu/tiny-imagenet-200.zip",
            "tiny-imagenet-200.zip",
            "90528d7ca1a48142e341f4ef8d21d0de",
        ),
    ),
    # MedMNIST v3 files (28x28) and the MD5s in medmnist's INFO dict for that release. (The v2
    # release, zenodo record 6496656, has other MD5s for organ{a,c}mnist; local copies of either
    # release are read alike, since local .npz files are checked by format only.)
    "pathmnist": (
        Resource(
            _MEDMNIST_URL + "pathmnist.npz?download=1",
            "pathmnist.npz",
            "a8b06965200029087d5bd730944a56c1",
        ),
    ),
    "organamnist": (
        Resource(
            _MEDMNIST_URL + "organamnist.npz?download=1",
            "organamnist.npz",
            "68e3f8846a6bd62f0c9bf841c0d9eacc",
        ),
    ),
    "organcmnist": (
        Resource(
            _MEDMNIST_URL + "organcmnist.npz?download=1",
            "organcmnist.npz",
            "b9ceb9546e10131b32923c5bbeaea2b1",
        ),
    ),
}

#: MD5 of known uncompressed payloads, keyed ``"<folder>/<file name without .gz>"``. A local file
#: whose header says it is the full official file must match it byte for byte.
PAYLOAD_MD5: dict[str, str] = {
    "MNIST/train-images-idx3-ubyte": "6bbc9ace898e44ae57da46a324031adb",
    "MNIST/train-labels-idx1-ubyte": "a25bea736e30d166cdddb491f175f624",
    "MNIST/t10k-images-idx3-ubyte": "2646ac647ad5339dbf082846283269ea",
    "MNIST/t10k-labels-idx1-ubyte": "27ae3e4e09519cfbb04c329615203637",
    "FashionMNIST/train-images-idx3-ubyte": "f4a8712d7a061bf5bd6d2ca38dc4d50a",
    "FashionMNIST/train-labels-idx1-ubyte": "9018921c3c673c538a1fc5bad174d6f9",
    "FashionMNIST/t10k-images-idx3-ubyte": "8181f5470baa50b63fa0f6fddb340f0a",
    "FashionMNIST/t10k-labels-idx1-ubyte": "15d484375f8d13e6eb1aabb0c3f46965",
    "SVHN/train_32x32.mat": "e26dedcc434d2e4c54c9b2d4a06d8373",
    "SVHN/test_32x32.mat": "eb5a983be6a315427106f1b164d9cef3",
}

# (path, size, mtime_ns) of files whose MD5 was already checked in this process.
_VERIFIED: set[tuple[str, int, int]] = set()


def downloads_disabled() -> bool:
    """True when the environment variable ``FEDPART_OFFLINE`` is set to a true value."""
    return os.environ.get("FEDPART_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def md5_bytes(data: bytes | bytearray | memoryview) -> str:
    """Hex MD5 of an in-memory payload."""
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def md5_file(path: str | os.PathLike[str]) -> str:
    """Hex MD5 of a file, read in chunks."""
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def verify_md5(path: Path, expected: str, payload: bytes | None = None) -> None:
    """Raise :class:`DataError` naming ``path`` unless its MD5 (or the payload's) is ``expected``.

    ``payload`` is the decompressed content of a ``.gz`` file. A file that passed once is not
    hashed again in the same process while its size and modification time are unchanged.
    """
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key in _VERIFIED:
        return
    got = md5_bytes(payload) if payload is not None else md5_file(path)
    if got != expected:
        what = "its decompressed content" if payload is not None else "the file"
        raise DataError(
            f"{path} is corrupted: MD5 of {what} is {got}, expected {expected}; "
            "delete it and place a fresh copy"
        )
    _VERIFIED.add(key)


def fetch(
    url: str,
    dest: str | os.PathLike[str],
    md5: str | None = None,
    *,
    extract_to: str | os.PathLike[str] | None = None,
    timeout: float = TIMEOUT_S,
) -> Path:
    """Download ``url`` to ``dest`` (one attempt), check its MD5, and extract it if asked.

    The file is streamed to a temporary file beside ``dest`` and only renamed into place once
    complete and verified, so an interrupted download never leaves a partial file behind. With
    ``extract_to``, a ``.tar``, ``.tar.gz``/``.tgz`` or ``.zip`` archive is then unpacked there
    (see :func:`extract_archive`). Raises :class:`DownloadError` with the reason on any failure.
    """
    if downloads_disabled():
        raise DownloadError("downloads are turned off (FEDPART_OFFLINE is set)")
    dest = Path(dest)
    created = [d for d in (dest.parent, *dest.parent.parents) if not d.exists()]
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    tmp = Path(tmp_name)
    ok = False
    try:
        digest = hashlib.md5(usedforsecurity=False)
        log.info("downloading %s -> %s", url, dest)
        request = urllib.request.Request(url, headers={"User-Agent": "fedpart"})
        try:
            with os.fdopen(fd, "wb") as out, urllib.request.urlopen(request, timeout=timeout) as r:
                while chunk := r.read(_CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
        except OSError as exc:  # URLError, HTTPError, timeouts and disk errors are OSErrors
            reason = getattr(exc, "reason", None) or exc
            raise DownloadError(f"{url}: {reason}") from exc
        got = digest.hexdigest()
        if md5 is not None and got != md5:
            raise DownloadError(f"{url}: MD5 of the download is {got}, expected {md5}")
        os.replace(tmp, dest)
        ok = True
    finally:
        tmp.unlink(missing_ok=True)
        if not ok:  # leave no empty folders behind a failed download
            for d in created:
                try:
                    d.rmdir()
                except OSError:
                    break
    if md5 is None:
        log.warning("%s has no published checksum; only its format will be checked", dest.name)
    if extract_to is not None:
        extract_archive(dest, extract_to)
    return dest


def _check_member(name: str, dest: Path) -> Path:
    """The path ``name`` would take under ``dest``; reject absolute paths and ``..``."""
    pure = PurePosixPath(name.replace("\\", "/"))
    if pure.is_absolute() or ".." in pure.parts or (pure.parts and ":" in pure.parts[0]):
        raise DownloadError(f"unsafe path {name!r} in archive; refusing to extract it")
    target = (dest / Path(*pure.parts)).resolve() if pure.parts else dest.resolve()
    if not target.is_relative_to(dest.resolve()):
        raise DownloadError(f"unsafe path {name!r} in archive; refusing to extract it")
    return target


def extract_archive(
    archive: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    members: Iterable[str] | None = None,
) -> list[Path]:
    """Unpack a tar (optionally gzip/bz2/xz) or zip archive into ``dest``, safely.

    Only regular files and directories are extracted; links, devices, absolute paths and
    paths containing ``..`` are refused (:class:`DownloadError`), so nothing can land outside
    ``dest``. ``members`` restricts extraction to those names. Returns the files written.
    """
    archive = Path(archive)
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    wanted = set(members) if members is not None else None
    written: list[Path] = []
    try:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as zf:
                for info in zf.infolist():
                    if wanted is not None and info.filename not in wanted:
                        continue
                    target = _check_member(info.filename, dest)
                    if info.is_dir():
                        target.mkdir(parents=True, exist_ok=True)
                        continue
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with zf.open(info) as src, open(target, "wb") as out:
                        shutil.copyfileobj(src, out, _CHUNK)
                    written.append(target)
        elif tarfile.is_tarfile(archive):
            with tarfile.open(archive, "r:*") as tf:
                for m in tf:
                    if wanted is not None and m.name not in wanted:
                        continue
                    target = _check_member(m.name, dest)
                    if m.isdir():
                        target.mkdir(parents=True, exist_ok=True)
                        continue
                    if not m.isreg():
                        raise DownloadError(
                            f"archive member {m.name!r} is a link or special file; refusing it"
                        )
                    target.parent.mkdir(parents=True, exist_ok=True)
                    src = tf.extractfile(m)
                    assert src is not None  # regular members always have a file object
                    with src, open(target, "wb") as out:
                        shutil.copyfileobj(src, out, _CHUNK)
                    written.append(target)
        else:
            raise DownloadError(f"{archive} is not a tar or zip archive")
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as exc:
        raise DownloadError(f"cannot extract {archive}: {exc}") from exc
    return written
