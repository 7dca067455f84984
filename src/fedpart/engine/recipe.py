"""Local-training recipes: what a client trains, for how long, with what loss.

A recipe is data, not code, so that any backend (the sequential reference, a batched one, a
Flower node) can execute it: a list of phases, each naming the blocks it trains, its epochs and
a learning-rate factor, plus loss terms added to the task loss. Every function a recipe holds
(a loss term's, a criterion, an objective, an observer) is a *registered* module-level function
(:func:`recipe_function`), either itself or bound to plain arguments by :func:`bind` (tensors,
numbers, strings, booleans, ``None`` and tuples, lists and string-keyed dicts of them). Such a
recipe compares by value (equal recipes train together on the batched backend; recipes that
differ only in their tensors' values train together too, see :func:`tensor_slots`) and travels
without pickle (:mod:`fedpart.engine.recipe_codec`): a receiver looks the function up by name
among those registered in its own process and refuses any other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

#: registered recipe functions by name (``module.qualname``)
_FUNCTIONS: dict[str, Callable[..., Any]] = {}


def recipe_function(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Register a module-level function for use in recipes (a decorator); returns ``fn``.

    Its name is ``fn.__module__ + "." + fn.__qualname__``; a receiver of a serialized recipe
    (a Flower node) runs only functions registered under the name it is sent. Nested functions
    and lambdas are refused: they cannot be named, compared by value nor sent.
    """
    qualname = getattr(fn, "__qualname__", "")
    if not callable(fn) or "<" in qualname or not qualname:
        raise TypeError(
            f"recipe functions must be module-level functions, not {fn!r} (a closure or "
            "lambda): move it to module level and bind its arguments with bind()"
        )
    _FUNCTIONS[f"{fn.__module__}.{qualname}"] = fn
    return fn


def recipe_functions() -> Mapping[str, Callable[..., Any]]:
    """The registered recipe functions by name."""
    return dict(_FUNCTIONS)


def function_name(fn: Callable[..., Any]) -> str:
    """The registered name of ``fn``; ``TypeError`` when it is not registered."""
    name = f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', '')}"
    if _FUNCTIONS.get(name) is not fn:
        raise TypeError(
            f"{fn!r} is not a registered recipe function: decorate the module-level function "
            "with @recipe_function (closures and lambdas cannot be registered)"
        )
    return name


def _check_plain(value: Any, where: str) -> None:
    if value is None or isinstance(value, (bool, int, float, str, torch.Tensor)):
        return
    if isinstance(value, (tuple, list)):
        for v in value:
            _check_plain(v, where)
        return
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        for v in value.values():
            _check_plain(v, where)
        return
    raise TypeError(
        f"{where}: argument {value!r} is not plain data (tensors, numbers, strings, booleans, "
        "None, and tuples, lists and str-keyed dicts of them)"
    )


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a is b:
            return True
        return (
            a.shape == b.shape
            and a.dtype == b.dtype
            and a.device == b.device
            and bool(torch.equal(a, b))
        )
    if isinstance(a, (tuple, list)):
        return (
            type(a) is type(b)
            and len(a) == len(b)
            and all(_same(x, y) for x, y in zip(a, b, strict=True))
        )
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _shape_key(value: Any) -> Any:
    """A hashable key of ``value`` that ignores tensor values (their shape and dtype count)."""
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), str(value.dtype))
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, *(_shape_key(v) for v in value))
    if isinstance(value, dict):
        return ("dict", *sorted((k, _shape_key(v)) for k, v in value.items()))
    return value


@dataclass(frozen=True, eq=False)
class Bound:
    """A registered function with some arguments bound (as ``functools.partial``), compared
    and hashed by value: ``Bound(f, (a,), (("k", v),))(*more) == f(a, *more, k=v)``."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: tuple[tuple[str, Any], ...] = ()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*self.args, *args, **dict(self.kwargs), **kwargs)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Bound)
            and self.fn is other.fn
            and _same(self.args, other.args)
            and _same(self.kwargs, other.kwargs)
        )

    def __hash__(self) -> int:
        return hash((id(self.fn), _shape_key(self.args), _shape_key(self.kwargs)))


def bind(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Bound:
    """``fn`` (a registered recipe function) with plain arguments bound, for a loss term,
    criterion, objective or observer: ``bind(f, a, k=v)(*more)`` calls ``f(a, *more, k=v)``."""
    name = function_name(fn)
    _check_plain(args, name)
    _check_plain(kwargs, name)
    return Bound(fn, tuple(args), tuple(sorted(kwargs.items())))


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


@recipe_function
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


@recipe_function
def proximal_penalty(
    params: Mapping[str, torch.Tensor], reference: Mapping[str, torch.Tensor]
) -> torch.Tensor:
    """½·Σ_k ‖params_k − reference_k‖² over the reference's keys."""
    return 0.5 * sum(((params[k] - ref) ** 2).sum() for k, ref in reference.items())


def proximal(reference: Mapping[str, torch.Tensor]) -> Bound:
    """The proximal penalty ½·Σ_k ‖w_k − reference_k‖² over the reference's keys (FedProx, Ditto).

    Use it as ``LossTerm("proximal", proximal(ref), weight=mu)`` for (mu/2)·‖w − ref‖².
    """
    return bind(proximal_penalty, reference={k: v.detach() for k, v in reference.items()})


# ------------------------------------------------------------------ tensors inside a recipe
@dataclass(frozen=True)
class TensorSlot:
    """Stands for a tensor of this shape and dtype in a recipe's :func:`skeleton`."""

    shape: tuple[int, ...]
    dtype: str


def _walk(obj: Any, leaf: Callable[[Any], Any]) -> Any:
    """``obj`` rebuilt with ``leaf`` applied to every tensor (or :class:`TensorSlot`) in it."""
    if isinstance(obj, (torch.Tensor, TensorSlot)):
        return leaf(obj)
    if isinstance(obj, (tuple, list)):
        return type(obj)(_walk(v, leaf) for v in obj)
    if isinstance(obj, dict):
        return {k: _walk(v, leaf) for k, v in obj.items()}
    if isinstance(obj, Bound):
        return Bound(obj.fn, _walk(obj.args, leaf), _walk(obj.kwargs, leaf))
    if isinstance(obj, (Recipe, Phase, LossTerm, Observer)):
        fields = dataclasses.fields(obj)
        return dataclasses.replace(
            obj, **{f.name: _walk(getattr(obj, f.name), leaf) for f in fields}
        )
    return obj


def tensor_slots(recipe: Recipe) -> list[torch.Tensor]:
    """The tensors bound inside ``recipe``'s functions, in a fixed order."""
    found: list[torch.Tensor] = []
    _walk(recipe, found.append)
    return found


def skeleton(recipe: Recipe) -> Recipe:
    """``recipe`` with every bound tensor replaced by its :class:`TensorSlot`: recipes with
    equal skeletons differ at most in their tensors' values (FedRoD's per-client class counts)
    and can train together, each client's tensors stacked (:func:`with_tensors`)."""
    return _walk(recipe, lambda t: TensorSlot(tuple(t.shape), str(t.dtype)))


def with_tensors(recipe: Recipe, tensors: list[Any]) -> Recipe:
    """``recipe`` (or its skeleton) with its tensors replaced by ``tensors``, in the order of
    :func:`tensor_slots`."""
    it = iter(tensors)
    return _walk(recipe, lambda _: next(it))
