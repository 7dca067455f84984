"""Batched training as a few captured programs kept across rounds (``engine.cuda_graphs``).

The eager batched backend (:func:`fedpart.engine.batched._train_group`) runs a step on the
prefix of clients still training, with the batch lengths of that step: nearly every step of a
round has its own shapes. Captured, that would be one CUDA graph per step. This module trains a
group so that a round's steps fall on a handful of shapes, and keeps the graphs for the next
rounds:

* **Rows by buckets.** A step runs ``rows(active)`` rows of the stacked tensors: the group's
  size, or the smallest power of two at least the number of clients still training. Rows past
  the active clients compute on whatever their inputs hold, with zero sample weights; their
  states are not used (below).
* **One batch length.** Every batch is padded to ``federation.batch_size`` with zero sample
  weights and the loss is the weighted mean cross-entropy (:func:`~fedpart.engine.batched_step.
  make_step` with ``weighted``): the mean over a client's real samples, as the sequential
  loss, summed in another order (float rounding).
* **Finished clients restored.** When clients stop training (their last step of a phase), their
  rows are copied aside; at the end of the phase they are copied back over whatever the later
  steps did to them (weight decay and momentum move a row even with a zero gradient).
* **Buffers that outlive the round.** The stacked parameters, momentum buffers, per-client
  learning-rate factors, recipe tensors and each bucket's input buffers belong to a
  :class:`Program` cached per model and per (recipe skeleton, keys, group size, optimiser
  settings); each round copies its clients' start states and recipe tensors in. Its
  :class:`~fedpart.engine.step_graphs.StepGraphs` then replay the graphs captured in earlier
  rounds: after the first round a round captures nothing (``Program.graphs.captured``).

The numbers equal the sequential reference up to float rounding, as the eager batched backend's
do (another summation order: padded weighted losses, bucketed grouped convolutions), not bit
for bit the eager batched backend's; the same inputs give the same numbers run after run, so
resume is exact. Only the default task loss (``recipe.criterion`` cross-entropy, no
``objective``, no observer) trains this way; other recipes train eagerly.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

import torch
from torch import Tensor

from fedpart.engine.batch_plan import BatchPlan
from fedpart.engine.batched_step import make_step, sgd_update
from fedpart.engine.data import FederatedData
from fedpart.engine.recipe import Recipe, cross_entropy, skeleton
from fedpart.engine.step_graphs import StepGraphs
from fedpart.engine.training import TrainSettings
from fedpart.models import BlockModel

__all__ = ["Program", "capturable", "rows_for"]

State = dict[str, Tensor]

#: programs kept (least recently used dropped first; a program holds its model, so the model's
#: ``id`` in the key cannot be reused while it is kept). A program holds about three times its
#: group's stacked state between rounds (parameters, rows set aside, momentum buffers) besides its
#: graphs' memory. Rounds whose learning rate decays make one program per round.
KEEP = 4
_PROGRAMS: OrderedDict[Hashable, Program] = OrderedDict()


def capturable(recipe: Recipe) -> bool:
    """Whether ``recipe`` trains through a :class:`Program`: the default task loss only."""
    return recipe.objective is None and recipe.criterion is cross_entropy and recipe.observe is None


def rows_for(active: int, size: int) -> int:
    """The rows a step of ``active`` clients runs in a group of ``size``: ``size``, or the
    smallest power of two at least ``active`` when that is smaller."""
    rows = 1 << max(active - 1, 0).bit_length()
    return min(rows, size)


class Program:
    """The persistent buffers and captured steps of one group shape (see the module's text)."""

    def __init__(
        self,
        model: BlockModel,
        recipe: Recipe,
        key_order: list[str],
        starts: State,
        size: int,
        batch_size: int,
        slots: tuple[Tensor, ...],
        slot_dims: tuple[int | None, ...],
        scaled: bool,
    ) -> None:
        device = next(iter(starts.values())).device
        self.model, self.recipe, self.key_order = model, recipe, key_order
        #: per-client learning-rate factors (push-sum's 1/μ_i) in the update
        self.scaled = scaled
        self.size, self.batch_size, self.slot_dims = size, batch_size, slot_dims
        self.stacked = {
            k: torch.zeros((size, *v.shape), dtype=v.dtype, device=device)
            for k, v in starts.items()
        }
        self.aside = {k: torch.empty_like(v) for k, v in self.stacked.items()}
        self.momentum: dict[int, list[Tensor]] = {}  # per phase
        self.scale = torch.ones(size, device=device)
        self.slots = tuple(
            s.clone()
            if d is None
            else torch.zeros((size, *s.shape[1:]), dtype=s.dtype, device=device)
            for s, d in zip(slots, slot_dims, strict=True)
        )
        self.inputs: dict[int, tuple[Tensor, Tensor, Tensor]] = {}  # rows -> x, y, w
        #: (phase, rows, keys) -> the row views and buffers of :meth:`phase_state`
        self.views: dict[tuple, tuple[State, State, list[Tensor], tuple[Tensor, ...]]] = {}
        self.graphs = StepGraphs(device)
        self.steps = {
            p: make_step(model, recipe, p, key_order, True, slot_dims)
            for p in range(len(recipe.phases))
        }

    # ---------------------------------------------------------------------------- a round
    def load(self, starts: list[State], slots: tuple[Tensor, ...]) -> None:
        """This round's start states and recipe tensors."""
        n = len(starts)
        with torch.no_grad():
            for k, v in self.stacked.items():
                v[:n].copy_(torch.stack([s[k] for s in starts]))
            for mine, theirs, d in zip(self.slots, slots, self.slot_dims, strict=True):
                (mine if d is None else mine[:n]).copy_(theirs)

    def batch_inputs(self, rows: int, x_like: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        if rows not in self.inputs:
            b, dev = self.batch_size, x_like.device
            self.inputs[rows] = (
                torch.zeros((rows, b, *x_like.shape[1:]), dtype=x_like.dtype, device=dev),
                torch.zeros((rows, b), dtype=torch.long, device=dev),
                torch.zeros((rows, b), device=dev),
            )
        return self.inputs[rows]

    def phase_state(
        self, phase_no: int, keys: list[str], rows: int
    ) -> tuple[State, State, list[Tensor], tuple[Tensor, ...]]:
        """Row views ``[:rows]`` of the trained and other tensors, the phase's momentum buffers
        and the recipe tensors."""
        key = (phase_no, rows, tuple(keys))
        if key not in self.views:  # made once: the buffers keep their addresses
            trained = set(keys)
            train = {k: self.stacked[k][:rows] for k in keys}
            other = {k: v[:rows] for k, v in self.stacked.items() if k not in trained}
            if phase_no not in self.momentum:
                self.momentum[phase_no] = [torch.zeros_like(self.stacked[k]) for k in keys]
            live = tuple(
                s if d is None else s[:rows]
                for s, d in zip(self.slots, self.slot_dims, strict=True)
            )
            self.views[key] = (train, other, self.momentum[phase_no], live)
        return self.views[key]


def program_for(
    model: BlockModel,
    recipe: Recipe,
    starts: list[State],
    settings: TrainSettings,
    frozen: set[str],
    scaled: bool,
    slots: tuple[Tensor, ...],
    slot_dims: tuple[int | None, ...],
) -> Program:
    """The cached :class:`Program` of this group shape (made on first use): the same model,
    recipe skeleton, state keys and shapes, group size, optimiser settings (the learning rate
    is part of a captured step), frozen blocks and recipe-tensor shapes."""
    key_order = list(starts[0])
    size = len(starts)
    device = next(iter(starts[0].values())).device
    shapes = tuple((k, tuple(v.shape), str(v.dtype)) for k, v in starts[0].items())
    slot_shapes = tuple((tuple(s.shape), d) for s, d in zip(slots, slot_dims, strict=True))
    key: Any = (
        id(model),
        skeleton(recipe),
        shapes,
        size,
        settings.batch_size,
        settings.lr,
        settings.weight_decay,
        settings.momentum,
        tuple(sorted(frozen)),
        scaled,
        slot_shapes,
        str(device),
    )
    cache = _PROGRAMS
    if key in cache:
        cache.move_to_end(key)
        return cache[key]
    program = Program(
        model, recipe, key_order, starts[0], size, settings.batch_size, slots, slot_dims, scaled
    )
    cache[key] = program
    while len(cache) > KEEP:
        cache.popitem(last=False)
    return program


def train_phase(
    program: Program,
    data: FederatedData,
    clients: list[int],
    rnd: int,
    phase_no: int,
    keys: list[str],
    epochs: int,
    totals: list[int],
    lr: float,
    settings: TrainSettings,
    step_losses: list[tuple[Tensor, list[int]]],
) -> None:
    """One phase of the group's clients (sorted by steps, longest first) through ``program``."""
    n = len(clients)
    bs, wd, momentum = settings.batch_size, settings.weight_decay, settings.momentum
    step = program.steps[phase_no]
    plan = BatchPlan(data, clients, rnd, phase_no, epochs, settings)
    active = n
    for t in range(totals[0]):
        was = active
        while totals[active - 1] <= t:
            active -= 1
        if active < was:  # clients active..was-1 have finished the phase: their rows aside
            for k, v in program.stacked.items():
                program.aside[k][active:was].copy_(v[active:was])
        batch = plan.gather(t, active, program.scale.device, width=bs)
        lengths = batch.lengths
        rows = rows_for(active, program.size)
        x, y, w = program.batch_inputs(rows, batch.x[0])
        with torch.no_grad():  # every row batch_size wide: padding weighs 0, rows past active too
            w.zero_()
            x[:active].copy_(batch.x)
            y[:active].copy_(batch.y)
            if batch.w is None:
                w[:active] = 1.0
            else:
                w[:active].copy_(batch.w)
        train, other, bufs, live = program.phase_state(phase_no, keys, rows)
        scale = program.scale[:rows] if program.scaled else None

        def body(
            train=train, other=other, bufs=bufs, live=live, scale=scale, x=x, y=y, w=w, first=t == 0
        ) -> Tensor:
            grads, losses = step(train, other, x, y, live, (), w)
            sgd_update(
                [train[k] for k in keys],
                [grads[k] for k in keys],
                bufs,
                0 if first else 1,
                lr,
                wd,
                momentum,
                scale,
            )
            return losses

        def warm(train=train, other=other, live=live, x=x, y=y, w=w) -> Tensor:
            return step(train, other, x, y, live, (), w)[1]

        losses = program.graphs.run((phase_no, rows, t == 0), body, warm)  # type: ignore[arg-type]
        step_losses.append((losses[:active], lengths))
    finished = next((i for i in range(n) if totals[i] < totals[0]), n)
    if finished < n:  # back to the states they finished with
        with torch.no_grad():
            for k, v in program.stacked.items():
                v[finished:n].copy_(program.aside[k][finished:n])
