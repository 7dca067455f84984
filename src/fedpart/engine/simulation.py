"""One experiment as an object: :class:`Simulation` holds what a run is built from and delegates
each job to the engine module that does it.

- building a run: :mod:`fedpart.engine.build`
- where local training runs: :mod:`fedpart.engine.backends`
- the rounds and the training of a round's clients: :mod:`fedpart.engine.rounds`
- evaluation: :mod:`fedpart.engine.evaluation`
- the run loop and its observers (run files, TensorBoard, checkpoints, progress):
  :mod:`fedpart.engine.loop`
- the checkpoint format: :mod:`fedpart.engine.checkpoint`

Methods, the Flower server (a subclass) and the benchmark harness call the methods of this
class; the modules above call back through it, so a subclass's or a caller's replacement of
``run_round``, ``train_clients``, ``evaluate``, ``evaluate_states`` or the checkpoint methods
takes effect everywhere.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from fedpart.config import Config
from fedpart.engine import build, checkpoint, evaluation, loop, rounds
from fedpart.engine.backends import Backend, make_backend, resolve_backend
from fedpart.engine.context import MethodContext
from fedpart.engine.data import FederatedData
from fedpart.engine.loop import Result
from fedpart.engine.recipe import Phase, Recipe
from fedpart.engine.rounds import MacCounters
from fedpart.engine.training import TrainResult, TrainSettings
from fedpart.models import BlockModel
from fedpart.tracking.run_dir import RunDir


def _in_context(name: str, doc: str) -> Any:
    """A ``Simulation`` attribute kept in its method's context (``engine.context``)."""
    return property(
        lambda sim: getattr(sim.context, name),
        lambda sim, value: setattr(sim.context, name, value),
        doc=doc,
    )


class Simulation:
    """One experiment: data, model, method, state store, and the loop over rounds.

    ``Simulation(cfg).run()`` runs it; :func:`fedpart.resume` continues a stopped run.
    """

    def __init__(
        self,
        cfg: Config,
        *,
        run_dir: str | Path | None = None,
        quiet: bool = True,
        data: FederatedData | None = None,
    ) -> None:
        algo_cls, options, cfg = build.resolved_config(cfg)
        self.cfg = cfg
        self.quiet = quiet
        #: observers of the run loop beyond the built-in ones (``engine.loop.observers_for``)
        self.extra_observers: list[Any] = []
        self.device, self.determinism = build.open_device(cfg)
        self.data = data = build.federated_data(cfg, data, self.device)
        #: each client's capacity r_i and width p_i (docs/capacity.md), fixed for the run
        self.capacity = build.client_capacity(cfg, data.num_clients)
        #: what the method sees of the run (``engine.context``), filled in as the run is built
        self.context = MethodContext(cfg, data, self.device, self.capacity)
        self.algorithm = algo_cls(options, self.context)
        self.context.algorithm = self.algorithm
        self.model = build.run_model(cfg, self.algorithm, data, self.capacity, self.device)
        self._macs = MacCounters(self.model, tuple(data.bundle.input_shape), data.num_classes)
        self.store = build.client_store(self.model, self.algorithm)
        build.check_split(self.algorithm, self.model)
        self.topology = build.run_topology(cfg, self.algorithm, data.num_clients)
        #: where local training runs (``engine.backend``)
        self.executor: Backend = make_backend(
            resolve_backend(cfg, self.algorithm, self.model, data), self
        )
        # through the run's (or a subclass's: Flower's nodes) fine-tuning, never the run itself
        self.context.finetune = lambda epochs, start: self.finetune_all(epochs, start)
        self.algorithm.setup()
        self.finished = False
        self.rows: list[dict[str, Any]] = []
        self.final_row: dict[str, Any] | None = None
        self.client_accuracy: list[float] = []
        self.client_test_samples: list[int] = [int(c.test.numel()) for c in data.clients]
        self.elapsed = 0.0
        self.run_dir = RunDir(run_dir) if run_dir is not None else None
        #: stragglers' updates sent in the last round, applied in the next: client → (upload,
        #: weight) (``federation.client_failure_mode=straggle``; checkpointed)
        self.late: dict[int, tuple[dict[str, torch.Tensor], float]] = {}
        self.resumed = False  # set by fedpart.resume: the directory already holds this run

    # the run's model, store, exchange and round counter live in the method's context, so
    # that the method sees them as the engine changes them
    model = _in_context("model", "the run's model, as the method wrapped it")
    store = _in_context("store", "every client's state (``engine.store``)")
    exchange = _in_context("exchange", "the current decentralized round's messages' bytes")
    rounds_completed = _in_context("rounds_completed", "rounds the run has completed")

    # ------------------------------------------------------------ backend
    @property
    def backend(self) -> str:
        """The backend's name: ``sequential``, ``batched``, ``processes``, ``ray`` (``flower``)."""
        return self.executor.name

    @property
    def _remote(self) -> Any:
        """The process pool or Ray trainer while one is running."""
        return self.executor.remote

    def backend_description(self) -> str:
        """The backend in words, e.g. ``processes (2 workers, 1 thread each)``."""
        return self.executor.describe()

    def close_workers(self) -> None:
        """Stop the worker processes of the process backend, if any (Ray stays up: it may be a
        shared cluster)."""
        self.executor.close()

    # ------------------------------------------------------------ training
    def local_epochs(self, client: int | None) -> int:
        """``federation.local_epochs``, or the client's group's under ``local_epochs_groups``."""
        return rounds.local_epochs(self.cfg, self.data.num_clients, client)

    def train_settings(self, rnd: int, client: int | None = None) -> TrainSettings:
        return self.context.train_settings(rnd, client)

    def train(
        self,
        rnd: int,
        client: int,
        start: dict[str, torch.Tensor],
        recipe: Any = None,
        frozen: set[str] | None = None,
    ) -> TrainResult:
        """Run a client's local training (the method's recipe unless one is given)."""
        return self.context.train(rnd, client, start, recipe, frozen)

    def finetune_all(self, epochs: int, start: Any = None) -> dict[int, dict[str, torch.Tensor]]:
        """Every client (not only sampled ones) trains its whole model ``epochs`` epochs locally,
        starting from ``start(client)`` (default: its model in the store); no aggregation.
        Seeds are keyed by round ``federation.rounds`` so they differ from every training round."""
        rnd = self.cfg.federation.rounds
        recipe = Recipe(phases=(Phase(blocks=None, epochs=epochs, name="finetune"),))
        begin = start or self.store.client_state
        clients = list(range(self.data.num_clients))
        out = self.executor.finetune(rnd, clients, begin, recipe)
        if out is not None:
            return out
        return {c: self.train(rnd, c, begin(c), recipe=recipe, frozen=set()).state for c in clients}

    def train_clients(
        self, rnd: int, clients: list[int], backend: Backend | None = None
    ) -> tuple[dict[int, TrainResult], dict[str, Any]]:
        """Every listed client's local update (the method's ``local_update``, or what
        ``backend`` — by default the run's — trains), its personal tensors kept in the store,
        and the round's training accounting (:func:`fedpart.engine.rounds.train_clients`)."""
        return rounds.train_clients(self, rnd, clients, backend or self.executor)

    def mac_counter(self, model: BlockModel) -> Any:
        """The multiply-add counter of ``model``: the run's model or a client's narrow one."""
        return self._macs(model)

    # ------------------------------------------------------------ rounds
    def run_round(self, rnd: int) -> dict[str, Any]:
        """One round: the server round (sample, train, upload, aggregate) or, for decentralized
        methods, every client trains and exchanges along the round's graph."""
        if self.topology is not None:
            return self.decentralized_round(rnd)
        return rounds.server_round(self, rnd)

    def decentralized_round(self, rnd: int) -> dict[str, Any]:
        return rounds.decentralized_round(self, rnd)

    def failed_clients(self, rnd: int, participants: list[int]) -> set[int]:
        """The participants of round ``rnd`` that fail to return in time."""
        return rounds.failed_clients(self.cfg, rnd, participants, self.data.num_clients)

    # ------------------------------------------------------------ evaluation
    def evaluate_participants(
        self, clients: list[int], states: list[dict[str, torch.Tensor]]
    ) -> float | None:
        return evaluation.evaluate_participants(self, clients, states)

    def evaluate_states(
        self, clients: list[int], states: list[dict[str, torch.Tensor]], index: list[torch.Tensor]
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return evaluation.evaluate_states(self, clients, states, index, self.executor)

    def evaluate(self) -> dict[str, Any]:
        """Personalised accuracy (each client's model on its own split) and the global accuracy."""
        return evaluation.evaluate_run(self)

    # ------------------------------------------------------------ the run
    def run(self) -> Result:
        """Run the remaining rounds, then the method's finishing step and the final evaluation
        (:mod:`fedpart.engine.loop`)."""
        return loop.run(self)

    def result(self) -> Result:
        return loop.run_result(self)

    # ------------------------------------------------------------ checkpoints
    def state_tensors(self) -> dict[str, torch.Tensor]:
        """Everything that evolves over rounds, as flat named tensors."""
        return checkpoint.state_tensors(self)

    def save_checkpoint(self) -> None:
        checkpoint.save_checkpoint(self)

    def load_state(self, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        """Restore a checkpoint's tensors and counters."""
        checkpoint.load_state(self, tensors, meta)
