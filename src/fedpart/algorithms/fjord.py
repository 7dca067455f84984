"""Fjord (Horváth et al., NeurIPS 2021): ordered dropout with self-distillation across widths."""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch.func import functional_call

from fedpart.algorithms.widthsliced import WidthSliced
from fedpart.config import fraction, option
from fedpart.engine.recipe import Recipe
from fedpart.models.width import index_sets_on, model_index_sets, slice_state
from fedpart.registry import register
from fedpart.seeding import torch_generator

#: the ``algorithm`` seed stream's sub-key of Fjord's width draws
_WIDTH_DRAWS = 1


@dataclasses.dataclass
class FjordOptions:
    distill: bool = option(
        True, "distil the client's widest submodel into the sampled one (Fjord's KD)"
    )
    alpha: float = fraction(0.5, "weight of the distillation term against the task loss, in [0, 1]")
    temperature: float = option(1.0, "softmax temperature of the distillation term (> 0)", gt=0)
    train_teacher: bool = option(
        True,
        "with distillation, the widest submodel also takes its CE step at every local "
        "step (in-place distillation); false: only when its width is drawn",
    )


def allowed_widths(p_max: float, p_min: float) -> list[float]:
    """Fjord's width set ``D_p`` of a client of width ``p_max``: the multiples of the
    federation's ``p_min`` up to ``p_max`` (the capacity grid's widths)."""
    count = max(1, math.floor(p_max / p_min + 1e-9))
    return [min(p_max, k * p_min) for k in range(1, count + 1)]


def distillation(student: torch.Tensor, teacher: torch.Tensor, temperature: float) -> torch.Tensor:
    """``T² · KL(softmax(teacher/T) ‖ softmax(student/T))`` averaged over the batch; the
    teacher's logits carry no gradient."""
    t = temperature
    target = F.log_softmax(teacher.detach() / t, dim=1)
    kl = F.kl_div(F.log_softmax(student / t, dim=1), target, reduction="batchmean", log_target=True)
    return kl * t * t


def ordered_dropout_loss(
    algo: Fjord,
    p_max: float,
    widths: list[float],
    draws: torch.Generator,
    model: Any,
    state: Any,
    x: torch.Tensor,
    y: torch.Tensor,
) -> torch.Tensor:
    """One local step of Fjord: draw ``p ~ U(D_p)``, run the prefix submodel of width ``p``
    (a slice of the client's width-``p_max`` state, so gradients reach exactly those
    coordinates) and return its loss. With distillation and ``p < p_max`` the loss is
    ``(1 − α)·CE(f_p(x), y) + α·T²·KL(f_{p_max}(x) ‖ f_p(x))``, the widest submodel being the
    teacher (one extra forward pass, no gradient); at ``p = p_max`` it is ``CE(f_{p_max}(x), y)``,
    where the distillation term vanishes."""
    p = widths[int(torch.randint(len(widths), (1,), generator=draws))]
    algo.sampled.append(p)
    opts = algo.options
    if p >= p_max:
        return F.cross_entropy(functional_call(model, state, (x,)), y)
    sub = slice_state(state, algo.prefix(p))
    logits = functional_call(algo.model_at(p), sub, (x,))
    loss = F.cross_entropy(logits, y)
    if not opts.distill or opts.alpha == 0.0:
        return loss
    if opts.train_teacher:
        # in-place distillation: the widest submodel learns from the labels at every step and
        # teaches the sampled one in the same step (its logits detached in the KL term)
        teacher = functional_call(model, state, (x,))
        kd = distillation(logits, teacher, opts.temperature)
        return F.cross_entropy(teacher, y) + (1.0 - opts.alpha) * loss + opts.alpha * kd
    with torch.no_grad():
        teacher = functional_call(model, state, (x,))
    kd = distillation(logits, teacher, opts.temperature)
    return (1.0 - opts.alpha) * loss + opts.alpha * kd


@register
class Fjord(WidthSliced):
    """Ordered dropout: a client of width ``p_i`` holds the prefix submodel of that width (as
    HeteroFL, without the Scaler) and, at every local step, trains the prefix submodel of a width
    ``p`` drawn uniformly from ``D_p = {p_min, 2·p_min, …, p_i}``, distilling its widest submodel
    into it. The server averages every coordinate over the clients that hold it.
    ``docs/methods/fjord.md``."""

    name = "fjord"
    summary = "Ordered dropout: a random prefix width per step, self-distillation, holder-averaged."
    Options = FjordOptions
    selection = "prefix"
    #: a per-step width draw is the method's own objective: the sequential trainer runs it
    backends = ("sequential",)

    def setup(self) -> None:
        super().setup()
        self._prefix: dict[float, Any] = {}
        #: the widths drawn for the last client trained, in order (tests and diagnostics)
        self.sampled: list[float] = []

    def prefix(self, p: float) -> Any:
        """Index sets of the width-``p`` prefix (valid inside any wider prefix model)."""
        if p not in self._prefix:
            self._prefix[p] = index_sets_on(model_index_sets(self.ctx.model, p), self.ctx.device)
        return self._prefix[p]

    def recipe(self, rnd: int, client: int) -> Recipe:
        p_max = self.width(client)
        # the capacity grid's step (federation.p_min), not the smallest client's width: under
        # Ideal every client still drops out over the whole grid, as Fjord does
        widths = allowed_widths(p_max, self.ctx.cfg.federation.p_min)
        self.sampled = []
        # one generator per (round, client): the draws replay identically on resume
        draws = torch_generator(self.ctx.cfg.seed, "algorithm", _WIDTH_DRAWS, rnd, client)
        return Recipe(objective=functools.partial(ordered_dropout_loss, self, p_max, widths, draws))
