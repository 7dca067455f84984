"""A batched step captured once as a CUDA graph and replayed (``engine.cuda_graphs``).

A step of the batched backend (:mod:`fedpart.engine.batched`) launches a few hundred kernels
from Python — the ``vmap(grad)`` of the clients' losses and the fused SGD update — each for a
few microseconds of arithmetic on small models: on a GPU the round is bound by the launches, not
the arithmetic. :class:`StepGraphs` records each distinct step of a group once into a
``torch.cuda.CUDAGraph`` and then replays it, one launch per step.

The caller (:mod:`fedpart.engine.captured`) keys each step by what makes its kernels differ
(the phase, the rows it runs, whether it is the phase's first step) and keeps everything a step
touches at fixed addresses: the stacked parameters, momentum buffers, recipe tensors and each
key's input buffers, into which every step's batch is copied before the replay. A replay runs
the kernels the step ran when captured, on those buffers: ``benchmarks/captured_step.py``
shows a replayed step equal to the eager one bit for bit on a GPU.

Each key is captured the first time it is met: a warm-up pass of the gradient alone (nothing is
updated) on a side stream, as PyTorch asks before a capture, then the capture (which runs
nothing), then the replay. Each graph has its own memory pool (keys interleave, and graphs that
share a pool must replay in their capture order). A key whose capture fails runs eagerly from
then on, with one warning.

On the CPU there is no graph: :meth:`StepGraphs.run` then calls the step each time, so the
same buffer logic runs (what the tests check), no faster than the eager step.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Hashable

import torch
from torch import Tensor

__all__ = ["StepGraphs"]

#: ``body() -> losses``: one step (gradient and update) on inputs already in place
Body = Callable[[], Tensor]


class StepGraphs:
    """Captured steps by key; :meth:`run` runs one step through them."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.real = device.type == "cuda"
        #: key -> (graph, its output); None: the key's capture failed, it runs eagerly
        self.steps: dict[Hashable, tuple[torch.cuda.CUDAGraph | None, Tensor | None] | None] = {}
        #: how many keys were captured, and how many steps ran through :meth:`run`
        self.captured = 0
        self.replayed = 0

    def run(self, key: Hashable, body: Body, warm: Body) -> Tensor:
        """Run the step ``key`` (``body``, whose inputs are in their static buffers); return
        its losses as a tensor of their own. ``warm()`` computes what ``body`` computes without
        changing any state (the gradient alone): the warm-up before a capture."""
        if key not in self.steps:
            self.steps[key] = self._capture(body, warm)
        entry = self.steps[key]
        self.replayed += 1
        if entry is None or entry[0] is None:  # eager: no GPU, or its capture failed
            return body()
        graph, out = entry
        graph.replay()
        assert out is not None
        return out.clone()

    def _capture(
        self, body: Body, warm: Body
    ) -> tuple[torch.cuda.CUDAGraph | None, Tensor | None] | None:
        if not self.real:
            return (None, None)
        try:
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                warm()
            torch.cuda.current_stream(self.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = body()
        except RuntimeError as exc:
            warnings.warn(
                f"engine.cuda_graphs: a step could not be captured, it runs eagerly "
                f"({str(exc).splitlines()[0]})",
                RuntimeWarning,
                stacklevel=3,
            )
            return None
        self.captured += 1
        return graph, out
