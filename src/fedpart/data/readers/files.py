"""A dataset's files: found under its folder (``name`` or ``name.gz``), downloaded when they
are missing and downloading is allowed, or named with the directory in one error line."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable
from pathlib import Path

from fedpart.data.download import RESOURCES, DownloadError, fetch
from fedpart.data.registry import DATASETS
from fedpart.errors import DataError

#: the fix every error about a damaged file names
FIX = "delete it and place a fresh copy"


def missing_error(name: str, folder: Path, files: list[str], reason: str = "") -> DataError:
    why = f"; {reason}" if reason else ""
    return DataError(
        f"{DATASETS[name].display_name if name in DATASETS else name} not found: place {', '.join(files)} in {folder} "
        f"(or set dataset.root / FEDPART_DATA){why}"
    )


def present(folder: Path, name: str) -> bool:
    """``name`` (a file, ``name.gz``, or a directory when it ends in ``/``) exists in ``folder``."""
    if name.endswith("/"):
        return (folder / name).is_dir()
    return (
        find_file(folder, name) is not None
        or find_file(folder, name.removesuffix(".gz")) is not None
    )


def ensure_files(
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
    missing = [f for f in files if not present(folder, f)]
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
                if not is_archive and present(target_dir, res.filename):
                    continue  # only fetch what is missing
                fetch(res.url, dest, res.md5, extract_to=target_dir if is_archive else None)
                if is_archive:
                    dest.unlink(missing_ok=True)  # extracted: the archive is not needed again
            if after_download is not None:
                after_download()
            missing = [f for f in files if not present(folder, f)]
            if not missing:
                return
            reason = "the download did not contain the expected files"
        except (DownloadError, OSError) as exc:  # OSError: e.g. a read-only data root
            reason = f"download failed: {exc}"
    raise missing_error(name, folder, missing, reason)


def find_file(folder: Path, name: str) -> Path | None:
    """``name`` or ``name.gz`` under ``folder``."""
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    return None


def read_payload(path: Path) -> bytes:
    data = path.read_bytes()
    if path.suffix == ".gz":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise DataError(
                f"{path} is corrupted or truncated ({exc}); delete it and place a fresh copy"
            ) from exc
    return data
