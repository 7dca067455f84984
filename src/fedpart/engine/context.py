"""What a method may use of the run it belongs to: :class:`MethodContext`.

A method (``fedpart.algorithms``) is built with a context, not with the engine's ``Simulation``:
the engine makes one :class:`MethodContext` per run and hands it to ``Algorithm.__init__``.
It holds exactly what methods read or call — the config (seed, federation and topology
settings), the model, the federated data, the state store, the device, the capacity profile,
the decentralized round's exchange, the round counter, and a client's training — and nothing
else of the run: it has slots, no ``__dict__``, and no way back to the ``Simulation``.

The engine fills it in the order a run is built: ``cfg``, ``data``, ``device`` and
``capacity`` before the method exists; ``algorithm`` once it does; ``model`` and ``store`` once
the method has shaped them (``wrap_model``, ``stored_blocks``); ``exchange`` when a
decentralized round starts; ``rounds_completed`` as rounds end. A test builds one directly
from a three-block model and a few tensors (``tests/test_toy_methods.py``).

:class:`~fedpart.engine.method.Method` is the other direction: what the engine and the
context call on a method (re-exported here).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from fedpart.config import Config
from fedpart.engine.method import Method
from fedpart.engine.rounds import train_settings
from fedpart.engine.store import ClientStateStore
from fedpart.engine.training import TrainResult, TrainSettings, train_client

if TYPE_CHECKING:
    from fedpart.engine.capacity import CapacityProfile
    from fedpart.engine.data import FederatedData
    from fedpart.engine.decentralized import Exchange
    from fedpart.models import BlockModel

__all__ = ["Method", "MethodContext"]

State = dict[str, torch.Tensor]
#: ``(epochs, start) -> {client: state}``: the run's fine-tuning of every client
Finetune = Callable[[int, Any], dict[int, State]]


@dataclass(eq=False, slots=True)
class MethodContext:
    """The run as a method sees it: its config, model, federated data, state store, device,
    capacity profile, the decentralized round's exchange, the round counter, and training."""

    cfg: Config
    data: FederatedData  #: the federated data on the device
    device: torch.device
    capacity: CapacityProfile | None = None  #: every client's capacity and width
    model: BlockModel | None = None  #: the run's model as the method wrapped it (once built)
    store: ClientStateStore | None = None  #: set once the model exists
    exchange: Exchange | None = None  #: a decentralized round's messages' bytes (else None)
    rounds_completed: int = 0
    algorithm: Method | None = None  #: the method itself (helpers shared by methods reach it)
    #: how the run fine-tunes every client (:meth:`finetune_all`), set by the engine
    finetune: Finetune | None = field(default=None, repr=False)

    def train_settings(self, rnd: int, client: int | None = None) -> TrainSettings:
        """The optimiser settings of ``client``'s training in round ``rnd``."""
        return train_settings(self.cfg, self.data.num_clients, rnd, client)

    def train(
        self,
        rnd: int,
        client: int,
        start: State,
        recipe: Any = None,
        frozen: set[str] | None = None,
    ) -> TrainResult:
        """A client's local training from ``start`` (the method's recipe unless one is given)."""
        algo = self.algorithm
        assert algo is not None, "the method is set once it exists"
        return train_client(
            algo.model_for(client),
            start,
            recipe if recipe is not None else algo.recipe(rnd, client),
            self.data,
            client,
            rnd,
            self.train_settings(rnd, client),
            algo.frozen_blocks(rnd) if frozen is None else frozen,
        )

    def finetune_all(self, epochs: int, start: Any = None) -> dict[int, State]:
        """Every client (not only sampled ones) trains its whole model ``epochs`` epochs locally,
        starting from ``start(client)`` (default: its model in the store); no aggregation
        (the run's backend, or Flower's nodes, do it: :attr:`finetune`)."""
        if self.finetune is None:
            raise RuntimeError("this context belongs to no run that can fine-tune")
        return self.finetune(epochs, start)
