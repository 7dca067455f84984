"""Counter-based seeds: every random draw is keyed by (run seed, purpose, round, client).

Nothing depends on how many numbers were drawn before, so a resumed run and an uninterrupted
one, or the sequential and a batched backend, draw exactly the same partition, clients, batches
and augmentations.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch

PURPOSES = {
    "partition": 1,
    "split": 2,
    "sample_clients": 3,
    "batches": 4,
    "augment": 5,
    "init": 6,
    "algorithm": 7,
    "topology": 8,
    "capacity": 10,
    "client_failure": 9,
    "pool": 11,
    "model_draws": 12,
    "dropout": 13,
}


def seed_for(seed: int, purpose: str, *keys: int) -> int:
    """A 63-bit seed derived from the run seed, a purpose name and integer keys."""
    ss = np.random.SeedSequence(entropy=int(seed), spawn_key=(PURPOSES[purpose], *map(int, keys)))
    return int(ss.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))


def numpy_rng(seed: int, purpose: str, *keys: int) -> np.random.Generator:
    """A numpy generator for one (purpose, keys) stream."""
    return np.random.default_rng(seed_for(seed, purpose, *keys))


@contextmanager
def model_draws(seed: int, rnd: int, client: int, device: torch.device) -> Iterator[None]:
    """Inside: torch's global generators (the ones ``nn.Dropout`` and a model's own random ops
    draw from) seeded by (run seed, round, client); after: restored as they were. One client's
    local training runs inside, so its draws are the same whatever the backend, the order of the
    clients or where a run was resumed."""
    # a CUDA generator's state is kept and restored where CUDA is running (not under the tests'
    # stand-in device, which has no CUDA runtime)
    devices = [device] if device.type == "cuda" and torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed_for(seed, "model_draws", rnd, client))
        yield


_DRAWS = threading.local()


@contextmanager
def host_draws() -> Iterator[None]:
    """Marks the per-client draws from seeded host generators (each client's batch order, one
    permutation per client and epoch on every backend and device): the numbers depend on these
    streams, so they stay one per client; :class:`fedpart.bench.dispatch.DispatchCounter` counts
    the operators inside apart (``draws``) from the round's work on the device."""
    _DRAWS.depth = getattr(_DRAWS, "depth", 0) + 1
    try:
        yield
    finally:
        _DRAWS.depth -= 1


def in_host_draws() -> bool:
    """Whether this thread is inside :func:`host_draws`."""
    return getattr(_DRAWS, "depth", 0) > 0


def torch_generator(seed: int, purpose: str, *keys: int) -> torch.Generator:
    """A CPU torch generator for one (purpose, keys) stream."""
    g = torch.Generator()
    g.manual_seed(seed_for(seed, purpose, *keys))
    return g
