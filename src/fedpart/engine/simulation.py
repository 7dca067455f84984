"""The round loop of a centralized federation, with evaluation, accounting and checkpoints."""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedpart.config import Config, dump_config
from fedpart.engine import build, checkpoint
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
from fedpart.engine.cost import MacCounter
from fedpart.engine.data import FederatedData
from fedpart.engine.decentralized import Exchange
from fedpart.engine.evaluation import evaluate_clients, evaluate_samples
from fedpart.engine.mixing import tensor_bytes
from fedpart.engine.seeding import numpy_rng
from fedpart.engine.training import TrainResult, TrainSettings, train_client
from fedpart.errors import TrainingError
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


def _all_finite(state: dict[str, torch.Tensor]) -> bool:
    """Whether every floating-point tensor of ``state`` is free of NaN and infinity (one read
    back to the host)."""
    checks = [torch.isfinite(v).all() for v in state.values() if v.is_floating_point()]
    return bool(torch.stack(checks).all()) if checks else True


def _host_sums(outcomes: list[tuple[torch.Tensor, torch.Tensor]]) -> list[tuple[float, float]]:
    """Per outcome (correct, loss): the number correct and the sum of the losses, read back to
    the host at once (the sums are those of ``float(ok.sum())``, ``float(losses.sum())``)."""
    if not outcomes:
        return []
    counts = torch.stack([ok.sum() for ok, _ in outcomes]).tolist()
    losses = torch.stack([loss.sum() for _, loss in outcomes]).tolist()
    return [(float(c), float(v)) for c, v in zip(counts, losses, strict=True)]


def _numel(model: torch.nn.Module) -> dict[str, int]:
    """Parameter key → number of elements."""
    return {k: p.numel() for k, p in model.named_parameters()}


def sample_clients(seed: int, rnd: int, num_clients: int, join_ratio: float) -> list[int]:
    """The round's participants, from a stream keyed by (seed, round): the same for every method."""
    m = max(1, int(round(join_ratio * num_clients)))
    if m >= num_clients:
        return list(range(num_clients))
    chosen = numpy_rng(seed, "sample_clients", rnd).choice(num_clients, size=m, replace=False)
    return sorted(int(c) for c in chosen)


class Simulation:
    """One experiment: data, model, method, state store, and the loop over rounds.

    ``Simulation(cfg).run()`` runs it; ``Simulation.resume(dir)`` continues a stopped run.
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
        self.macs = MacCounter(self.model, tuple(data.bundle.input_shape), data.num_classes)
        self._mac_counters: dict[int, MacCounter] = {}
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

    # ------------------------------------------------------------ the round
    def local_epochs(self, client: int | None) -> int:
        """``federation.local_epochs``, or the client's group's under ``local_epochs_groups``."""
        f = self.cfg.federation
        if client is None or not f.local_epochs_groups:
            return f.local_epochs
        groups = f.local_epochs_groups
        return groups[client * len(groups) // self.data.num_clients]

    def train_settings(self, rnd: int, client: int | None = None) -> TrainSettings:
        f = self.cfg.federation
        return TrainSettings(
            lr=f.lr * f.lr_decay**rnd,
            momentum=f.momentum,
            weight_decay=f.weight_decay,
            batch_size=f.batch_size,
            local_epochs=self.local_epochs(client),
            drop_last=f.drop_last,
            seed=self.cfg.seed,
            cache_features=self.cfg.engine.cache_features,
            feature_batch_size=self.cfg.engine.eval_batch_size,
        )

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
        from fedpart.engine.recipe import Phase, Recipe

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
        """Every listed client's local update, its personal tensors kept in the store, and the
        round's training accounting.

        ``backend`` (by default the run's) trains the clients it can first
        (:mod:`fedpart.engine.backends`); every other client runs the method's ``local_update``
        here, in client order.
        """
        backend = backend or self.executor
        algo = self.algorithm
        skip = self.cfg.federation.on_nonfinite == "skip_client"
        skipped = 0
        try:
            batched = backend.train(rnd, clients)
        except TrainingError:
            if not skip:
                raise
            # train this round's clients one by one to find the one(s) to skip
            batched = {}
        results: dict[int, TrainResult] = {}
        loss_sum = 0.0
        samples = 0
        proxy = 0
        macs = 0.0
        trainable = 0
        full_numel = _numel(self.model)
        for client in clients:
            try:
                result = batched.get(client) or algo.local_update(rnd, client)
            except TrainingError:
                if not skip:
                    raise
                skipped += 1
                continue
            if skip and not _all_finite(result.state):
                skipped += 1  # a finite loss can still end in an overflowed last step
                continue
            model = algo.model_for(client)
            # a capacity-aware method's client trains the model of its width
            numel = full_numel if model is self.model else _numel(model)
            trained: set[str] = set()
            for keys, steps, phase_samples in result.phases:
                trained.update(keys)
                proxy += sum(numel[k] for k in keys) * steps
                macs += self.mac_counter(model).per_sample(result.state, keys) * phase_samples
            trainable = max(trainable, sum(numel[k] for k in trained))
            self.store.set_personal(client, result.state)
            algo.trained(rnd, client, result)
            results[client] = result
            loss_sum += result.loss * result.samples
            samples += result.samples
        stats = {
            "participants": len(clients),
            "train_loss": loss_sum / samples if samples else None,
            "trainable_params": int(trainable),
            "compute_proxy": int(proxy),
            "train_macs": int(macs),
        }
        if skip:
            stats["skipped_nonfinite"] = skipped
        return results, stats

    def mac_counter(self, model: BlockModel) -> MacCounter:
        """The multiply-add counter of ``model``: the run's model or a client's narrow one."""
        if model is self.model:
            return self.macs
        counter = self._mac_counters.get(id(model))
        if counter is None:
            shape = tuple(self.data.bundle.input_shape)
            counter = MacCounter(model, shape, self.data.num_classes)
            self._mac_counters[id(model)] = counter
        return counter

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

    def run_round(self, rnd: int) -> dict[str, Any]:
        """One round: the server round (sample, train, upload, aggregate) or, for decentralized
        methods, every client trains and exchanges along the round's graph."""
        if self.topology is not None:
            return self.decentralized_round(rnd)
        algo = self.algorithm
        cfg = self.cfg
        participants = sample_clients(
            cfg.seed, rnd, self.data.num_clients, cfg.federation.join_ratio
        )
        down_keys = algo.download_keys(rnd)
        # a capacity-aware method sends each participant the slice of its width
        down = sum(algo.download_bytes(rnd, c, down_keys) for c in participants)
        protocol = cfg.evaluation.participants
        evaluated: dict[str, Any] = {}
        if protocol in ("before", "both"):
            states = [algo.received_state(rnd, c) for c in participants]
            evaluated["participants_accuracy_before"] = self.evaluate_participants(
                participants, states
            )
        failed = self.failed_clients(rnd, participants)
        straggle = cfg.federation.client_failure_mode == "straggle"
        training = participants if straggle else [c for c in participants if c not in failed]
        results, stats = self.train_clients(rnd, training)
        if protocol in ("after", "both"):
            evaluated["participants_accuracy_after"] = self.evaluate_participants(
                list(results), [r.state for r in results.values()]
            )
        uploads: dict[int, dict[str, torch.Tensor]] = {}
        weights: dict[int, float] = {}
        up_bytes = 0
        late, self.late = self.late, {}
        for client, result in results.items():
            sent = algo.upload(rnd, client, result.state)
            up_bytes += tensor_bytes(sent)  # counted in the round it is sent, arrived or not
            weight = float(self.data.clients[client].num_train)
            if client in failed:  # a straggler's update arrives next round
                self.late[client] = (sent, weight)
                continue
            uploads[client] = sent
            weights[client] = weight
        applied = self._apply_late(late, uploads, weights)
        if uploads:  # a round where nobody returned keeps the model
            algo.aggregate(rnd, uploads, weights)
        row = {
            **stats,
            **evaluated,
            "participants": len(participants),
            "up_bytes": int(up_bytes),
            "down_bytes": int(down),
        }
        f = cfg.federation
        if f.client_failure or f.client_failure_schedule:
            row["failed"] = len(failed)
            if straggle:
                row["late_applied"] = applied
        return row

    def failed_clients(self, rnd: int, participants: list[int]) -> set[int]:
        """The participants of round ``rnd`` that fail to return in time
        (``federation.client_failure``, ``client_failure_schedule``).

        Client c fails when u[c] < ``client_failure``, u drawn for all clients from a stream
        keyed by (seed, round): the same clients fail for every method and on resume.
        """
        f = self.cfg.federation
        failed = {c for r, c in f.client_failure_schedule if r == rnd and c in participants}
        if f.client_failure > 0:
            u = numpy_rng(self.cfg.seed, "client_failure", rnd).random(self.data.num_clients)
            failed.update(c for c in participants if u[c] < f.client_failure)
        return failed

    @staticmethod
    def _apply_late(
        late: dict[int, tuple[dict[str, torch.Tensor], float]],
        uploads: dict[int, dict[str, torch.Tensor]],
        weights: dict[int, float],
    ) -> int:
        """Add last round's late updates to this round's: a client's fresh update replaces its
        stale one, and a stale one carrying other keys than this round's (a method whose shared
        blocks changed) is dropped. Returns how many were applied."""
        keys = set(next(iter(uploads.values()))) if uploads else None
        applied = 0
        for client in sorted(late):
            sent, weight = late[client]
            if client in uploads or (keys is not None and set(sent) != keys):
                continue
            keys = set(sent) if keys is None else keys
            uploads[client] = sent
            weights[client] = weight
            applied += 1
        return applied

    def decentralized_round(self, rnd: int) -> dict[str, Any]:
        """Every client trains; the method's ``communicate`` mixes along the round's graph
        (before training when the method's algorithm box aggregates first)."""
        assert self.topology is not None
        algo = self.algorithm
        graph = self.topology.graph(rnd)
        self.exchange = Exchange(self.data.num_clients)
        if algo.mix_first:
            algo.communicate(rnd, graph)
        clients = list(range(self.data.num_clients))
        results, stats = self.train_clients(rnd, clients)
        if not algo.mix_first:
            # under on_nonfinite=skip_client a discarded client keeps its previous model and
            # takes no part in this round's exchange (a method that mixes first has already sent)
            algo.communicate(rnd, graph.isolated([c for c in clients if c not in results]))
        return {**stats, **self.exchange.row()}

    # ------------------------------------------------------------ evaluation
    def evaluate_participants(
        self, clients: list[int], states: list[dict[str, torch.Tensor]]
    ) -> float | None:
        """Sample-weighted accuracy of ``states[i]`` on client ``clients[i]``'s evaluation split
        (FL-bench's per-round metric: Σ correct / Σ samples over the round's participants)."""
        split = self.cfg.evaluation.split
        index = [getattr(self.data.clients[c], split) for c in clients]
        outcomes = self.evaluate_states(clients, states, index)
        total = sum(ok.numel() for ok, _ in outcomes)
        return float(sum(c for c, _ in _host_sums(outcomes)) / total) if total else None

    def evaluate_states(
        self, clients: list[int], states: list[dict[str, torch.Tensor]], index: list[torch.Tensor]
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per-sample (correct, loss) of ``states[i]`` on the samples ``index[i]``, each with the
        model of client ``clients[i]``: clients are grouped by that model (a capacity-aware
        method's widths), so the ordinary case is one call sharing body passes across clients."""
        bs = self.cfg.engine.eval_batch_size
        models = [self.algorithm.model_for(c) for c in clients]
        if all(m is self.model for m in models):
            return evaluate_clients(
                self.model, states, index, self.data, bs, feature_map=self.executor.feature_map()
            )
        out: list[Any] = [None] * len(clients)
        groups: dict[int, list[int]] = {}
        for i, m in enumerate(models):
            groups.setdefault(id(m), []).append(i)
        for members in groups.values():
            outcomes = evaluate_clients(
                models[members[0]],
                [states[i] for i in members],
                [index[i] for i in members],
                self.data,
                bs,
            )
            for i, outcome in zip(members, outcomes, strict=True):
                out[i] = outcome
        return out

    def evaluate(self) -> dict[str, Any]:
        """Personalised accuracy (each client's model on its own split) and the global accuracy."""
        split = self.cfg.evaluation.split
        bs = self.cfg.engine.eval_batch_size
        n = self.data.num_clients
        correct = np.zeros(n)
        total = np.zeros(n)
        loss = np.zeros(n)
        states = [self.algorithm.eval_state(c) for c in range(n)]
        index = [getattr(self.data.clients[c], split) for c in range(n)]
        outcomes = self.evaluate_states(list(range(n)), states, index)
        # per client (correct, loss sum) read back to the host in one transfer
        sums = _host_sums(outcomes)
        for c, (ok, _) in enumerate(outcomes):
            correct[c], loss[c] = sums[c]
            total[c] = ok.numel()
        has = total > 0
        acc = np.where(has, correct / np.maximum(total, 1), np.nan)
        self.client_accuracy = [float(a) if not math.isnan(a) else None for a in acc]
        row: dict[str, Any] = {
            "accuracy": float(np.nanmean(acc)) if has.any() else None,
            "accuracy_weighted": float(correct.sum() / total.sum()) if total.sum() else None,
            "loss": float(loss.sum() / total.sum()) if total.sum() else None,
        }
        if self.algorithm.has_global_model and self.data.global_test is not None:
            ok, losses = evaluate_samples(
                self.model, self.store.global_state, self.data, self.data.global_test, bs
            )
            accuracy, mean_loss = torch.stack([ok.float().mean(), losses.mean()]).tolist()
            row["global_accuracy"] = accuracy
            row["global_loss"] = mean_loss
        return row

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

    # ---------------------------------------------------------- checkpoints
    def state_tensors(self) -> dict[str, torch.Tensor]:
        """Everything that evolves over rounds, as flat named tensors."""
        return checkpoint.state_tensors(self)

    def save_checkpoint(self) -> None:
        checkpoint.save_checkpoint(self)

    def load_state(self, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        """Restore a checkpoint's tensors and counters (:mod:`fedpart.engine.checkpoint`)."""
        checkpoint.load_state(self, tensors, meta)
