"""``dirichlet_prior`` (FLGo / Pa3dFL): every client's label proportions are drawn from
Dir(alpha·p*), ``p*`` the pool's label distribution, balanced until their mean matches ``p*``;
clients have equal sizes."""

from __future__ import annotations

import numpy as np

from fedpart.data.partition.common import (
    Redraws,
    class_indices,
    draw_dirichlet,
    split_by_proportions,
)

_BALANCE_TOL = 1e-6  # FLGo's default error bar on ||mean client distribution - global||^2
_BALANCE_PATIENCE = 500  # steps before the tolerance is relaxed tenfold (as FLGo)


def partition_dirichlet_prior(
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
    _, by_class = class_indices(y)
    counts = np.array([len(i) for i in by_class], dtype=np.float64)
    prior = counts / n
    sizes = np.array([len(s) for s in np.array_split(np.arange(n), num_clients)], dtype=np.float64)
    concentration = alpha * prior
    redraws = Redraws(min_size, num_clients, alpha, n)
    for _ in range(max(1, max_tries)):
        q = draw_dirichlet(rng, concentration, size=num_clients)
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
            for j, piece in enumerate(split_by_proportions(idx, demand[:, k] / total)):
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
        candidates = draw_dirichlet(rng, concentration, size=num_clients)
        alt = total - sizes[i] * q[i] + sizes[i] * candidates
        alt_err = error(alt)
        best = int(np.argmin(alt_err))
        if alt_err[best] < err:
            q[i] = candidates[best]
            total = alt[best]
            err = float(alt_err[best])
        step += 1
    return q
