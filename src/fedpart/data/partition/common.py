"""What the partition schemes share: labels checked, indices by class, cuts by proportion,
Dirichlet draws that never underflow, and the failed draws of a ``min_size`` requirement."""

from __future__ import annotations

import numpy as np

from fedpart.errors import DataError

#: Redraws are declared hopeless when each of the first _PROBE_DRAWS draws left at least
#: _HOPELESS clients below min_size: a draw with none is then about e^-20 likely (the
#: undersized count is roughly Poisson), so the remaining draws would only take time.
_PROBE_DRAWS = 5
_HOPELESS = 20


def as_labels(labels: np.ndarray) -> np.ndarray:
    """``labels`` as a one-dimensional ``int64`` array of non-negative class labels (checked)."""
    y = np.asarray(labels)
    if y.ndim != 1:
        raise DataError(f"labels must be one-dimensional, got shape {y.shape}")
    if y.size and (not np.issubdtype(y.dtype, np.integer) or y.min() < 0):
        raise DataError("labels must be non-negative integers")
    return y.astype(np.int64, copy=False)


def class_indices(y: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """The classes present in ``y`` (ascending) and the indices of each."""
    classes = np.unique(y)
    if len(classes) == 0:
        return classes, []
    order = np.argsort(y, kind="stable")
    bounds = np.searchsorted(y[order], classes, side="left")
    return classes, np.split(order, bounds[1:])


def split_by_proportions(idx: np.ndarray, proportions: np.ndarray) -> list[np.ndarray]:
    """Cut ``idx`` into consecutive pieces, piece j about ``proportions[j]`` of its length."""
    cuts = (np.cumsum(proportions) * len(idx)).astype(np.int64)[:-1]
    return np.split(idx, np.minimum(cuts, len(idx)))


def draw_dirichlet(
    rng: np.random.Generator, concentration: np.ndarray, size: int | None = None
) -> np.ndarray:
    """Dirichlet draws; a draw that underflows (possible for tiny concentrations) is redrawn."""
    out = rng.dirichlet(concentration, size=size)
    bad = ~np.all(np.isfinite(out), axis=-1) | (out.sum(axis=-1) <= 0)
    while np.any(bad):
        out[bad] = rng.dirichlet(concentration, size=int(np.sum(bad)) if size is not None else None)
        bad = ~np.all(np.isfinite(out), axis=-1) | (out.sum(axis=-1) <= 0)
    return out


class Redraws:
    """The failed draws of a ``min_size`` partition: stops hopeless redrawing early and names
    the fix (the smallest client size the best draw reached)."""

    def __init__(self, min_size: int, num_clients: int, alpha: float, n: int) -> None:
        self.min_size = min_size
        self.what = f"{num_clients} clients, alpha {alpha:g} and {n} samples"
        self.undersized: list[int] = []
        self.best = 0

    def failed(self, sizes: np.ndarray) -> None:
        """Record a draw that missed; raise at once when the first draws show it is hopeless."""
        self.undersized.append(int(np.sum(sizes < self.min_size)))
        self.best = max(self.best, int(sizes.min()))
        if len(self.undersized) == _PROBE_DRAWS and min(self.undersized) >= _HOPELESS:
            lo, hi = min(self.undersized), max(self.undersized)
            raise DataError(
                f"partition.min_size={self.min_size} cannot be met with {self.what}: each of "
                f"the first {_PROBE_DRAWS} draws left {lo}-{hi} clients below it, so redrawing "
                f"is hopeless; {self._fix()}"
            )

    def error(self) -> DataError:
        return DataError(
            f"partition.min_size={self.min_size} cannot be met with {self.what} (tried "
            f"{len(self.undersized)} draws); {self._fix()}"
        )

    def _fix(self) -> str:
        return (
            "lower partition.min_size or raise partition.alpha (or use fewer clients); the "
            f"best draw gave every client at least {self.best} samples"
        )
