"""Local-training recipes: what a client trains, for how long, with what loss.

A recipe is data, not code, so that any backend (the sequential reference or a batched one) can
execute it: a list of phases, each naming the blocks it trains, its epochs and a learning-rate
factor, plus loss terms added to the task loss.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

#: ``criterion(logits, targets) -> mean loss``
Criterion = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
#: ``loss(model, state, x, y) -> mean loss``: a whole custom objective (e.g. two heads)
Objective = Callable[..., torch.Tensor]


@dataclass(frozen=True)
class LossTerm:
    """An extra loss term ``weight * fn(params)`` added at every step of the phases it is in.

    ``fn`` receives the dict of the model's current tensors (parameters and buffers, by
    state-dict key) and returns a scalar. It must be written with torch operations only so that
    it can run under ``torch.func`` transforms.
    """

    name: str
    fn: Callable[[Mapping[str, torch.Tensor]], torch.Tensor]
    weight: float = 1.0


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The default task loss."""
    return F.cross_entropy(logits, targets)


@dataclass(frozen=True)
class Phase:
    """One stretch of local training.

    ``blocks``: the blocks trained in this phase (``None``: every block that is not frozen).
    ``epochs``: passes over the client's training data (``None``: ``federation.local_epochs``).
    ``lr_scale``: factor on the round's learning rate.
    """

    blocks: tuple[str, ...] | None = None
    epochs: int | None = None
    lr_scale: float = 1.0
    loss_terms: tuple[LossTerm, ...] = ()
    name: str = "train"


@dataclass(frozen=True)
class Observer:
    """Reads the outputs of some blocks on every training batch, before the batch's step.

    ``fn(x, y, outputs)`` receives the prepared batch and ``{block: output}`` (detached) and
    returns a value; the values of all batches, in order, come back in
    ``TrainResult.observations``. The trainer registers forward hooks only while a recipe has
    an observer, so methods that do not observe pay nothing. ``fn`` should be a module-level
    function (or a ``functools.partial`` of one) so that a client can be trained in another
    process.
    """

    blocks: tuple[str, ...]
    fn: Callable[[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]], object]


@dataclass(frozen=True)
class Recipe:
    """The local training of one client in one round: phases run in order.

    Momentum buffers start at zero in every phase (one optimiser per phase, as FedRep's head and
    body optimisers are separate). ``objective``, when given, replaces ``criterion(model(x), y)``
    as the task loss: it receives ``(model, state, x, y)`` and may use several heads.
    ``observe`` reads block outputs of every batch (:class:`Observer`).
    """

    phases: tuple[Phase, ...] = (Phase(),)
    criterion: Criterion = field(default=cross_entropy)
    objective: Objective | None = None
    observe: Observer | None = None


def head_then_body(
    model: object,
    head_epochs: int | None,
    body_epochs: int | None = None,
    *,
    head_lr_scale: float = 1.0,
    body_lr_scale: float = 1.0,
) -> Recipe:
    """The alternating recipe of FedRep, DFedPGP and DFedAvgM-P: the head for ``head_epochs``
    epochs with the body fixed, then the body for ``body_epochs`` epochs (``None``:
    ``federation.local_epochs``) with the head fixed; one optimiser per phase."""
    head = tuple(model.head_names)  # type: ignore[attr-defined]
    body = tuple(model.body_names())  # type: ignore[attr-defined]
    return Recipe(
        phases=(
            Phase(blocks=head, epochs=head_epochs, lr_scale=head_lr_scale, name="head"),
            Phase(blocks=body, epochs=body_epochs, lr_scale=body_lr_scale, name="body"),
        )
    )


def proximal(
    reference: Mapping[str, torch.Tensor],
) -> Callable[[Mapping[str, torch.Tensor]], torch.Tensor]:
    """The proximal penalty ½·Σ_k ‖w_k − reference_k‖² over the reference's keys (FedProx, Ditto).

    Use it as ``LossTerm("proximal", proximal(ref), weight=mu)`` for (mu/2)·‖w − ref‖².
    """
    frozen_ref = {k: v.detach() for k, v in reference.items()}

    def penalty(params: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return 0.5 * sum(((params[k] - ref) ** 2).sum() for k, ref in frozen_ref.items())

    return penalty
