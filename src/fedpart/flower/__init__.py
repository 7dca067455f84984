"""Run a fedpart method on Flower's Message API (``pip install 'fedpart[flower]'``).

The server app drives a fedpart :class:`~fedpart.engine.simulation.Simulation`: the round loop,
client sampling, the method's ``start_state``/``upload``/``aggregate`` hooks, accounting,
``metrics.jsonl``, ``summary.json`` and checkpoints are the engine's own, so a Flower run writes
the same run directory as ``fedpart run``. What changes is where a client's work happens. Each
Flower node is one fedpart client (its ``partition-id``):

- the server sends a participant the non-personal tensors of its start state as an
  ``ArrayRecord``, with the method's recipe, optimiser settings and frozen blocks;
- the node overlays its personal tensors, kept between rounds in ``context.state`` (and, with
  node config ``state-dir``, on the node's disk), runs ``engine.training.train_client`` on its
  own partition and sends back the tensors the method's ``upload`` reads (the shared ones, plus
  any personal tensor the method itself uploads, such as a personal classifier sent up for a
  similarity),
  never the rest of its personal ones;
- evaluation is federated: every node evaluates its personalised model on its own split and
  returns per-sample outcomes, from which the engine computes the same accuracies.

Faults. A node that does not answer (its SuperNode killed, its network cut) fails the round as
a failed client does in the engine (``federation.client_failure``): the round aggregates the
updates that arrived, ``failed`` (``eval_failed`` for an evaluation) counts it, and the run goes
on; a SuperNode started again for the same partition rejoins with the personal tensors it kept
under ``state-dir``. The server's checkpoints name, per client, the round whose personal tensors
its node keeps, so a run with a run directory is resumed from its checkpoint (run config
``resume``) as ``fedpart run --resume`` does, each node restoring those tensors from its
``state-dir``.

Methods with their own ``local_update`` (Ditto, FedFomo, FedAP, …), decentralized methods and
capacity-aware methods are refused with a one-line error.
"""

from fedpart.flower.apps import resume_on_grid, run_on_grid, server_app
from fedpart.flower.node import client_app
from fedpart.flower.records import FLWR_VERSION, TRAFFIC_KEYS, array_bytes, require_flwr
from fedpart.flower.server import FlowerSimulation, check_supported

__all__ = [
    "FLWR_VERSION",
    "TRAFFIC_KEYS",
    "FlowerSimulation",
    "array_bytes",
    "check_supported",
    "client_app",
    "require_flwr",
    "resume_on_grid",
    "run_on_grid",
    "server_app",
]
