"""Backends: where a round's local training runs, as objects behind one interface.

A :class:`Backend` is given a round's clients and returns the :class:`TrainResult` of those it
trains itself (``train``); the engine then runs the method's ``local_update`` in the driver, one
client after another and in client order, for every client it did not return. So the sequential
reference returns nothing, the batched backend the clients it can stack, and the process and Ray
backends every client of a method with the engine's default local update (the same jobs:
client, start state, recipe, optimiser settings, frozen blocks). The implementations live in
:mod:`fedpart.engine.batched`, :mod:`fedpart.engine.parallel` and
:mod:`fedpart.engine.ray_backend`; :func:`resolve_backend` picks the backend a run uses, and
:class:`Delivered` hands the engine results trained elsewhere (Flower's nodes).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from fedpart.config import Config
from fedpart.engine.cost import MacCounter
from fedpart.engine.data import FederatedData
from fedpart.engine.store import compact_state
from fedpart.engine.training import TrainResult, TrainSettings
from fedpart.errors import FedpartError
from fedpart.models import BlockModel

if TYPE_CHECKING:
    from fedpart.engine.method import Method

State = dict[str, torch.Tensor]

#: ``engine.backend=auto`` runs worker processes on a CPU with several cores when a round's
#: local training is at least this many multiply-adds (forward + backward): below it, starting
#: the workers and moving states cost more than the second core saves. Measured by
#: ``fedpart bench --workers`` (``docs/results/performance.md``): the quick start's rounds
#: (~10⁸–10⁹ multiply-adds) ran 3× slower in two processes, FedPer's and FedRep's MNIST rounds
#: (~10¹¹) 1.9× faster than one process.
PARALLEL_MIN_MACS = 1e10
#: ... and each client's share at least this many: a job costs ~20 ms of shipping states both
#: ways, and 1,000 clients of 5 samples each (6·10⁷ multiply-adds apiece) ran 2× slower in two
#: processes than in one
PARALLEL_MIN_CLIENT_MACS = 1e9


def round_macs(
    cfg: Config, algorithm: Method, model: BlockModel, data: FederatedData
) -> tuple[float, float]:
    """An estimate of one round's local-training multiply-adds, in all and per participant: the
    participants' training samples × local epochs × the whole model's forward + backward
    multiply-adds per sample."""
    n = data.num_clients
    per_round = n if algorithm.peer_to_peer else max(1, round(cfg.federation.join_ratio * n))
    mean_train = sum(c.num_train for c in data.clients) / max(1, n)
    counter = MacCounter(model, tuple(data.bundle.input_shape), data.num_classes)
    state = dict(model.state_dict())
    per_sample = counter.per_sample(state, [k for k, _ in model.named_parameters()])
    per_client = mean_train * cfg.federation.local_epochs * per_sample
    return per_round * per_client, per_client


def resolve_backend(
    cfg: Config, algorithm: Any, model: BlockModel, data: FederatedData | None = None
) -> str:
    """The backend a run uses: ``auto`` is the fastest exact one the method and model support.

    On a GPU it is the batched backend wherever the method and model allow it (one kernel per
    step for all clients removes the launch overhead of many small ones). On a CPU with more than
    one core it is the process backend (the sequential backend's numbers, bit for bit) when the
    method supports it and a round trains at least :data:`PARALLEL_MIN_MACS` multiply-adds, each
    client at least :data:`PARALLEL_MIN_CLIENT_MACS`; else
    the sequential backend (``fedpart bench`` measured the vmap-batched training at 0.6–0.8× of
    it for 28×28 CNNs on a CPU). Worker processes are spawned, which imports the caller's main
    module again, so ``auto`` starts them only where that is known to be safe:
    ``FEDPART_AUTO_WORKERS=1`` in the environment, which the ``fedpart`` command line sets (a
    Python script whose top level is guarded by ``if __name__ == "__main__":`` may set it too, or
    ask for ``engine.backend=processes``); ``fedpart sweep --jobs N`` sets it to ``0`` in its
    runs, which already fill the cores.
    """
    from fedpart.engine.batched import can_batch

    wanted = cfg.engine.backend
    supported = type(algorithm).backends
    # the batched step does not clip gradients (``federation.max_grad_norm``)
    clipping = "federation.max_grad_norm is set" if cfg.federation.max_grad_norm else None
    if wanted == "auto":
        if "batched" in supported and cfg.engine.device.startswith("cuda") and not clipping:
            if can_batch(model, []) is None:
                return "batched"
        if (
            "processes" in supported
            and data is not None
            and not cfg.engine.device.startswith("cuda")
            and os.environ.get("FEDPART_AUTO_WORKERS", "") == "1"
        ):
            from fedpart.engine.parallel import worker_count

            if worker_count(cfg.engine) > 1:
                total, per_client = round_macs(cfg, algorithm, model, data)
                if total >= PARALLEL_MIN_MACS and per_client >= PARALLEL_MIN_CLIENT_MACS:
                    return "processes"
        return "sequential"
    if wanted not in supported:
        raise FedpartError(
            f"engine.backend: {cfg.algorithm.name} supports {', '.join(supported)}, not {wanted}"
        )
    if wanted == "batched":
        reason = clipping or can_batch(model, [])
        if reason is not None:
            raise FedpartError(f"engine.backend: batched is not possible here: {reason}")
    return wanted


def supported(algorithm: Any, backend: str) -> bool:
    """Whether ``algorithm`` declares ``backend`` among its ``backends`` (a method with a local
    update of its own declares only ``sequential``: its clients train in the driver)."""
    return backend in type(algorithm).backends


class Backend:
    """The sequential reference: it trains nothing itself, so every client runs the method's
    ``local_update`` in the driver, one after another."""

    name = "sequential"

    def __init__(self, sim: Any) -> None:
        self.sim = sim

    def train(self, rnd: int, clients: list[int]) -> dict[int, TrainResult]:
        """The results of the clients of ``clients`` this backend trains (the rest: none)."""
        return {}

    def finetune(
        self, rnd: int, clients: list[int], begin: Callable[[int], State], recipe: Any
    ) -> dict[int, State] | None:
        """Every client's whole model trained by ``recipe`` from ``begin(client)``, or ``None``
        where the driver trains them one by one."""
        return None

    def feature_map(self) -> Any:
        """Who computes evaluation's body passes (``evaluation.FeatureMap``); ``None``: the
        driver."""
        return None

    def layout(self, index: list[torch.Tensor]) -> Any:
        """The layout evaluation in one pass uses for these clients' samples
        (:mod:`fedpart.engine.evaluation_pass`), or ``None``: the reference evaluation."""
        return None

    @property
    def remote(self) -> Any:
        """The pool or Ray handle of a remote backend (``None`` elsewhere, or once closed)."""
        return None

    def describe(self) -> str:
        """The backend in words, e.g. ``sequential (2 threads)``."""
        threads = self.sim.cfg.engine.threads or torch.get_num_threads()
        return f"{self.name} ({threads} thread{'s' * (threads > 1)})"

    def close(self) -> None:
        """Release what the backend started (worker processes)."""


class Batched(Backend):
    """Clients whose local update is the engine's default and who share a recipe and optimiser
    settings trained together (:mod:`fedpart.engine.batched`); the rest run sequentially."""

    name = "batched"

    def train(self, rnd: int, clients: list[int]) -> dict[int, TrainResult]:
        from fedpart.engine.batched import can_batch, train_clients_batched
        from fedpart.engine.recipe import skeleton, tensor_slots

        sim = self.sim
        algo = sim.algorithm
        if not supported(algo, self.name):
            return {}
        # Clients whose recipes differ only in their phases' learning-rate factors (push-sum's
        # 1/μ_i) are grouped, the factors passed per client.
        # a capacity-aware method's clients of different widths run different models: they
        # are grouped by model too, never stacked together
        groups: dict[tuple[Any, TrainSettings, int], list[int]] = {}
        models: dict[int, Any] = {}
        factors: dict[int, list[float]] = {}
        slots: dict[int, list[Any]] = {}
        for client in clients:
            recipe = algo.recipe(rnd, client)
            factors[client] = [p.lr_scale for p in recipe.phases]
            slots[client] = tensor_slots(recipe)
            plain = dataclasses.replace(
                recipe,
                phases=tuple(dataclasses.replace(p, lr_scale=1.0) for p in recipe.phases),
            )
            model = algo.model_for(client)
            models[id(model)] = model
            key = (skeleton(plain), sim.train_settings(rnd, client), id(model))
            groups.setdefault(key, []).append(client)
        out: dict[int, TrainResult] = {}
        frozen = algo.frozen_blocks(rnd)
        for (recipe, settings, model_id), members in groups.items():
            model = models[model_id]
            if len(members) < 2 or can_batch(model, [recipe]) is not None:
                continue
            jobs = [algo.job(rnd, c) for c in members]
            scales = [factors[c] for c in members]
            if all(f == 1.0 for s in scales for f in s):
                scales = None  # no per-client factor: no multiplication of every gradient
            trained = train_clients_batched(
                model,
                [job.start for job in jobs],
                recipe,
                sim.data,
                members,
                rnd,
                settings,
                frozen,
                chunk=sim.cfg.engine.batch_clients or None,
                lr_scales=scales,
                slot_values=[slots[c] for c in members],
            )
            for job, result in zip(jobs, trained, strict=True):
                result.job = job
                out[job.client] = result
        return out

    def finetune(
        self, rnd: int, clients: list[int], begin: Callable[[int], State], recipe: Any
    ) -> dict[int, State] | None:
        from fedpart.engine.batched import train_clients_batched

        sim = self.sim
        if sim.algorithm.capacity_aware:
            return None
        by_settings: dict[TrainSettings, list[int]] = {}
        for c in clients:
            by_settings.setdefault(sim.train_settings(rnd, c), []).append(c)
        out: dict[int, State] = {}
        for settings, members in by_settings.items():
            trained = train_clients_batched(
                sim.model,
                [begin(c) for c in members],
                recipe,
                sim.data,
                members,
                rnd,
                settings,
                set(),
                chunk=sim.cfg.engine.batch_clients or None,
            )
            out.update({c: r.state for c, r in zip(members, trained, strict=True)})
        return {c: out[c] for c in clients}

    def layout(self, index: list[torch.Tensor]) -> Any:
        """The padded layout of these clients' samples for evaluation in one pass
        (:mod:`fedpart.engine.evaluation_pass`), kept for lists evaluated round after round
        (every client's split: the same tensors each time)."""
        from fedpart.engine.evaluation_pass import Layout

        cache: dict[tuple[int, ...], tuple[list[torch.Tensor], Any]]
        cache = self.__dict__.setdefault("_layouts", {})
        key = tuple(id(i) for i in index)
        hit = cache.get(key)
        if hit is not None and all(a is b for a, b in zip(hit[0], index, strict=True)):
            return hit[1]
        if len(cache) >= 4:
            cache.pop(next(iter(cache)))
        cache[key] = (list(index), Layout(index))
        return cache[key][1]


class Remote(Backend):
    """Every client of a method with the default local update as one job elsewhere: jobs of
    (client, start state, recipe, settings, frozen blocks), trained by a trainer with
    ``train(jobs, rnd) -> {client: result}`` started on first use."""

    def __init__(self, sim: Any) -> None:
        super().__init__(sim)
        self._trainer: Any = None

    def start(self) -> Any:
        """The trainer (a pool of worker processes, or Ray tasks)."""
        raise NotImplementedError

    @property
    def remote(self) -> Any:
        return self._trainer

    def trainer(self) -> Any:
        if self._trainer is None:
            self._trainer = self.start()
        return self._trainer

    def train(self, rnd: int, clients: list[int]) -> dict[int, TrainResult]:
        sim = self.sim
        algo = sim.algorithm
        if not supported(algo, self.name):
            return {}
        trainer = self.trainer()
        frozen = algo.frozen_blocks(rnd)
        jobs = {c: algo.job(rnd, c) for c in clients}
        sent = [
            (c, compact_state(job.start), job.recipe, sim.train_settings(rnd, c), frozen)
            for c, job in jobs.items()
        ]
        results = trainer.train(sent, rnd)
        for c, result in results.items():
            result.job = jobs[c]
        return results

    def close(self) -> None:
        """Stop the worker processes, if any (Ray stays up: it may be a shared cluster)."""
        close = getattr(self._trainer, "close", None)
        if close is not None:
            close()
            self._trainer = None


class Processes(Remote):
    """Worker processes on this machine (:mod:`fedpart.engine.parallel`); they also compute
    evaluation's body passes."""

    name = "processes"

    def start(self) -> Any:
        from fedpart.engine.parallel import ProcessTrainer

        return ProcessTrainer(self.sim)

    def feature_map(self) -> Any:
        return self.trainer().features

    def describe(self) -> str:
        from fedpart.engine.parallel import worker_count

        workers = worker_count(self.sim.cfg.engine)
        threads = self.sim.cfg.engine.threads or 1
        return f"processes ({workers} workers, {threads} thread{'s' * (threads > 1)} each)"


class Ray(Remote):
    """Ray tasks on this machine or a Ray cluster (:mod:`fedpart.engine.ray_backend`)."""

    name = "ray"

    def start(self) -> Any:
        from fedpart.engine.ray_backend import RayTrainer

        return RayTrainer(self.sim)


class Delivered(Backend):
    """Results trained elsewhere, handed to the engine's accounting as if this backend had
    trained them (Flower's nodes: ``results`` are the clients whose node replied)."""

    def __init__(self, name: str, results: dict[int, TrainResult] | None = None) -> None:
        super().__init__(None)
        self.name = name
        self.results = results or {}

    def train(self, rnd: int, clients: list[int]) -> dict[int, TrainResult]:
        return {c: self.results[c] for c in clients}

    def describe(self) -> str:
        return self.name


#: ``engine.backend`` → its class
BACKENDS: dict[str, type[Backend]] = {
    "sequential": Backend,
    "batched": Batched,
    "processes": Processes,
    "ray": Ray,
}


def make_backend(name: str, sim: Any) -> Backend:
    """The backend ``name`` (as :func:`resolve_backend` returns it) for ``sim``."""
    return BACKENDS[name](sim)
