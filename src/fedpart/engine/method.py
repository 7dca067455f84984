"""What the engine and :class:`~fedpart.engine.context.MethodContext` call on a method:
:class:`Method`. The engine never imports the methods (``tests/test_import_layers.py``); every
method's base, ``fedpart.algorithms.base.Algorithm``, declares each of these members. A module
of its own, below the engine's others, so that any of them can name the type."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    from fedpart.engine.recipe import Recipe
    from fedpart.topology import Graph

__all__ = ["Method"]


class Method(Protocol):
    """What the engine and :class:`MethodContext` use of a method beyond its server-round
    hooks: the client's model and training, and whether it runs peer to peer.

    ``peer_to_peer``: the clients exchange along a graph, with no server; the engine then
    builds the run's topology (``default_topology`` under ``topology.name=auto``) and runs the
    decentralized round, which calls ``communicate`` before local training when ``mix_first``,
    else after it. Declared once per class, read by the engine where a run is built and sized;
    no hook is looked up to find it out.
    """

    name: ClassVar[str]
    peer_to_peer: ClassVar[bool]
    default_topology: ClassVar[dict[str, Any]]
    mix_first: ClassVar[bool]

    def communicate(self, rnd: int, graph: Graph) -> None: ...
    def model_for(self, client: int) -> Any: ...
    def recipe(self, rnd: int, client: int) -> Recipe: ...
    def frozen_blocks(self, rnd: int) -> set[str]: ...
