"""SVHN's cropped digits, MATLAB ``.mat`` files (read with SciPy)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedpart.data.download import PAYLOAD_MD5, verify_md5
from fedpart.data.readers.bundle import make_bundle
from fedpart.data.readers.files import FIX, ensure_files
from fedpart.data.registry import DatasetBundle
from fedpart.errors import DataError

_SVHN_COUNTS = {"train_32x32.mat": 73257, "test_32x32.mat": 26032}


def load_svhn(root: Path, download: bool) -> DatasetBundle:
    from scipy.io import loadmat

    folder = root / "SVHN"
    ensure_files("svhn", folder, ["train_32x32.mat", "test_32x32.mat"], download)
    out = []
    for split in ("train", "test"):
        path = folder / f"{split}_32x32.mat"
        try:
            mat = loadmat(str(path), variable_names=("X", "y"))
            x, y = np.asarray(mat["X"]), np.asarray(mat["y"])
        except Exception as exc:  # noqa: BLE001 - any parse failure means a bad file
            raise DataError(f"{path} is corrupted or truncated ({exc}); {FIX}") from exc
        if x.ndim != 4 or x.shape[:3] != (32, 32, 3) or x.size == 0:
            raise DataError(f"{path} holds X of shape {x.shape}, expected 32x32x3xN; {FIX}")
        if y.size != x.shape[3]:
            raise DataError(f"{path} holds {x.shape[3]} images but {y.size} labels; {FIX}")
        # The full official file must match its published MD5 (subsets are checked by shape).
        if y.size == _SVHN_COUNTS[path.name]:
            verify_md5(path, PAYLOAD_MD5[f"SVHN/{path.name}"])
        x = np.ascontiguousarray(np.asarray(x, dtype=np.uint8).transpose(3, 2, 0, 1))
        y = np.asarray(y, dtype=np.int64).reshape(-1)
        if y.size and (y.min() < 1 or y.max() > 10):
            raise DataError(f"{path} holds labels outside 1..10; {FIX}")
        out.append((x, y % 10))  # label 10 is the digit 0
    return make_bundle(
        "svhn", out[0], out[1], 10, (0.4377, 0.4438, 0.4728), (0.1980, 0.2010, 0.1970), "crop"
    )
