"""A batched step captured once as a CUDA graph and replayed (``engine.cuda_graphs``).

A step of the batched backend (:mod:`fedpart.engine.batched`) launches a few hundred kernels
from Python — the ``vmap(grad)`` of the clients' losses and the fused SGD update — each for a
few microseconds of arithmetic on small models: on a GPU the round is bound by the launches, not
the arithmetic. :class:`StepGraphs` records each distinct step of a group once into a
``torch.cuda.CUDAGraph`` and then replays it, one launch per step.

What makes a step distinct is its *key*: the phase, the number of clients still training (a
prefix of the stacked tensors), the batch length and whether it is the phase's first step (the
momentum buffers are allocated then). Everything else a step touches has the same address on
every step of the group: the stacked parameters and their prefix views, the momentum buffers,
the recipe's tensors, and the two static input buffers each key owns, into which every step's
gathered batch is copied before the replay. A replay runs exactly the kernels the eager step
runs, in the same order and on the same data, so the numbers are the eager batched backend's,
bit for bit (``benchmarks/captured_step.py`` checks that on a GPU; the tests check the buffer
logic on the CPU, below).

Each key is captured the first time it is met: a warm-up pass of the gradient alone (nothing is
updated) on a side stream, as PyTorch asks before a capture, then the capture (which runs
nothing), then the replay. Graphs live for one group of one round; each has its own memory pool
(keys interleave — a short last batch falls between full ones — and graphs that share a pool
must replay in their capture order). A key whose capture fails runs eagerly from then on, with
one warning.

On the CPU there is no graph: :class:`StepGraphs` then calls the step on the static buffers each
time, which runs the same buffer logic (used by the tests; no faster than the eager step).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Hashable

import torch
from torch import Tensor

__all__ = ["StepGraphs"]

#: ``body(x, y) -> losses``: one step on the batches ``x``, ``y`` (gradient and update)
Body = Callable[[Tensor, Tensor], Tensor]


class _Captured:
    """One key's static inputs, its graph (None on the CPU) and its output."""

    def __init__(self, x: Tensor, y: Tensor) -> None:
        self.x = torch.empty_like(x)
        self.y = torch.empty_like(y)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.out: Tensor | None = None


class StepGraphs:
    """The captured steps of one group; :meth:`step` runs one step through them."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.real = device.type == "cuda"
        self.steps: dict[Hashable, _Captured | None] = {}
        #: how many keys were captured, and how many steps replayed (the report's counters)
        self.captured = 0
        self.replayed = 0

    def step(self, key: Hashable, x: Tensor, y: Tensor, body: Body, warm: Body) -> Tensor:
        """Run ``body`` on ``x``, ``y`` as the step ``key``; return its losses (a tensor of its
        own). ``warm(x, y)`` computes what ``body`` computes without changing any state (the
        gradient alone): the warm-up before a capture."""
        if key not in self.steps:
            self.steps[key] = self._capture(x, y, body, warm)
        entry = self.steps[key]
        if entry is None:  # its capture failed: eager
            return body(x, y)
        entry.x.copy_(x)
        entry.y.copy_(y)
        self.replayed += 1
        if entry.graph is None:
            return body(entry.x, entry.y)
        entry.graph.replay()
        assert entry.out is not None
        return entry.out.clone()

    def _capture(self, x: Tensor, y: Tensor, body: Body, warm: Body) -> _Captured | None:
        entry = _Captured(x, y)
        if not self.real:
            return entry
        entry.x.copy_(x)
        entry.y.copy_(y)
        try:
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                warm(entry.x, entry.y)
            torch.cuda.current_stream(self.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                entry.out = body(entry.x, entry.y)
        except RuntimeError as exc:
            warnings.warn(
                f"engine.cuda_graphs: a step could not be captured, it runs eagerly "
                f"({str(exc).splitlines()[0]})",
                RuntimeWarning,
                stacklevel=3,
            )
            return None
        entry.graph = graph
        self.captured += 1
        return entry
