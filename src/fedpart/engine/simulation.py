"""One experiment as an object: :class:`Simulation` holds what a run is built from and delegates
each job to the engine module that does it.

- building a run: :mod:`fedpart.engine.build`
- where local training runs: :mod:`fedpart.engine.backends`
- the rounds and the training of a round's clients: :mod:`fedpart.engine.rounds`
- evaluation: :mod:`fedpart.engine.evaluation`
- the run loop (run files, TensorBoard, checkpoints, progress): :meth:`Simulation.run`
- the checkpoint format: :mod:`fedpart.engine.checkpoint`

Methods, the Flower server (a subclass) and the benchmark harness call the methods of this
class; the modules above call back through it, so a subclass's or a caller's replacement of
``run_round``, ``train_clients``, ``evaluate``, ``evaluate_states`` or the checkpoint methods
takes effect everywhere.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from fedpart.config import Config, dump_config
from fedpart.engine import build, checkpoint, evaluation, rounds
from fedpart.engine.backends import (  # noqa: F401 - the names' former home
    PARALLEL_MIN_CLIENT_MACS,
    PARALLEL_MIN_MACS,
    Backend,
    make_backend,
    resolve_backend,
    round_macs,
)
from fedpart.engine.build import (  # noqa: F401 - the names' former home
    channels_last,
    model_options,
    plain,
    resolved_options,
)
from fedpart.engine.checkpoint import CHECKPOINT_FORMAT  # noqa: F401
from fedpart.engine.data import FederatedData
from fedpart.engine.decentralized import Exchange
from fedpart.engine.recipe import Phase, Recipe
from fedpart.engine.rounds import MacCounters, sample_clients  # noqa: F401
from fedpart.engine.training import TrainResult, TrainSettings, train_client
from fedpart.models import BlockModel
from fedpart.tracking.faults import crash, crash_point
from fedpart.tracking.run_dir import RunDir, summarize

#: what produced each accuracy of ``summary.json`` (its ``protocols`` entry)
PROTOCOL_DOCS = {
    "accuracy": "every client's personalised model on its own evaluation split, mean over clients",
    "accuracy_weighted": "as accuracy, weighted by the clients' evaluation samples",
    "global_accuracy": "the server model on the official test split",
    "participants_accuracy_before": (
        "FL-bench 'test before': each round's sampled clients, the model each receives before "
        "local training, sample-weighted over their evaluation splits"
    ),
    "participants_accuracy_after": (
        "FL-bench 'test after': each round's sampled clients after local training, "
        "sample-weighted over their evaluation splits"
    ),
}


@dataclass
class Result:
    """What a run returns: its summary, per-round metrics, per-client accuracies and directory."""

    summary: dict[str, Any]
    metrics: list[dict[str, Any]]
    client_accuracy: list[float]
    run_dir: Path | None
    simulation: Simulation | None = field(default=None, repr=False)


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
        self.device, self.determinism = build.open_device(cfg)
        self.data = data = build.federated_data(cfg, data, self.device)
        #: each client's capacity r_i and width p_i (docs/capacity.md), fixed for the run
        self.capacity = build.client_capacity(cfg, data.num_clients)
        self.algorithm = algo_cls(options, self)
        self.model: BlockModel = build.run_model(
            cfg, self.algorithm, data, self.capacity, self.device
        )
        self._macs = MacCounters(self.model, tuple(data.bundle.input_shape), data.num_classes)
        self.store = build.client_store(self.model, self.algorithm)
        self.topology = build.run_topology(cfg, self.algorithm, data.num_clients)
        self.exchange: Exchange | None = None
        #: where local training runs (``engine.backend``)
        self.executor: Backend = make_backend(
            resolve_backend(cfg, self.algorithm, self.model, data), self
        )
        self.algorithm.setup()
        self.rounds_completed = 0
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
        return rounds.train_settings(self.cfg, self.data.num_clients, rnd, client)

    def train(
        self,
        rnd: int,
        client: int,
        start: dict[str, torch.Tensor],
        recipe: Any = None,
        frozen: set[str] | None = None,
    ) -> TrainResult:
        """Run a client's local training (the method's recipe unless one is given)."""
        algo = self.algorithm
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

    # ----------------------------------------------------------------- run
    def _should_evaluate(self, rnd: int) -> bool:
        last = rnd == self.cfg.federation.rounds - 1
        return last or (rnd + 1) % self.cfg.evaluation.every == 0

    def run(self) -> Result:
        """Run the remaining rounds, then the method's finishing step and the final evaluation.

        With a run directory, the directory is locked for this process while the run writes it
        (a second process gets a one-line error).
        """
        rd = self.run_dir
        if rd is None or rd.locked:
            return self._run()
        rd.acquire()
        try:
            return self._run()
        finally:
            rd.release()

    def _run(self) -> Result:
        cfg = self.cfg
        rd = self.run_dir
        if rd is not None and self.rounds_completed == 0 and not self.finished and not self.resumed:
            rd.prepare(cfg.output.overwrite)
            if crash_point("run.start"):
                crash()
            rd.write_text("config.yaml", dump_config(cfg))
            if crash_point("run.config"):
                crash()
            rd.write_metrics([])
        tb = self._open_tensorboard()
        bar = None
        if not self.quiet:
            from tqdm import tqdm

            bar = tqdm(
                total=cfg.federation.rounds,
                initial=self.rounds_completed,
                file=sys.stderr,
                desc=f"{cfg.algorithm.name}",
                unit="round",
                dynamic_ncols=True,
            )
        try:
            while self.rounds_completed < cfg.federation.rounds:
                rnd = self.rounds_completed
                if rd is not None and crash_point("round.start"):
                    crash()
                t0 = time.perf_counter()
                row: dict[str, Any] = {"round": rnd}
                row.update(self.run_round(rnd))
                row.update(self.algorithm.round_metrics())
                if self._should_evaluate(rnd):
                    row.update(self.evaluate())
                else:
                    row.update(accuracy=None, accuracy_weighted=None, loss=None)
                self.elapsed += time.perf_counter() - t0
                row["lr"] = cfg.federation.lr * cfg.federation.lr_decay**rnd
                row["wall_seconds"] = round(self.elapsed, 4)
                self.rows.append(row)
                self.rounds_completed += 1
                if rd is not None:
                    rd.append_metrics(row)
                    if tb is not None:
                        evaluated = row.get("accuracy") is not None
                        tb.row(row, self.client_accuracy if evaluated else None)
                    every = cfg.output.checkpoint_every
                    if every and self.rounds_completed % every == 0:
                        self.save_checkpoint()
                if bar is not None:
                    bar.update(1)
                    if row.get("accuracy") is not None:
                        bar.set_postfix(acc=f"{row['accuracy']:.4f}")
            if not self.finished:
                t0 = time.perf_counter()
                changed = self.algorithm.finish()
                if changed:
                    self.final_row = {
                        "round": cfg.federation.rounds,
                        "stage": "final",
                        **self.evaluate(),
                    }
                    if rd is not None:
                        rd.append_metrics(self.final_row)
                        if tb is not None:
                            tb.row(self.final_row, self.client_accuracy)
                elif not self.rows or self.rows[-1].get("accuracy") is None:
                    self.final_row = {
                        "round": cfg.federation.rounds,
                        "stage": "final",
                        **self.evaluate(),
                    }
                    if rd is not None:  # logged too, so metrics.jsonl is what a resume rebuilds
                        rd.append_metrics(self.final_row)
                        if tb is not None:
                            tb.row(self.final_row, self.client_accuracy)
                self.elapsed += time.perf_counter() - t0
                self.finished = True
        finally:
            if bar is not None:
                bar.close()
            if tb is not None:
                tb.close()
            self.close_workers()
        result = self.result()
        if rd is not None:
            self.save_checkpoint()
            rd.write_json("summary.json", result.summary)
            rd.write_json(
                "clients.json",
                {
                    "client_accuracy": result.client_accuracy,
                    "client_test_samples": self.client_test_samples,
                    "client_train_samples": [c.num_train for c in self.data.clients],
                    **self.capacity.client_json(),
                },
            )
            if crash_point("run.end"):
                crash()
        return result

    def _open_tensorboard(self) -> Any:
        """The run's TensorBoard writer under ``output.tensorboard`` (else None); a resumed run
        purges the events at and after its checkpoint's round, which it writes again."""
        if not self.cfg.output.tensorboard or self.run_dir is None:
            return None
        from fedpart.tracking.tensorboard import TensorBoardLog

        if self.resumed and self.rounds_completed:
            return TensorBoardLog(self.run_dir.path, purge_step=self.rounds_completed)
        tb = TensorBoardLog(self.run_dir.path)  # from round 0: the folder starts empty
        tb.config(dump_config(self.cfg))
        return tb

    def result(self) -> Result:
        cfg = self.cfg
        summary = summarize(
            self.rows,
            self.final_row,
            algorithm=cfg.algorithm.name,
            dataset=cfg.dataset.name,
            num_clients=self.data.num_clients,
            rounds_completed=self.rounds_completed,
            wall_seconds=round(self.elapsed, 3),
            last_k=cfg.evaluation.last_k,
            protocols=PROTOCOL_DOCS,
            extra={
                "seed": cfg.seed,
                "model": cfg.model.name,
                # the options the model was built with, the method's model_defaults included
                # (FedBN's BatchNorm): a comparison table marks runs whose model differs
                "model_options": plain(model_options(cfg, type(self.algorithm))),
                "determinism": self.determinism,
                "personal_state_bytes": self.store.personal_bytes(),
                **(
                    {cfg.algorithm.name: values}
                    if (values := self.algorithm.summary_values())
                    else {}
                ),
            },
        )
        return Result(
            summary,
            list(self.rows),
            list(self.client_accuracy),
            self.run_dir.path if self.run_dir else None,
            self,
        )

    # ------------------------------------------------------------ checkpoints
    def state_tensors(self) -> dict[str, torch.Tensor]:
        """Everything that evolves over rounds, as flat named tensors."""
        return checkpoint.state_tensors(self)

    def save_checkpoint(self) -> None:
        checkpoint.save_checkpoint(self)

    def load_state(self, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        """Restore a checkpoint's tensors and counters."""
        checkpoint.load_state(self, tensors, meta)
