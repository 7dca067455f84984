"""The round's communication graph, drawn from the run's seed, and its mixing weights.

A :class:`Graph` holds a boolean matrix ``adj`` with ``adj[i, j]`` true when client ``i`` sends
to client ``j`` in this round (an edge ``i → j``). Self-loops are implicit: every client always
keeps its own model, so they never appear in ``adj`` and are added by the weights.

Mixing weights are returned as a matrix ``W`` with ``W[i, j]`` the weight that *receiver* ``i``
gives to what *sender* ``j`` holds, so that one round of mixing is ``new = W @ old`` (see
:func:`fedpart.engine.mixing.mix`):

- ``uniform``: receiver ``i`` averages itself and its in-neighbours equally (row-stochastic);
- ``size``: the same average weighted by the clients' training-set sizes (row-stochastic);
- ``metropolis``: Metropolis–Hastings, ``W[i, j] = 1 / (1 + max(d_i, d_j))`` on the edges of an
  undirected graph and the rest on the diagonal (symmetric, doubly stochastic);
- ``push``: sender ``j`` splits its mass equally over its out-neighbours and itself,
  ``W[i, j] = 1 / (1 + outdeg_j)`` (column-stochastic; the weights of push-sum).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from fedpart.errors import ConfigError
from fedpart.seeding import numpy_rng

WEIGHTS: dict[str, str] = {
    "uniform": "receiver averages itself and its in-neighbours equally (row-stochastic)",
    "size": "receiver averages itself and its in-neighbours by training-set size (row-stochastic)",
    "metropolis": "Metropolis-Hastings on an undirected graph (symmetric, doubly stochastic)",
    "push": "sender splits its mass over its out-neighbours and itself (column-stochastic, push-sum)",
}


@dataclass(frozen=True)
class Graph:
    """One round's directed graph over ``m`` clients (``adj[i, j]``: ``i`` sends to ``j``)."""

    adj: np.ndarray

    @property
    def num_clients(self) -> int:
        return int(self.adj.shape[0])

    @property
    def undirected(self) -> bool:
        return bool((self.adj == self.adj.T).all())

    def in_neighbors(self, i: int) -> list[int]:
        """Clients that send to ``i`` this round (``i`` excluded)."""
        return [int(j) for j in np.flatnonzero(self.adj[:, i])]

    def out_neighbors(self, i: int) -> list[int]:
        """Clients that ``i`` sends to this round (``i`` excluded)."""
        return [int(j) for j in np.flatnonzero(self.adj[i])]

    def edges(self) -> list[tuple[int, int]]:
        """Directed edges ``(sender, receiver)``, self-loops excluded."""
        return [(int(i), int(j)) for i, j in zip(*np.nonzero(self.adj), strict=True)]

    def isolated(self, clients: list[int]) -> Graph:
        """This graph with ``clients`` cut off for the round: they neither send nor receive (a
        client whose update was discarded keeps its previous model and sends nothing)."""
        if not clients:
            return self
        adj = self.adj.copy()
        adj[clients, :] = False
        adj[:, clients] = False
        return Graph(adj)

    def weights(self, kind: str, sizes: np.ndarray | None = None) -> torch.Tensor:
        """The mixing matrix ``W`` (float64, ``W[receiver, sender]``) of the named kind."""
        m = self.num_clients
        a = self.adj.astype(np.float64)
        with_self = a.T + np.eye(m)  # [receiver, sender], self included
        if kind == "uniform":
            w = with_self / with_self.sum(1, keepdims=True)
        elif kind == "size":
            if sizes is None:
                raise ValueError("size weights need the clients' training-set sizes")
            w = with_self * np.asarray(sizes, dtype=np.float64)[None, :]
            w = w / w.sum(1, keepdims=True)
        elif kind == "metropolis":
            if not self.undirected:
                raise ConfigError(
                    "topology.weights",
                    "metropolis weights need an undirected graph; use push (push-sum) or uniform",
                )
            deg = a.sum(1)
            w = a / (1.0 + np.maximum(deg[:, None], deg[None, :]))
            w[np.diag_indices(m)] = 1.0 - w.sum(1)
        elif kind == "push":
            w = with_self / with_self.sum(0, keepdims=True)
        else:
            raise ConfigError(
                "topology.weights", f"unknown weights '{kind}'; valid choices: {', '.join(WEIGHTS)}"
            )
        return torch.from_numpy(w)


# ------------------------------------------------------------------------------- generators
def _full(m: int, k: int, rng: np.random.Generator, t: int) -> np.ndarray:
    return ~np.eye(m, dtype=bool)


def _ring(m: int, k: int, rng: np.random.Generator, t: int) -> np.ndarray:
    adj = np.zeros((m, m), dtype=bool)
    for i in range(m):
        for s in (1, -1):
            j = (i + s) % m
            if j != i:
                adj[i, j] = True
    return adj


def _kregular(m: int, k: int, rng: np.random.Generator, t: int) -> np.ndarray:
    """An undirected k-regular graph: a ring lattice (each node joined to its k/2 nearest on
    each side, plus the opposite node when k is odd) under a random relabelling of the nodes."""
    if k >= m:
        raise ConfigError("topology.neighbors", f"must be < num_clients ({m}) for kregular")
    if (m * k) % 2:
        raise ConfigError(
            "topology.neighbors",
            f"a {k}-regular graph on {m} clients does not exist (m·k must be even)",
        )
    perm = rng.permutation(m)
    adj = np.zeros((m, m), dtype=bool)
    for pos in range(m):
        for s in range(1, k // 2 + 1):
            a, b = perm[pos], perm[(pos + s) % m]
            adj[a, b] = adj[b, a] = True
        if k % 2:
            a, b = perm[pos], perm[(pos + m // 2) % m]
            adj[a, b] = adj[b, a] = True
    return adj


def _exponential(m: int, k: int, rng: np.random.Generator, t: int, one_peer: bool) -> np.ndarray:
    """Directed exponential graph: ``i → i + 2^s (mod m)``; the one-peer variant uses only
    ``s = t mod ⌈log2 m⌉`` in round ``t`` (the time-varying graph of stochastic gradient push)."""
    hops = [2**s for s in range(max(1, math.ceil(math.log2(m))))]
    hops = [h for h in hops if h % m]
    if one_peer and hops:
        hops = [hops[t % len(hops)]]
    adj = np.zeros((m, m), dtype=bool)
    for i in range(m):
        for h in hops:
            adj[i, (i + h) % m] = True
    return adj


def _kout(m: int, k: int, rng: np.random.Generator, t: int) -> np.ndarray:
    """Each client sends to ``k`` others drawn uniformly without replacement (directed)."""
    if k >= m:
        raise ConfigError("topology.neighbors", f"must be < num_clients ({m}) for kout/kpull")
    adj = np.zeros((m, m), dtype=bool)
    for i in range(m):
        others = np.delete(np.arange(m), i)
        adj[i, rng.choice(others, size=k, replace=False)] = True
    return adj


def _kpull(m: int, k: int, rng: np.random.Generator, t: int) -> np.ndarray:
    """Each client receives from ``k`` others drawn uniformly without replacement (its queue)."""
    return _kout(m, k, rng, t).T.copy()


@dataclass(frozen=True)
class TopologyInfo:
    """A registered topology: its generator, whether it is undirected and its one-line doc."""

    build: Callable[[int, int, np.random.Generator, int, bool], np.ndarray]
    undirected: bool
    doc: str


TOPOLOGIES: dict[str, TopologyInfo] = {
    "full": TopologyInfo(lambda m, k, r, t, tv: _full(m, k, r, t), True, "every pair of clients"),
    "ring": TopologyInfo(lambda m, k, r, t, tv: _ring(m, k, r, t), True, "undirected ring"),
    "kregular": TopologyInfo(
        lambda m, k, r, t, tv: _kregular(m, k, r, t),
        True,
        "undirected random k-regular graph (k = topology.neighbors)",
    ),
    "exponential": TopologyInfo(
        lambda m, k, r, t, tv: _exponential(m, k, r, t, one_peer=tv),
        False,
        "directed exponential graph i→i+2^s; time-varying: one peer 2^(t mod log2 m) per round",
    ),
    "kout": TopologyInfo(
        lambda m, k, r, t, tv: _kout(m, k, r, t),
        False,
        "directed: each client pushes to k random others",
    ),
    "kpull": TopologyInfo(
        lambda m, k, r, t, tv: _kpull(m, k, r, t),
        False,
        "directed: each client pulls from a queue of k random others (UA-PDFL)",
    ),
}


class Topology:
    """Produces the graph of every round from the run's seed.

    ``time_varying``: draw a new graph every round (otherwise the round-0 graph is kept; for
    ``exponential`` it selects the one-peer variant). ``drop_prob``: each link fails
    independently with this probability in every round (both directions of an undirected link
    fail together, so the graph stays undirected).
    """

    def __init__(
        self,
        name: str,
        num_clients: int,
        neighbors: int,
        seed: int,
        *,
        time_varying: bool = True,
        drop_prob: float = 0.0,
    ) -> None:
        if name not in TOPOLOGIES:
            raise ConfigError(
                "topology.name",
                f"unknown topology '{name}'; valid choices: {', '.join(TOPOLOGIES)}",
            )
        if num_clients < 2:
            raise ConfigError(
                "partition.num_clients", "a decentralized run needs at least 2 clients"
            )
        self.name = name
        self.info = TOPOLOGIES[name]
        self.m = num_clients
        self.k = neighbors
        self.seed = seed
        self.time_varying = time_varying
        self.drop_prob = drop_prob
        self.graph(0)  # fail early on an impossible graph

    def graph(self, rnd: int) -> Graph:
        """The graph of round ``rnd`` (the same for every method under the same seed)."""
        key = rnd if self.time_varying else 0
        adj = self.info.build(
            self.m, self.k, numpy_rng(self.seed, "topology", key), rnd, self.time_varying
        )
        if self.drop_prob > 0:
            fail = numpy_rng(self.seed, "topology", rnd, 1).random(adj.shape) < self.drop_prob
            if self.info.undirected:
                fail = np.triu(fail, 1)
                fail = fail | fail.T
            adj = adj & ~fail
        return Graph(adj)


def build_topology(cfg: object, num_clients: int, default: dict[str, object]) -> Topology:
    """The :class:`Topology` of a config's ``topology`` section; ``auto`` takes ``default``."""
    t = cfg.topology  # type: ignore[attr-defined]
    name = str(default["name"] if t.name == "auto" else t.name)
    neighbors = int(t.neighbors) or int(default.get("neighbors", 10))  # type: ignore[call-overload]
    if t.neighbors == 0:
        # The method's default degree adapts to small federations instead of failing on them.
        neighbors = min(neighbors, num_clients - 1)
        if name == "kregular" and (neighbors * num_clients) % 2:
            neighbors -= 1
    return Topology(
        name,
        num_clients,
        neighbors,
        cfg.seed,  # type: ignore[attr-defined]
        time_varying=t.time_varying,
        drop_prob=t.drop_prob,
    )
