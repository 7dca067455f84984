"""The Ray backend: clients' local training as Ray tasks, on this machine or a Ray cluster.

``engine.backend=ray`` runs every client whose local update is the engine's default (train the
method's recipe from its start state) as one Ray task executing the sequential reference
:func:`~fedpart.engine.training.train_client`, so the numbers are those of the sequential
backend (bit-identical at the same ``engine.threads``). The model and the data pool are put in
Ray's object store once per run, as CPU tensors; each worker process fetches them once and keeps
them (on its device) for the run's later tasks. Each task receives its client's start state,
recipe and optimiser settings. Methods with their own local update run in the driver.
Aggregation, mixing and evaluation stay in the driver.

**Devices.** With ``engine.device=cuda[:N]`` every task asks Ray for
``engine.ray_gpus_per_client`` of a GPU (0.25: four clients share one GPU) besides one CPU, and
trains on the GPU Ray gave it (Ray sets ``CUDA_VISIBLE_DEVICES`` in the worker, so there it is
``cuda``); on the CPU the tasks ask for no GPU. That decision follows ``engine.device``, not
whether the driver sees a GPU. Tensors travel between the driver and the tasks as CPU tensors —
start states, the tensors that recipes hold (FedProx's reference, FedRoD's class counts) and the
results — and are moved on arrival: to the task's device in a task, to the simulation's device
(``sim.device``) in the driver. GPU tasks reuse their worker process (Ray's default for GPU
tasks is a new process per task, which would move the data pool to the GPU and start CUDA for
every client); the workers apply ``engine.deterministic`` as the driver does
(:func:`~fedpart.engine.placement.configure_device`). A reused worker keeps the GPU it started
CUDA on: CUDA cannot change devices in a running process.

``engine.ray_address`` connects to an existing cluster (``host:port`` of the head's GCS from a
cluster node, ``ray://host:10001`` from elsewhere, or ``auto``); empty starts a local Ray with
``engine.ray_workers`` CPUs (0: all of them). Ray is an optional dependency:
``pip install "fedpart[ray]"``.
"""

from __future__ import annotations

import contextvars
import copy
import io
import pickle
import sys
from collections import Counter, OrderedDict
from typing import Any

import cloudpickle
import torch

from fedpart.engine.placement import configure_device
from fedpart.engine.training import TrainResult, TrainSettings, train_client
from fedpart.errors import FedpartError

#: one training job: (client, start state, recipe, settings, frozen blocks)
Job = tuple[int, dict[str, torch.Tensor], Any, TrainSettings, set[str]]

#: runs whose model and data pool a worker process keeps (on its device), the newest last
_KEEP_RUNS = 2
_WORKER: OrderedDict[tuple[str, str], tuple[Any, Any]] = OrderedDict()

#: the device that tensors unpickled by :func:`_loads` are moved to (``None``: left on the CPU)
_TARGET: contextvars.ContextVar[torch.device | None] = contextvars.ContextVar(
    "fedpart_ray_target", default=None
)


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise FedpartError(
            "engine.backend=ray needs Ray: pip install 'fedpart[ray]' (or pip install ray)"
        ) from exc
    return ray


def uses_gpus(engine: Any) -> bool:
    """Whether the client tasks train on GPUs: ``engine.device`` is ``cuda[:N]`` (whatever the
    driver's own hardware)."""
    return engine.device.startswith("cuda")


def task_options(engine: Any) -> dict[str, Any]:
    """The Ray options of one client task: one CPU and, on CUDA, ``engine.ray_gpus_per_client``
    of a GPU (with worker reuse, so that a worker moves the model and the data pool to its GPU
    once per run rather than once per client)."""
    options: dict[str, Any] = {"num_cpus": 1}
    if uses_gpus(engine):
        gpus = engine.ray_gpus_per_client
        if not gpus > 0:
            raise FedpartError(
                f"engine.ray_gpus_per_client: a task on {engine.device} needs a share of a GPU "
                f"(e.g. 0.25), got {gpus}"
            )
        options["num_gpus"] = gpus
        options["max_calls"] = 0  # Ray's default for GPU tasks is 1: a new process per task
    return options


# ------------------------------------------------------------------ tensors on the wire
def _rebuild(tensor: torch.Tensor, requires_grad: bool, parameter: bool) -> torch.Tensor:
    target = _TARGET.get()
    if target is not None and tensor.device != target:
        tensor = tensor.to(target)
    if parameter:
        return torch.nn.Parameter(tensor, requires_grad=requires_grad)
    if requires_grad:
        tensor.requires_grad_(True)
    return tensor


class _CpuPickler(cloudpickle.Pickler):
    """cloudpickle (recipes may hold closures), every tensor written as a CPU tensor that
    :func:`_loads` moves to the receiver's device."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._on_cpu: dict[int, torch.Tensor] = {}  # the CPU copies written (kept alive)

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) in (torch.Tensor, torch.nn.Parameter) and id(obj) not in self._on_cpu:
            cpu = obj.detach().cpu()
            self._on_cpu[id(cpu)] = cpu
            return _rebuild, (cpu, obj.requires_grad, type(obj) is torch.nn.Parameter)
        return super().reducer_override(obj)


def _dumps(obj: Any) -> bytes:
    buffer = io.BytesIO()
    _CpuPickler(buffer).dump(obj)
    return buffer.getvalue()


def _loads(blob: bytes, device: torch.device) -> Any:
    token = _TARGET.set(device)
    try:
        return pickle.loads(blob)
    finally:
        _TARGET.reset(token)


# ------------------------------------------------------------------ the model and data pool
def data_on(data: Any, device: torch.device | str) -> Any:
    """``data`` (a :class:`~fedpart.engine.data.FederatedData`) with its sample pool, labels and
    index arrays on ``device`` (itself when they are there already)."""
    return data.to(device)


def _model_on_cpu(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` itself when its tensors are on the CPU, else a CPU copy (the driver's model
    stays where it is)."""
    tensors = [*model.parameters(), *model.buffers()]
    if all(t.device.type == "cpu" for t in tensors):
        return model
    return copy.deepcopy(model).to("cpu")


def _worker_copies(shared: list[Any], device: torch.device) -> tuple[Any, Any]:
    """The run's model and data pool on ``device``, fetched from the object store and moved
    once per worker process (``shared``: their object refs, passed inside a list so that Ray
    does not fetch them for every task)."""
    key = (shared[0].hex(), str(device))
    kept = _WORKER.get(key)
    if kept is None:
        import ray

        model, data = ray.get(list(shared))
        if device.type != "cpu":
            model = copy.deepcopy(model).to(device)
            data = data_on(data, device)
        kept = _WORKER[key] = (model, data)
        while len(_WORKER) > _KEEP_RUNS:
            _WORKER.popitem(last=False)
    _WORKER.move_to_end(key)
    return kept


def _train_job(model: Any, data: Any, payload: bytes, device: torch.device) -> bytes:
    """One client's training on ``device``, where ``model`` and ``data`` already are: the job's
    tensors (start state, recipe) land there; the result leaves as CPU tensors."""
    client, rnd, start, recipe, settings, frozen = _loads(payload, device)
    return _dumps(train_client(model, start, recipe, data, client, rnd, settings, frozen))


def _train_task(
    shared: list[Any], payload: bytes, device: str, threads: int, deterministic: bool
) -> tuple[bytes, str]:
    """A Ray task: one client's local training in a worker process; returns the pickled
    :class:`~fedpart.engine.training.TrainResult` (CPU tensors) and the id of the node it ran
    on."""
    import ray

    if threads:
        torch.set_num_threads(threads)
    target = torch.device(device)
    if target.type == "cuda":
        configure_device(target, deterministic)  # the driver's switches, in this process
    model, data = _worker_copies(shared, target)
    return _train_job(model, data, payload, target), ray.get_runtime_context().get_node_id()


def ray_init_options(address: str | None, num_cpus: int | None = None) -> dict[str, Any]:
    """How fedpart starts or joins Ray (a run's backend, ``fedpart sweep --ray-address``):
    without the dashboard (no web server opened on the machine), workers' logs not forwarded."""
    kwargs: dict[str, Any] = {
        "include_dashboard": False,
        "log_to_driver": False,
        "configure_logging": False,
    }
    if address:
        kwargs["address"] = address
    elif num_cpus:
        kwargs["num_cpus"] = num_cpus
    return kwargs


class RayTrainer:
    """Submits clients' local training to Ray and gathers the results in client order."""

    def __init__(self, sim: Any) -> None:
        ray = _ray()
        engine = sim.cfg.engine
        options = task_options(engine)
        if not ray.is_initialized():
            kwargs = ray_init_options(engine.ray_address, engine.ray_workers)
            try:
                ray.init(**kwargs)
            except Exception as exc:  # noqa: BLE001 - Ray raises many kinds on a bad address
                where = engine.ray_address or "a local Ray"
                raise FedpartError(
                    f"engine.ray_address: cannot start or reach {where}: {exc}"
                ) from exc
        if "num_gpus" in options and not ray.cluster_resources().get("GPU", 0):
            message = (
                f"engine.device={engine.device}: the Ray cluster has no GPU, and every client "
                "task asks for engine.ray_gpus_per_client of one"
            )
            if not engine.ray_address:
                raise FedpartError(message)
            # a cluster may still add GPU nodes (an autoscaler); the tasks wait for them
            print(f"notice: {message}; the tasks wait for a GPU node", file=sys.stderr)
        self.ray = ray
        self.device = sim.device
        self.task_device = "cuda" if "num_gpus" in options else "cpu"
        self.threads = engine.threads or 1
        self.deterministic = bool(engine.deterministic)
        self.remote = ray.remote(**options)(_train_task)
        self.shared = [ray.put(_model_on_cpu(sim.model)), ray.put(data_on(sim.data, "cpu"))]
        #: client tasks run per Ray node id, over the run
        self.nodes: Counter[str] = Counter()

    def train(self, jobs: list[Job], rnd: int) -> dict[int, TrainResult]:
        """``jobs``: (client, start state, recipe, settings, frozen blocks) per client."""
        refs = [
            self.remote.remote(
                self.shared,
                _dumps((client, rnd, start, recipe, settings, frozen)),
                self.task_device,
                self.threads,
                self.deterministic,
            )
            for client, start, recipe, settings, frozen in jobs
        ]
        out: dict[int, TrainResult] = {}
        for job, (blob, node) in zip(jobs, self.ray.get(refs), strict=True):
            out[job[0]] = _loads(blob, self.device)
            self.nodes[node] += 1
        return out
