"""Client states between the driver and its worker processes through one shared file.

The process backend (:mod:`fedpart.engine.parallel`) sends every job a start state and gets a
trained state back. Through the pool's pipes each is pickled, copied into the pipe in 64-KB
pieces, read back and unpickled: with pfl-research's CNN (6.5-MB states) a job held a worker
148 ms for 100 ms of training (docs/results/performance.md). An :class:`Arena` is one file
in shared memory (``/dev/shm`` where it exists) that the driver and every worker map: job ``i``
of a round gets slot ``i``; the driver copies the job's start state into the slot, the worker
trains from views of it and writes the trained state back into the same slot, and the driver
copies it out. Only the layout — each tensor's key, dtype, shape and byte offset — travels in
the task. The values are copied bit for bit, so the numbers do not change.

The file is created with its full size reserved (``posix_fallocate``: a full ``/dev/shm`` is an
error at once, never a crash when a page is touched), grows when a round needs more slots, and
is removed when the pool closes or, at the latest, when the driver's interpreter exits (a driver
killed with SIGKILL leaves it behind, ``/dev/shm/fedpart-PID-*``, until the next driver on this
machine removes the files of drivers that are gone). Where it cannot be made, the
states travel through the pipes as before.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import tempfile
import uuid
import weakref
from collections.abc import Mapping

import torch
from torch import Tensor

__all__ = ["ALIGN", "Arena", "Layout", "layout", "read", "write"]

#: every tensor starts at a multiple of this many bytes (vector loads stay aligned)
ALIGN = 64
#: (key, dtype, shape, byte offset in the slot) per tensor
Layout = list[tuple[str, str, tuple[int, ...], int]]

_names = itertools.count()


def layout(state: Mapping[str, Tensor]) -> tuple[Layout, int]:
    """The slot layout of ``state`` and its size in bytes."""
    entries: Layout = []
    offset = 0
    for key, value in state.items():
        entries.append((key, str(value.dtype), tuple(value.shape), offset))
        offset += -(-value.numel() * value.element_size() // ALIGN) * ALIGN
    return entries, offset


def _view(mem: Tensor, offset: int, dtype: str, shape: tuple[int, ...]) -> Tensor:
    kind = getattr(torch, dtype.removeprefix("torch."))
    count = 1
    for n in shape:
        count *= n
    size = count * torch.empty((), dtype=kind).element_size()
    return mem[offset : offset + size].view(kind).view(shape)


def read(mem: Tensor, base: int, entries: Layout) -> dict[str, Tensor]:
    """Views of the state in the slot at ``base`` (no copy)."""
    return {k: _view(mem, base + off, dt, shape) for k, dt, shape, off in entries}


def write(mem: Tensor, base: int, entries: Layout, state: Mapping[str, Tensor]) -> None:
    """Copy ``state`` into the slot at ``base``; a tensor that already is its slot's view (a
    trained state that kept a start tensor) is left as it is."""
    with torch.no_grad():
        for key, dt, shape, off in entries:
            target = _view(mem, base + off, dt, shape)
            value = state[key]
            if value.numel() and value.data_ptr() == target.data_ptr():
                continue
            target.copy_(value)


def attach(path: str, size: int) -> Tensor:
    """The arena file ``path`` mapped (shared: writes are seen by every process mapping it)."""
    return torch.from_file(path, shared=True, size=size, dtype=torch.uint8)


class Arena:
    """The driver's side: the shared file, grown to the slots a round needs."""

    def __init__(self) -> None:
        folder = (
            "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        )
        self.folder = folder or tempfile.gettempdir()
        self.path: str | None = None
        self.size = 0
        self.mem: Tensor | None = None
        remove_orphans(self.folder)

    def ensure(self, size: int) -> bool:
        """Make the file at least ``size`` bytes; False (and no file) where it cannot be made."""
        if self.mem is not None and size <= self.size:
            return True
        self.close()
        name = f"fedpart-{os.getpid()}-{next(_names)}-{uuid.uuid4().hex[:8]}"
        path = os.path.join(self.folder, name)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.posix_fallocate(fd, 0, max(size, 1))
            finally:
                os.close(fd)
            self.mem = attach(path, max(size, 1))
        except (OSError, RuntimeError):
            with contextlib.suppress(OSError):
                os.unlink(path)
            return False
        self.path, self.size = path, max(size, 1)
        # removed at the latest when this process exits (a run that never closes its pool)
        self._finalizer = weakref.finalize(self, _remove, path)
        return True

    def close(self) -> None:
        """Remove the file (workers that still map it keep their mapping until they move on)."""
        if self.path is not None:
            self._finalizer()
        self.path, self.size, self.mem = None, 0, None


def remove_orphans(folder: str) -> list[str]:
    """Remove the arena files in ``folder`` whose driver process is gone (a driver killed with
    SIGKILL cannot remove its own); returns their names."""
    gone = []
    with contextlib.suppress(OSError):
        for name in sorted(os.listdir(folder)):
            parts = name.split("-")
            if len(parts) != 4 or parts[0] != "fedpart" or not parts[1].isdigit():
                continue
            try:
                os.kill(int(parts[1]), 0)
            except ProcessLookupError:
                _remove(os.path.join(folder, name))
                gone.append(name)
            except OSError:  # alive, another user's
                continue
    return gone


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
