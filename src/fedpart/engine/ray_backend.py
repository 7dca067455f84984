"""The Ray backend: clients' local training as Ray tasks, on this machine or a Ray cluster.

``engine.backend=ray`` runs every client whose local update is the engine's default (train the
method's recipe from its start state) as one Ray task executing the sequential reference
:func:`~fedpart.engine.training.train_client`, so the numbers are those of the sequential
backend (bit-identical at the same ``engine.threads``). The model and the data pool are put in
Ray's object store once per run; each task receives its client's start state, recipe and
optimiser settings. Methods with their own local update run in the driver. Aggregation,
mixing and evaluation stay in the driver.

``engine.ray_address`` connects to an existing cluster (``ray://host:10001`` or ``auto``);
empty starts a local Ray with ``engine.ray_workers`` CPUs (0: all of them). Ray is an optional
dependency: ``pip install "fedpart[ray]"``.
"""

from __future__ import annotations

from typing import Any

import torch

from fedpart.engine.training import TrainResult, TrainSettings, train_client
from fedpart.errors import FedpartError


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise FedpartError(
            "engine.backend=ray needs Ray: pip install 'fedpart[ray]' (or pip install ray)"
        ) from exc
    return ray


def _train_task(
    model: Any,
    start: dict[str, torch.Tensor],
    recipe: Any,
    data: Any,
    client: int,
    rnd: int,
    settings: TrainSettings,
    frozen: set[str],
    threads: int,
) -> TrainResult:
    if threads:
        torch.set_num_threads(threads)
    return train_client(model, start, recipe, data, client, rnd, settings, frozen)


class RayTrainer:
    """Submits clients' local training to Ray and gathers the results in client order."""

    def __init__(self, sim: Any) -> None:
        ray = _ray()
        engine = sim.cfg.engine
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {
                "include_dashboard": False,
                "log_to_driver": False,
                "configure_logging": False,
            }
            if engine.ray_address:
                kwargs["address"] = engine.ray_address
            elif engine.ray_workers:
                kwargs["num_cpus"] = engine.ray_workers
            try:
                ray.init(**kwargs)
            except Exception as exc:  # noqa: BLE001 - Ray raises many kinds on a bad address
                where = engine.ray_address or "a local Ray"
                raise FedpartError(
                    f"engine.ray_address: cannot start or reach {where}: {exc}"
                ) from exc
        self.ray = ray
        self.threads = engine.threads or 1
        self.remote = ray.remote(num_cpus=1)(_train_task)
        self.model_ref = ray.put(sim.model)
        self.data_ref = ray.put(sim.data)

    def train(
        self,
        jobs: list[tuple[int, dict[str, torch.Tensor], Any, TrainSettings, set[str]]],
        rnd: int,
    ) -> dict[int, TrainResult]:
        """``jobs``: (client, start state, recipe, settings, frozen blocks) per client."""
        refs = [
            self.remote.remote(
                self.model_ref,
                start,
                recipe,
                self.data_ref,
                client,
                rnd,
                settings,
                frozen,
                self.threads,
            )
            for client, start, recipe, settings, frozen in jobs
        ]
        results = self.ray.get(refs)
        return {job[0]: result for job, result in zip(jobs, results, strict=True)}
