"""Partitions of a labelled pool over clients, and per-client train/validation/test splits.

Every function draws its randomness from the ``numpy.random.Generator`` it is given, so the same
seed gives the same partition. Indices are positions in the ``labels`` array passed in; the caller
maps them back to its own pool. See ``docs/partitions.md`` for the conventions each kind follows.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedpart.errors import ConfigError, DataError

PARTITIONS: dict[str, str] = {
    "iid": "uniform random split into equal-sized clients",
    "dirichlet": "per class, p ~ Dir(alpha*1) over clients; clients above the mean size capped; "
    "redrawn until every client has min_size samples (PFLlib / FL-bench / MOON)",
    "dirichlet_prior": "per client, label proportions q ~ Dir(alpha*p_global), equal client sizes "
    "(FLGo / Pa3dFL)",
    "shards": "sort by label, cut into num_clients*shards_per_client shards, shards_per_client "
    "random shards per client (McMahan et al. pathological non-IID)",
    "classes": "classes_per_client classes per client, every class used about equally often, "
    "each class split evenly among its holders (FedFomo / Dis-PFL)",
}

#: Redraws are declared hopeless when each of the first _PROBE_DRAWS draws left at least
#: _HOPELESS clients below min_size: a draw with none is then about e^-20 likely (the
#: undersized count is roughly Poisson), so the remaining draws would only take time.
_PROBE_DRAWS = 5
_HOPELESS = 20
_BALANCE_TOL = 1e-6  # FLGo's default error bar on ||mean client distribution - global||^2
_BALANCE_PATIENCE = 500  # steps before the tolerance is relaxed tenfold (as FLGo)


# --------------------------------------------------------------------------- partitions
def partition(
    labels: np.ndarray,
    num_clients: int,
    kind: str,
    rng: np.random.Generator,
    *,
    alpha: float = 0.5,
    min_size: int = 10,
    shards_per_client: int = 2,
    classes_per_client: int = 2,
    max_tries: int = 1000,
) -> list[np.ndarray]:
    """Spread the samples of ``labels`` over ``num_clients`` clients.

    Args:
        labels: integer class label of every sample of the pool, shape ``[N]``.
        num_clients: number of clients.
        kind: one of :data:`PARTITIONS`.
        rng: the only source of randomness.
        alpha: Dirichlet concentration (``dirichlet``, ``dirichlet_prior``); smaller = more skew.
        min_size: minimum samples per client (``dirichlet``, ``dirichlet_prior``).
        shards_per_client: shards per client (``shards``).
        classes_per_client: classes per client (``classes``).
        max_tries: draws attempted before a ``min_size`` requirement is declared impossible.

    Returns:
        One sorted ``int64`` array of sample indices per client. No sample is given to two
        clients; ``iid``, ``dirichlet``, ``dirichlet_prior`` and ``shards`` assign every sample.

    Raises:
        ConfigError: unknown ``kind`` or an invalid option (the key is named).
        DataError: the partition is impossible for this pool (e.g. ``min_size`` cannot be met).
    """
    if kind not in PARTITIONS:
        raise ConfigError(
            "partition.kind",
            f"unknown partition '{kind}'; valid choices: {', '.join(sorted(PARTITIONS))}",
        )
    y = _as_labels(labels)
    n = len(y)
    if isinstance(num_clients, bool) or int(num_clients) != num_clients or num_clients < 1:
        raise ConfigError("partition.num_clients", f"expected an integer >= 1, got {num_clients}")
    num_clients = int(num_clients)
    if num_clients > n:
        raise ConfigError(
            "partition.num_clients",
            f"{num_clients} clients but only {n} samples; use at most {n} clients",
        )
    if kind == "iid":
        parts = _iid(n, num_clients, rng)
    elif kind in ("dirichlet", "dirichlet_prior"):
        if not alpha > 0 or not np.isfinite(alpha):
            raise ConfigError("partition.alpha", f"expected a positive number, got {alpha}")
        if min_size < 0:
            raise ConfigError("partition.min_size", f"expected an integer >= 0, got {min_size}")
        if num_clients * min_size > n:
            raise DataError(
                f"partition.min_size={min_size} cannot be met: {num_clients} clients x {min_size} "
                f"> {n} samples; lower partition.min_size or partition.num_clients"
            )
        fn = _dirichlet if kind == "dirichlet" else _dirichlet_prior
        parts = fn(y, num_clients, float(alpha), int(min_size), int(max_tries), rng)
    elif kind == "shards":
        parts = _shards(y, num_clients, int(shards_per_client), rng)
    else:
        parts = _classes(y, num_clients, int(classes_per_client), rng)
    return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]


def _as_labels(labels: np.ndarray) -> np.ndarray:
    y = np.asarray(labels)
    if y.ndim != 1:
        raise DataError(f"labels must be one-dimensional, got shape {y.shape}")
    if y.size and (not np.issubdtype(y.dtype, np.integer) or y.min() < 0):
        raise DataError("labels must be non-negative integers")
    return y.astype(np.int64, copy=False)


def _iid(n: int, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    return np.array_split(rng.permutation(n), num_clients)


def _class_indices(y: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """The classes present in ``y`` (ascending) and the indices of each."""
    classes = np.unique(y)
    if len(classes) == 0:
        return classes, []
    order = np.argsort(y, kind="stable")
    bounds = np.searchsorted(y[order], classes, side="left")
    return classes, np.split(order, bounds[1:])


def _split_by_proportions(idx: np.ndarray, proportions: np.ndarray) -> list[np.ndarray]:
    """Cut ``idx`` into consecutive pieces, piece j about ``proportions[j]`` of its length."""
    cuts = (np.cumsum(proportions) * len(idx)).astype(np.int64)[:-1]
    return np.split(idx, np.minimum(cuts, len(idx)))


def _draw_dirichlet(
    rng: np.random.Generator, concentration: np.ndarray, size: int | None = None
) -> np.ndarray:
    """Dirichlet draws; a draw that underflows (possible for tiny concentrations) is redrawn."""
    out = rng.dirichlet(concentration, size=size)
    bad = ~np.all(np.isfinite(out), axis=-1) | (out.sum(axis=-1) <= 0)
    while np.any(bad):
        out[bad] = rng.dirichlet(concentration, size=int(np.sum(bad)) if size is not None else None)
        bad = ~np.all(np.isfinite(out), axis=-1) | (out.sum(axis=-1) <= 0)
    return out


def _dirichlet(
    y: np.ndarray,
    num_clients: int,
    alpha: float,
    min_size: int,
    max_tries: int,
    rng: np.random.Generator,
) -> list[np.ndarray]:
    """PFLlib / FL-bench / MOON: per class, client shares ~ Dir(alpha * 1), with a size cap."""
    n = len(y)
    _, by_class = _class_indices(y)
    cap = n / num_clients
    concentration = np.full(num_clients, alpha)
    redraws = _Redraws(min_size, num_clients, alpha, n)
    for _ in range(max(1, max_tries)):
        sizes = np.zeros(num_clients, dtype=np.int64)
        pieces: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for idx in by_class:
            idx = rng.permutation(idx)
            p = _draw_dirichlet(rng, concentration)
            p = p * (sizes < cap)  # clients already above the mean take no more
            total = p.sum()
            p = p / total if total > 0 else (sizes < cap) / np.sum(sizes < cap)
            for j, piece in enumerate(_split_by_proportions(idx, p)):
                pieces[j].append(piece)
                sizes[j] += len(piece)
        if sizes.min() >= min_size:
            return [np.concatenate(p) for p in pieces]
        redraws.failed(sizes)
    raise redraws.error()


def _dirichlet_prior(
    y: np.ndarray,
    num_clients: int,
    alpha: float,
    min_size: int,
    max_tries: int,
    rng: np.random.Generator,
) -> list[np.ndarray]:
    """FLGo / Pa3dFL: client label proportions q_i ~ Dir(alpha * p*), equal client sizes.

    1. ``q_i ~ Dir(alpha * p*)`` for every client, ``p*`` the pool's label distribution.
    2. Balance (FLGo's idea): while the size-weighted mean of the ``q_i`` is farther than a
       tolerance from ``p*`` (squared L2), visit the clients in turn, draw ``num_clients``
       candidate proportions for the visited client and keep the one that brings the mean
       closest to ``p*`` if it improves on the current one; the tolerance starts at 1e-6 and is
       relaxed tenfold every 500 steps so the loop always ends. Once the mean matches ``p*``, the
       demand for every class equals its supply, so no class runs out.
    3. Split each class's shuffled samples among the clients in proportion to their demand
       ``size_i * q_ik``; every sample is assigned once. A class no client asks for (possible
       only with a relaxed tolerance, e.g. few clients, many classes and a tiny alpha) goes
       whole to the client furthest below its target size.
    """
    n = len(y)
    _, by_class = _class_indices(y)
    counts = np.array([len(i) for i in by_class], dtype=np.float64)
    prior = counts / n
    sizes = np.array([len(s) for s in np.array_split(np.arange(n), num_clients)], dtype=np.float64)
    concentration = alpha * prior
    redraws = _Redraws(min_size, num_clients, alpha, n)
    for _ in range(max(1, max_tries)):
        q = _draw_dirichlet(rng, concentration, size=num_clients)
        q = _balance_to_prior(q, sizes, prior, concentration, rng)
        demand = sizes[:, None] * q  # [clients, classes]
        got = np.zeros(num_clients, dtype=np.int64)
        pieces: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        orphans = []
        for k, idx in enumerate(by_class):
            total = demand[:, k].sum()
            if not total > 0:
                orphans.append(k)
                continue
            idx = rng.permutation(idx)
            for j, piece in enumerate(_split_by_proportions(idx, demand[:, k] / total)):
                pieces[j].append(piece)
                got[j] += len(piece)
        for k in sorted(orphans, key=lambda c: -len(by_class[c])):
            j = int(np.argmax(sizes - got))  # the client furthest below its size takes it all
            pieces[j].append(by_class[k])
            got[j] += len(by_class[k])
        if got.min() >= min_size:
            return [np.concatenate(p) if p else np.empty(0, np.int64) for p in pieces]
        redraws.failed(got)
    raise redraws.error()


class _Redraws:
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


def _balance_to_prior(
    q: np.ndarray,
    sizes: np.ndarray,
    prior: np.ndarray,
    concentration: np.ndarray,
    rng: np.random.Generator,
) -> np.ndarray:
    """Redraw client proportions until their size-weighted mean is close to ``prior``."""
    num_clients = len(q)
    q = q.copy()
    total = sizes @ q  # demanded samples per class

    def error(t: np.ndarray) -> np.ndarray:
        m = t / t.sum(axis=-1, keepdims=True)
        return ((m - prior) ** 2).sum(axis=-1)

    err = float(error(total))
    tol = _BALANCE_TOL
    step = 0
    while err > tol:
        if step and step % _BALANCE_PATIENCE == 0:
            tol *= 10
        i = step % num_clients
        candidates = _draw_dirichlet(rng, concentration, size=num_clients)
        alt = total - sizes[i] * q[i] + sizes[i] * candidates
        alt_err = error(alt)
        best = int(np.argmin(alt_err))
        if alt_err[best] < err:
            q[i] = candidates[best]
            total = alt[best]
            err = float(alt_err[best])
        step += 1
    return q


def _shards(
    y: np.ndarray, num_clients: int, shards_per_client: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """McMahan et al.: label-sorted shards, ``shards_per_client`` random shards per client."""
    n = len(y)
    if shards_per_client < 1:
        raise ConfigError(
            "partition.shards_per_client", f"expected an integer >= 1, got {shards_per_client}"
        )
    num_shards = num_clients * shards_per_client
    if num_shards > n:
        raise ConfigError(
            "partition.shards_per_client",
            f"{num_clients} clients x {shards_per_client} shards = {num_shards} shards but only "
            f"{n} samples; lower partition.shards_per_client or partition.num_clients",
        )
    shuffled = rng.permutation(n)
    order = shuffled[np.argsort(y[shuffled], kind="stable")]  # by label, ties in random order
    shards = np.array_split(order, num_shards)
    owner = rng.permutation(num_shards).reshape(num_clients, shards_per_client)
    return [np.concatenate([shards[s] for s in row]) for row in owner]


def _classes(
    y: np.ndarray, num_clients: int, classes_per_client: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """FedFomo / Dis-PFL: ``classes_per_client`` classes per client, classes used equally."""
    classes, by_class = _class_indices(y)
    num_classes = len(classes)
    if classes_per_client < 1 or classes_per_client > num_classes:
        raise ConfigError(
            "partition.classes_per_client",
            f"expected 1..{num_classes} (the number of classes), got {classes_per_client}",
        )
    times = np.zeros(num_classes, dtype=np.int64)
    holders: list[list[int]] = [[] for _ in range(num_classes)]
    for client in range(num_clients):
        # the least-used classes, ties broken at random
        chosen = np.lexsort((rng.random(num_classes), times))[:classes_per_client]
        times[chosen] += 1
        for k in chosen:
            holders[k].append(client)
    pieces: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for k, idx in enumerate(by_class):
        if not holders[k]:
            continue  # more classes than client slots: this class stays unassigned
        for client, piece in zip(
            holders[k], np.array_split(rng.permutation(idx), len(holders[k])), strict=True
        ):
            pieces[client].append(piece)
    return [np.concatenate(p) for p in pieces]


# ------------------------------------------------------------------------------- splits
@dataclass
class ClientSplit:
    """One client's samples, as indices into the pool its partition came from."""

    train: np.ndarray
    val: np.ndarray
    test: np.ndarray


def _check_fractions(fractions: tuple[float, float, float]) -> np.ndarray:
    f = np.asarray(fractions, dtype=np.float64)
    if f.shape != (3,) or np.any(f < 0) or not np.all(np.isfinite(f)) or abs(f.sum() - 1) > 1e-6:
        raise ConfigError(
            "partition.split",
            f"expected three fractions [train, val, test] summing to 1, got {list(fractions)}",
        )
    return f


def _stratified_counts(n: int, f: np.ndarray, carry: np.ndarray) -> np.ndarray:
    """Counts per split for a class of ``n`` samples; ``carry`` holds the client's rounding debt.

    Largest-remainder rounding of ``f * n + carry`` (so a client's totals stay within one sample
    of its fractions even when it has many small classes), then at least one training sample.
    """
    target = f * n + carry
    counts = np.floor(np.maximum(target, 0)).astype(np.int64)
    counts[f == 0] = 0
    while counts.sum() < n:
        counts[np.argmax(np.where(f > 0, target - counts, -np.inf))] += 1
    while counts.sum() > n:
        counts[np.argmax(np.where(counts > 0, counts - target, -np.inf))] -= 1
    if n >= 1 and f[0] > 0 and counts[0] == 0:
        counts[1 + int(np.argmax(counts[1:]))] -= 1
        counts[0] += 1
    carry[:] = target - counts
    return counts


def split_clients(
    parts: list[np.ndarray],
    labels: np.ndarray,
    fractions: tuple[float, float, float],
    rng: np.random.Generator,
) -> list[ClientSplit]:
    """Split every client's samples into train/validation/test, stratified by label.

    For each class a client holds, its indices are shuffled and cut by ``fractions``; rounding
    carries over from class to class (in random order) so the client's split sizes match the
    fractions to within a sample, and every class with a sample keeps at least one training
    sample. Each split therefore has (up to rounding) the client's label distribution.

    Args:
        parts: per client, indices into ``labels``.
        labels: labels of the pool.
        fractions: ``(train, val, test)``, non-negative, summing to 1.
        rng: the only source of randomness.

    Raises:
        ConfigError: ``partition.split`` is not three non-negative fractions summing to 1.
    """
    f = _check_fractions(fractions)
    y = np.asarray(labels)
    out = []
    for part in parts:
        part = np.asarray(part, dtype=np.int64)
        _, by_class = _class_indices(y[part])
        carry = np.zeros(3)
        splits: list[list[np.ndarray]] = [[], [], []]
        for k in rng.permutation(len(by_class)):
            idx = rng.permutation(part[by_class[k]])
            counts = _stratified_counts(len(idx), f, carry)
            for s, piece in enumerate(np.split(idx, np.cumsum(counts)[:-1])):
                splits[s].append(piece)
        train, val, test = (
            np.sort(np.concatenate(s)).astype(np.int64) if s else np.empty(0, np.int64)
            for s in splits
        )
        out.append(ClientSplit(train=train, val=val, test=test))
    return out


def assign_test_like_train(
    train_parts: list[np.ndarray],
    train_labels: np.ndarray,
    test_labels: np.ndarray,
    rng: np.random.Generator,
) -> list[np.ndarray]:
    """Client test sets from the official test split, with each client's label distribution.

    For every class ``c``, the official test samples of ``c`` are shuffled and divided among the
    clients in proportion to their training counts of ``c``; clients without ``c`` get none of
    it, and a class no client trains on is left out. No test sample goes to two clients.

    Returns:
        Per client, a sorted ``int64`` array of indices into ``test_labels``.
    """
    y_train = np.asarray(train_labels)
    y_test = _as_labels(test_labels)
    num_classes = int(max(y_train.max(initial=-1), y_test.max(initial=-1))) + 1
    counts = label_matrix(train_parts, y_train, num_classes).astype(np.float64)
    classes, by_class = _class_indices(y_test)
    pieces: list[list[np.ndarray]] = [[] for _ in train_parts]
    for c, idx in zip(classes, by_class, strict=True):
        total = counts[:, c].sum()
        if total <= 0:
            continue
        for j, piece in enumerate(
            _split_by_proportions(rng.permutation(idx), counts[:, c] / total)
        ):
            pieces[j].append(piece)
    return [
        np.sort(np.concatenate(p)).astype(np.int64) if p else np.empty(0, np.int64) for p in pieces
    ]


# ------------------------------------------------------------------------- inspection
def label_matrix(parts: list[np.ndarray], labels: np.ndarray, num_classes: int) -> np.ndarray:
    """``[clients, classes]`` sample counts of ``parts`` (indices into ``labels``)."""
    y = np.asarray(labels)
    out = np.zeros((len(parts), num_classes), dtype=np.int64)
    for i, part in enumerate(parts):
        counts = np.bincount(y[np.asarray(part, dtype=np.int64)], minlength=num_classes)
        if len(counts) > num_classes:
            raise DataError(f"a label is >= num_classes={num_classes}")
        out[i] = counts
    return out


def skew(matrix: np.ndarray) -> float:
    """Mean total-variation distance between each client's label distribution and the global one.

    0 for identical distributions; approaches 1 when clients hold classes that are rare overall.
    Clients without samples are ignored.
    """
    m = np.asarray(matrix, dtype=np.float64)
    sizes = m.sum(axis=1)
    total = m.sum()
    if total <= 0 or not np.any(sizes > 0):
        return 0.0
    glob = m.sum(axis=0) / total
    local = m[sizes > 0] / sizes[sizes > 0, None]
    return float(np.mean(0.5 * np.abs(local - glob).sum(axis=1)))


def describe_partition(matrix: np.ndarray) -> str:
    """Printable summary of a ``[clients, classes]`` count matrix.

    One line per client (size, number of labels, counts per label, or the five largest labels
    when there are more than 20 classes), then the size range, labels per client and the skew.
    """
    m = np.asarray(matrix, dtype=np.int64)
    num_clients, num_classes = m.shape
    sizes = m.sum(axis=1)
    nlabels = (m > 0).sum(axis=1)
    width = max(len(str(int(m.max(initial=0)))), 3)
    lines = []
    if num_classes <= 20:
        head = " ".join(f"{k:>{width}}" for k in range(num_classes))
        lines.append(f"{'client':>6} {'size':>7} {'labels':>6}  counts per label: {head}")
        pad = " " * len("counts per label: ")
        for i in range(num_clients):
            row = " ".join(f"{int(v):>{width}}" for v in m[i])
            lines.append(f"{i:>6} {int(sizes[i]):>7} {int(nlabels[i]):>6}  {pad}{row}")
    else:
        lines.append(f"{'client':>6} {'size':>7} {'labels':>6}  largest labels (label:count)")
        for i in range(num_clients):
            top = np.argsort(-m[i], kind="stable")[:5]
            row = " ".join(f"{int(k)}:{int(m[i, k])}" for k in top if m[i, k] > 0)
            lines.append(f"{i:>6} {int(sizes[i]):>7} {int(nlabels[i]):>6}  {row}")
    if num_clients:
        lines.append(
            f"{num_clients} clients, {int(sizes.sum())} samples; client size min {int(sizes.min())}"
            f" / median {float(np.median(sizes)):g} / max {int(sizes.max())}"
        )
        lines.append(
            f"labels per client: mean {float(nlabels.mean()):.2f} (min {int(nlabels.min())}, "
            f"max {int(nlabels.max())}) of {num_classes}"
        )
    lines.append(
        f"skew (mean total-variation distance to the global label distribution): {skew(m):.3f}"
    )
    return "\n".join(lines)


def plot_label_matrix(matrix: np.ndarray, path: str | os.PathLike, title: str = "") -> None:
    """Write a PNG of the client x label counts: a bubble plot, or a heatmap when it is large."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    m = np.asarray(matrix, dtype=np.float64)
    num_clients, num_classes = m.shape
    fig = Figure(
        figsize=(min(4 + 0.25 * num_clients, 16), min(3 + 0.25 * num_classes, 12)), dpi=100
    )
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    if num_clients * num_classes <= 2500:
        cx, cy = np.nonzero(m)
        scale = 300.0 / m.max() if m.max() > 0 else 0.0
        ax.scatter(cx, cy, s=m[cx, cy] * scale, c="tab:red", alpha=0.6, edgecolors="none")
        if scale:  # a key for the bubble areas, outside the axes so it hides no bubble
            sizes = sorted({max(1, round(m.max() * f)) for f in (1.0, 0.5, 0.1)}, reverse=True)
            for size in sizes:
                ax.scatter([], [], s=size * scale, c="tab:red", alpha=0.6, label=f"{size}")
            ax.legend(
                title="samples",
                loc="upper left",
                bbox_to_anchor=(1.01, 1.0),
                labelspacing=1.5,
                borderpad=1.0,
                fontsize="small",
            )
        ax.set_xlim(-0.5, num_clients - 0.5)
        ax.set_ylim(-0.5, num_classes - 0.5)
        ax.grid(True, alpha=0.3)
    else:
        im = ax.imshow(m.T, aspect="auto", origin="lower", interpolation="nearest", cmap="viridis")
        fig.colorbar(im, ax=ax, label="samples")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("client")
    ax.set_ylabel("label")
    ax.set_title(title or f"{num_clients} clients x {num_classes} labels, skew {skew(m):.3f}")
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png", bbox_inches="tight")
