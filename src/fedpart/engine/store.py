"""The client state store: one server model plus, per client, only what is per client.

Two kinds of per-client tensors:

- **personal** tensors live on the client and never leave it (a personal head, BatchNorm
  statistics under FedBN, every block of a decentralized method);
- **tailored** tensors are held by the *server*, one aggregate per client (pFedSim, FedCMD's
  layers after the personalized one, FedFomo, FedAP): the server sends client i its own
  aggregate instead of the global one. A client without a tailored aggregate gets the global
  tensors.

A client's model is ``global ⊕ tailored[i] ⊕ personal[i]`` (later entries win).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from fedpart.models import BlockModel

State = dict[str, torch.Tensor]


class ClientStateStore:
    """Holds the server's model and each client's per-client tensors, never a full copy per
    client unless the method makes every block per-client.

    A client that has not trained yet has the common initialisation as its personal part
    (every client starts from the same initial model, as in the reference implementations).
    """

    def __init__(
        self,
        model: BlockModel,
        init_state: State,
        personal_blocks: set[str],
        personal_keys: Iterable[str] = (),
    ) -> None:
        unknown = set(personal_blocks) - set(model.block_names)
        if unknown:
            raise ValueError(
                f"unknown personal blocks {sorted(unknown)}; blocks: {model.block_names}"
            )
        extra = set(personal_keys)
        unknown_keys = extra - set(init_state)
        if unknown_keys:
            raise ValueError(f"unknown personal keys {sorted(unknown_keys)}")
        self.model = model
        self.keys = list(init_state)
        self.global_state: State = {k: v.detach().clone() for k, v in init_state.items()}
        self.personal_keys = [
            k for k in self.keys if model.block_of(k) in personal_blocks or k in extra
        ]
        self.init_personal: State = {k: self.global_state[k].clone() for k in self.personal_keys}
        self.personal: dict[int, State] = {}
        self.tailored: dict[int, State] = {}

    def client_state(self, client: int) -> State:
        """The full model of ``client``: server tensors overlaid with its tailored aggregate
        and its personal tensors.

        The returned tensors are shared with the store; callers must not modify them in place.
        """
        tailored = self.tailored.get(client)
        if not self.personal_keys and not tailored:
            return dict(self.global_state)
        state = {**self.global_state, **tailored} if tailored else dict(self.global_state)
        if self.personal_keys:
            state.update(self.personal.get(client, self.init_personal))
        return state

    def server_state(self, client: int) -> State:
        """What the server holds for ``client``: the global tensors overlaid with its tailored
        aggregate (no personal tensors; those the server never sees)."""
        tailored = self.tailored.get(client)
        return {**self.global_state, **tailored} if tailored else dict(self.global_state)

    def make_personal(self, keys: Iterable[str]) -> None:
        """From now on keep ``keys`` on the clients (FedCMD's layer l*, fixed after selection):
        every client's personal value starts as the current server value, which the server
        keeps unchanged from then on. Values already held per client (e.g. restored from a
        checkpoint) are kept."""
        new = [k for k in keys if k not in self.personal_keys]
        if not new:
            return
        wanted = set(self.personal_keys) | set(new)
        self.personal_keys = [k for k in self.keys if k in wanted]
        for k in new:
            self.init_personal[k] = self.global_state[k].clone()
        for state in self.personal.values():
            for k in new:
                state.setdefault(k, self.init_personal[k])
        for tailored in self.tailored.values():
            for k in new:
                tailored.pop(k, None)

    def set_personal(self, client: int, state: State) -> None:
        """Keep the personal part of ``state`` for ``client``."""
        if self.personal_keys:
            self.personal[client] = {k: _kept(state[k]) for k in self.personal_keys}

    def set_tailored(self, client: int, state: State) -> None:
        """Replace the server's aggregate for ``client`` by ``state`` (some shared keys)."""
        personal = set(self.personal_keys)
        if personal & set(state):
            raise ValueError(f"personal keys cannot be tailored: {sorted(personal & set(state))}")
        self.tailored[client] = {k: _kept(v) for k, v in state.items()}

    def shared_keys(self, frozen_blocks: set[str] = frozenset()) -> list[str]:
        """Keys that are neither personal nor in ``frozen_blocks``."""
        personal = set(self.personal_keys)
        return [
            k
            for k in self.keys
            if k not in personal and self.model.block_of(k) not in frozen_blocks
        ]

    def personal_bytes(self) -> int:
        """Bytes held as per-client state (personal and server-side tailored tensors)."""
        return sum(
            t.numel() * t.element_size()
            for store in (self.personal, self.tailored)
            for s in store.values()
            for t in s.values()
        )


def compact_state(state: State) -> State:
    """``state`` with every tensor that is a view into a larger storage copied into its own.

    Pickling a tensor (for a worker process or a Ray task) ships its whole storage: a client's
    start state holding views of a stacked [clients × ...] tensor — a decentralized method's
    mixed states — would ship every client's parameters with each job (measured: 230 MB per
    DFedPGP job on 100 MNIST clients instead of 2.3 MB). Tensors that own their storage are
    passed through unchanged; values are never altered."""
    out = {}
    for key, t in state.items():
        whole = t.untyped_storage().nbytes() == t.numel() * t.element_size()
        out[key] = t if whole else t.clone()
    return out


def _kept(t: torch.Tensor) -> torch.Tensor:
    """``t`` without its autograd history (itself when it has none: no operator per tensor)."""
    return t.detach() if t.requires_grad or t.grad_fn is not None else t
