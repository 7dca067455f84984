"""The process backend: a round's clients trained in worker processes on this machine.

``engine.backend=processes`` spreads every client whose local update is the engine's default
(train the method's recipe from its start state) over ``engine.workers`` worker processes (0:
one per CPU core), each running the sequential reference
:func:`~fedpart.engine.training.train_client` with ``engine.threads`` intra-op threads (default
1). Each client's randomness is keyed by (seed, round, client), so the numbers are the
sequential backend's at the same thread count, bit for bit (tests).

The model and the data pool are handed to the workers once, when the pool starts: their
tensors are moved to shared memory first, so every worker maps the same pages instead of
holding a copy. Per round, each task carries its client's recipe and optimiser settings
(serialised with ``cloudpickle``, since recipes may hold closures) and its slot in the driver's
shared file (:mod:`fedpart.engine.arena`), through which the start state goes to the worker and
the trained state comes back; where the file cannot be made, the states travel in the tasks,
each tensor as its raw bytes (a little faster than torch's own pickling of a tensor,
``benchmarks/process_round.py``; sending each
tensor through torch's shared memory costs a file descriptor, and a thousand clients ran out of
them). Methods with their own local update
run in the driver, as on the Ray backend; aggregation and mixing stay there too. Evaluation's
body passes — most of its arithmetic — are spread over the same workers, batch for batch as
the driver would compute them (``evaluation.evaluate_clients``' ``feature_map``).

Worker processes are started with ``spawn`` (forking a process whose torch thread pools are
already running is unsafe), which costs a second or two per run; the pool lives as long as the
simulation.
"""

from __future__ import annotations

import dataclasses
import io
import os
import pickle
from collections.abc import Iterator
from typing import Any

import cloudpickle
import torch
import torch.multiprocessing as mp

from fedpart.engine import arena
from fedpart.engine.evaluation import body_features
from fedpart.engine.store import compact_state
from fedpart.engine.training import TrainResult, TrainSettings, train_client

#: one training job: (client, start state, recipe, settings, frozen blocks)
Job = tuple[int, dict[str, torch.Tensor], Any, TrainSettings, set[str]]

_WORKER: dict[str, Any] = {}


def _share(obj: Any) -> None:
    """Move every tensor reachable from the data pool to shared memory (in place)."""
    for value in vars(obj).values():
        if isinstance(value, torch.Tensor):
            value.share_memory_()
        elif hasattr(value, "__dataclass_fields__"):
            _share(value)
        elif isinstance(value, list):
            for item in value:
                if hasattr(item, "__dataclass_fields__"):
                    _share(item)


#: dtypes sent as their raw bytes (numpy has them); others go through torch's own pickling
_RAW = {
    torch.float32,
    torch.float64,
    torch.float16,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
}


def _raw_tensor(buf: bytearray, dtype: str, shape: tuple[int, ...]) -> torch.Tensor:
    """A tensor rebuilt from its bytes (the buffer becomes its storage: no copy)."""
    kind = getattr(torch, dtype.removeprefix("torch."))
    if not buf:
        return torch.empty(shape, dtype=kind)
    return torch.frombuffer(buf, dtype=kind).reshape(shape)


def _reduce_tensor(obj: Any) -> Any:
    """How a CPU tensor travels: its raw bytes, a dtype and a shape (protocol 5 sends the bytes
    as one ``bytearray``: a copy of the data and nothing else; ``benchmarks/process_round.py``
    times it against torch's own pickling). Anything else: ``NotImplemented`` (the default)."""
    if (
        type(obj) is torch.Tensor
        and obj.device.type == "cpu"
        and obj.layout is torch.strided
        and not obj.requires_grad
        and obj.dtype in _RAW
    ):
        data = obj.detach().contiguous().numpy()
        return _raw_tensor, (pickle.PickleBuffer(data), str(obj.dtype), tuple(obj.shape))
    return NotImplemented


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        return _reduce_tensor(obj)


class _CloudPickler(cloudpickle.CloudPickler):
    def reducer_override(self, obj: Any) -> Any:
        reduced = _reduce_tensor(obj)
        return super().reducer_override(obj) if reduced is NotImplemented else reduced


def _dumps(obj: Any, pickler: type[pickle.Pickler] = _Pickler) -> bytes:
    out = io.BytesIO()
    pickler(out, protocol=5).dump(obj)
    return out.getvalue()


def _init_worker(model: Any, data: Any, threads: int) -> None:
    torch.set_num_threads(threads)
    _WORKER["model"] = model
    _WORKER["data"] = data


def _mapped(path: str, size: int) -> torch.Tensor:
    """The driver's arena file, mapped once per file by this worker."""
    if _WORKER.get("arena_path") != path:
        _WORKER["arena"] = arena.attach(path, size)
        _WORKER["arena_path"] = path
    return _WORKER["arena"]


def _run(payload: bytes) -> bytes:
    """One job: its start state from its arena slot (or the payload), trained; the trained state
    back into the slot when it has the start's layout (else in the reply)."""
    client, start, recipe, settings, frozen, rnd, slot = cloudpickle.loads(payload)
    mem = None
    if slot is not None:
        path, size, base, entries = slot
        mem = _mapped(path, size)
        start = arena.read(mem, base, entries)
    result = train_client(
        _WORKER["model"], start, recipe, _WORKER["data"], client, rnd, settings, frozen
    )
    if mem is not None and arena.layout(result.state)[0] == entries:
        arena.write(mem, base, entries, result.state)
        return _by_value((dataclasses.replace(result, state={}), True))
    return _by_value((result, False))


def _features(payload: bytes) -> bytes:
    body, batches = pickle.loads(payload)
    return _by_value(body_features(_WORKER["model"], body, batches, _WORKER["data"]))


def _by_value(obj: Any) -> bytes:
    """``obj`` serialised with its tensors' bytes inline. Returning tensors themselves would send
    each through torch's shared-memory reduction, one file descriptor per tensor: a round of
    1,000 clients ran out of descriptors and the pool's result thread died, hanging the run."""
    return _dumps(obj)


def default_workers() -> int:
    """Worker processes for ``engine.workers=0``: the CPU cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def worker_count(engine: Any) -> int:
    """The process backend's worker count for an ``engine`` config (``workers``; 0: one per
    core)."""
    return engine.workers or default_workers()


class ProcessTrainer:
    """A pool of worker processes training clients; results in client order."""

    def __init__(self, sim: Any) -> None:
        engine = sim.cfg.engine
        self.workers = worker_count(engine)
        self.sizes = [c.num_train for c in sim.data.clients]
        model = sim.model
        for tensor in [*model.parameters(), *model.buffers()]:
            tensor.share_memory_()
        _share(sim.data)
        context = mp.get_context("spawn")
        self.pool = context.Pool(
            self.workers, initializer=_init_worker, initargs=(model, sim.data, engine.threads or 1)
        )
        #: the shared file the states travel through (:mod:`fedpart.engine.arena`)
        self.arena = arena.Arena()

    def train(self, jobs: list[Job], rnd: int) -> dict[int, TrainResult]:
        """Train ``jobs`` (one per client) in the workers; the longest clients are handed out
        first so that the last worker to finish waits as little as possible."""
        order = sorted(range(len(jobs)), key=lambda i: -self.sizes[jobs[i][0]])
        layouts = [arena.layout(jobs[i][1]) for i in order]
        slot_bytes = max((size for _, size in layouts), default=0)
        shared = self.arena.ensure(slot_bytes * len(order))
        slots: list[tuple[str, int, int, arena.Layout] | None] = [
            (self.arena.path, self.arena.size, pos * slot_bytes, entries) if shared else None
            for pos, (entries, _) in enumerate(layouts)
        ]

        def payloads() -> Iterator[bytes]:
            # made lazily, by the pool's task feeder, while the workers train the first jobs
            for pos, i in enumerate(order):
                client, start, *rest = jobs[i]
                slot = slots[pos]
                if slot is not None:
                    assert self.arena.mem is not None
                    arena.write(self.arena.mem, slot[2], slot[3], start)
                yield _dumps((client, None if slot else start, *rest, rnd, slot), _CloudPickler)

        results = []
        for pos, reply in enumerate(self.pool.imap(_run, payloads(), chunksize=1)):
            result, in_slot = pickle.loads(reply)
            if in_slot:  # copied out before the next round reuses the slot
                slot = slots[pos]
                assert slot is not None and self.arena.mem is not None
                state = arena.read(self.arena.mem, slot[2], slot[3])
                result = dataclasses.replace(result, state={k: v.clone() for k, v in state.items()})
            results.append(result)
        by_position = dict(zip(order, results, strict=True))
        return {jobs[i][0]: by_position[i] for i in range(len(jobs))}

    def features(
        self, work: list[tuple[dict[str, torch.Tensor], list[torch.Tensor]]]
    ) -> list[list[torch.Tensor]]:
        """Evaluation's body passes (``evaluation.FeatureMap``) spread over the workers: the same
        batches as in the driver, so the same numbers. A body shared by many clients (FedPer's)
        has its batches cut into one contiguous run per worker."""
        tasks: list[tuple[int, tuple[dict[str, torch.Tensor], list[torch.Tensor]]]] = []
        split = len(work) < self.workers
        for entry, (body, batches) in enumerate(work):
            body = compact_state(body)
            runs = self.workers if split else 1
            step = max(1, -(-len(batches) // runs))
            for start in range(0, max(len(batches), 1), step):
                tasks.append((entry, (body, batches[start : start + step])))
        out: list[list[torch.Tensor]] = [[] for _ in work]
        # by value both ways, as training's jobs: no file descriptor per tensor
        payloads = [_by_value(t) for _, t in tasks]
        results = [pickle.loads(r) for r in self.pool.map(_features, payloads)]
        for (entry, _), feats in zip(tasks, results, strict=True):
            out[entry].extend(feats)
        return out

    def close(self) -> None:
        self.pool.close()
        self.pool.join()
        self.arena.close()
