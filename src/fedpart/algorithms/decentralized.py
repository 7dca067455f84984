"""The base of decentralized methods: no server, every client holds its whole model.

A decentralized method states, like a centralized one, its personal blocks and its local recipe,
plus its graph (``default_topology``), its mixing weights (``mixing``) and whether it mixes
before or after local training (``mix_first``). The default :meth:`communicate` is gossip:
every client averages the shared blocks of itself and its in-neighbours with the round's mixing
matrix; personal blocks never leave their client.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from fedpart.algorithms.base import Algorithm, State
from fedpart.engine import method_state as saved
from fedpart.engine.decentralized import gossip, keys_bytes, push_sum
from fedpart.topology import Graph


class Decentralized(Algorithm):
    """Gossip over the shared blocks (DFedAvgM's communication); subclasses refine it.

    ``default_topology``: the graph used under ``topology.name=auto`` (``name`` and the
    ``neighbors`` used when ``topology.neighbors=0``). ``mixing``: the mixing weights under
    ``topology.weights=auto``.
    """

    setting = "decentralized"
    peer_to_peer = True
    has_global_model = False
    default_topology: ClassVar[dict[str, Any]] = {"name": "kregular", "neighbors": 10}
    mixing: ClassVar[str] = "metropolis"

    # ------------------------------------------------------------------ state
    def stored_blocks(self) -> set[str]:
        return set(self.ctx.model.block_names)

    def shared_keys(self) -> list[str]:
        """State keys that travel (every key outside the personal blocks)."""
        personal = self.personal_blocks()
        model = self.ctx.model
        return [k for k in self.ctx.store.keys if model.block_of(k) not in personal]

    def states(self) -> list[State]:
        """Every client's current model (a snapshot: the dicts are fresh, tensors shared)."""
        store = self.ctx.store
        return [store.client_state(c) for c in range(self.ctx.data.num_clients)]

    def set_states(self, states: list[State]) -> None:
        for c, state in enumerate(states):
            self.ctx.store.set_personal(c, state)

    def client_sizes(self) -> list[int]:
        return [c.num_train for c in self.ctx.data.clients]

    def mixing_weights(self, graph: Graph) -> torch.Tensor:
        """``W[receiver, sender]`` of this round (``topology.weights`` or the method's own)."""
        kind = self.ctx.cfg.topology.weights
        kind = self.mixing if kind == "auto" else kind
        return graph.weights(kind, sizes=self.client_sizes())

    # ------------------------------------------------------------ the exchange
    def communicate(self, rnd: int, graph: Graph) -> None:
        """Gossip: ``x_i ← Σ_j W[i, j] x_j`` over the shared keys, counted per directed edge."""
        states = self.states()
        keys = self.shared_keys()
        weights = self.mixing_weights(graph)
        self.ctx.exchange.send_along(weights, keys_bytes(states[0], keys))
        self.set_states(gossip(states, weights, keys))

    # -------------------------------------------------------- unused server hooks
    def upload(self, rnd: int, client: int, state: State, job: Any = None) -> State:
        return {}

    def download_keys(self, rnd: int) -> list[str]:
        return []

    def aggregate(self, rnd: int, uploads: dict[int, State], weights: dict[int, float]) -> None:
        return None


class PushSum(Decentralized):
    """Push-sum over a directed graph (stochastic gradient push), on de-biased models.

    Each client keeps ``z_i = u_i / μ_i`` in the store and its push-sum weight ``μ_i`` (1 at
    the start). Local steps take gradients at ``z`` and step on ``u = μ z``, which is SGD on ``z``
    with the learning rate divided by ``μ_i`` (fixed within the round). Then every client pushes
    ``p_{j,i} u_i`` and ``p_{j,i} μ_i`` to its out-neighbours and itself, with column-stochastic
    ``p_{j,i} = 1 / (1 + outdeg_i)``, and de-biases what it received: ``z = Σ p u / Σ p μ``.
    """

    default_topology: ClassVar[dict[str, Any]] = {"name": "kout", "neighbors": 10}
    mixing: ClassVar[str] = "push"
    checkpointed = (saved.Tensor("mu", key="push_sum_weights", dtype=torch.float64),)

    def setup(self) -> None:
        self.mu = torch.ones(self.ctx.data.num_clients, dtype=torch.float64, device=self.ctx.device)

    def step_scale(self, client: int) -> float:
        """The factor ``1 / μ_i`` on the learning rate of steps taken on the biased ``u_i``.
        Every client's factor is read to the host at once, again only when ``μ`` changed (one
        synchronisation a round on a GPU, not one per client; the same float64 divisions)."""
        cached = getattr(self, "_scales", None)
        if cached is None or cached[0] is not self.mu or cached[1] != self.mu._version:
            cached = self._scales = (self.mu, self.mu._version, (1.0 / self.mu).tolist())
        return cached[2][client]

    def communicate(self, rnd: int, graph: Graph) -> None:
        states = self.states()
        keys = self.shared_keys()
        weights = self.mixing_weights(graph)
        mu_bytes = self.mu.element_size()
        self.ctx.exchange.send_along(weights, keys_bytes(states[0], keys) + mu_bytes)
        new_states, self.mu = push_sum(states, self.mu, weights, keys)
        self.set_states(new_states)

    def round_metrics(self) -> dict[str, Any]:
        """The spread of the push-sum weights (the step of client i is scaled by 1/μ_i)."""
        return {"mu_min": float(self.mu.min()), "mu_max": float(self.mu.max())}
