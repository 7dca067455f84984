"""The client state store: one server model plus, per client, only what is personal."""

from __future__ import annotations

import torch

from fedpart.models import BlockModel

State = dict[str, torch.Tensor]


class ClientStateStore:
    """Holds the server's model and each client's personal tensors, never a full copy per client.

    A client that has not trained yet has the common initialisation as its personal part
    (every client starts from the same initial model, as in the reference implementations).
    """

    def __init__(self, model: BlockModel, init_state: State, personal_blocks: set[str]) -> None:
        unknown = set(personal_blocks) - set(model.block_names)
        if unknown:
            raise ValueError(
                f"unknown personal blocks {sorted(unknown)}; blocks: {model.block_names}"
            )
        self.model = model
        self.keys = list(init_state)
        self.global_state: State = {k: v.detach().clone() for k, v in init_state.items()}
        self.personal_keys = [k for k in self.keys if model.block_of(k) in personal_blocks]
        self.init_personal: State = {k: self.global_state[k].clone() for k in self.personal_keys}
        self.personal: dict[int, State] = {}

    def client_state(self, client: int) -> State:
        """The full model of ``client``: server tensors overlaid with its personal tensors.

        The returned tensors are shared with the store; callers must not modify them in place.
        """
        if not self.personal_keys:
            return dict(self.global_state)
        return {**self.global_state, **self.personal.get(client, self.init_personal)}

    def set_personal(self, client: int, state: State) -> None:
        """Keep the personal part of ``state`` for ``client``."""
        if self.personal_keys:
            self.personal[client] = {k: state[k].detach() for k in self.personal_keys}

    def shared_keys(self, frozen_blocks: set[str] = frozenset()) -> list[str]:
        """Keys that are neither personal nor in ``frozen_blocks``."""
        personal = set(self.personal_keys)
        return [
            k
            for k in self.keys
            if k not in personal and self.model.block_of(k) not in frozen_blocks
        ]

    def personal_bytes(self) -> int:
        """Bytes held as per-client personal state."""
        return sum(t.numel() * t.element_size() for s in self.personal.values() for t in s.values())
