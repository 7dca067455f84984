"""What a method may use of the run it belongs to: :class:`MethodContext`.

A method (``fedpart.algorithms``) is built with a context, not with the engine's ``Simulation``
class: the protocol below is everything of a run a method reads or calls, so a method file
names no engine class and a test can hand a method any object that has these members (the
toy-model tests build one from a three-block model and a few tensors). ``Simulation`` is the
context of a run.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from fedpart.config import Config
from fedpart.engine.store import ClientStateStore

State = dict[str, torch.Tensor]


class MethodContext(Protocol):
    """The run as a method sees it: its config, model, federated data, state store, device,
    capacity profile, the decentralized round's exchange, the round counter, and training."""

    cfg: Config
    model: Any  #: the run's ``BlockModel`` (as wrapped by the method)
    data: Any  #: the ``FederatedData`` on the device
    store: ClientStateStore
    device: torch.device
    capacity: Any  #: every client's capacity and width (``engine.capacity``)
    exchange: Any  #: the bytes of a decentralized round's messages (None outside one)
    rounds_completed: int
    algorithm: Any  #: the method itself (helpers shared by methods reach it through the run)

    def train(
        self,
        rnd: int,
        client: int,
        start: State,
        recipe: Any = None,
        frozen: set[str] | None = None,
    ) -> Any:
        """A client's local training from ``start`` (the method's recipe unless one is given)."""
        ...

    def train_settings(self, rnd: int, client: int | None = None) -> Any:
        """The optimiser settings of ``client``'s training in round ``rnd``."""
        ...

    def finetune_all(self, epochs: int, start: Any = None) -> dict[int, State]:
        """Every client fine-tunes its whole model ``epochs`` epochs (no aggregation)."""
        ...
