"""The model registry: the models by name, building one, and the block-model contract it is
checked against (docs/models.md, docs/extending.md)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from fedpart.errors import ConfigError
from fedpart.models.base import BlockModel

__all__ = ["MODELS", "ModelInfo", "SequentialModel", "adopt", "build_model", "register_model"]


@dataclass(frozen=True)
class ModelInfo:
    """A registered model: its name, a one-line description and its options (option → doc)."""

    name: str
    description: str
    options: dict[str, str] = field(default_factory=dict)


MODELS: dict[str, ModelInfo] = {}
_BUILDERS: dict[str, Callable[..., BlockModel]] = {}


def register_model(
    name: str, description: str = "", options: dict[str, str] | None = None
) -> Callable[[Callable[..., nn.Module]], Callable[..., nn.Module]]:
    """Decorator registering ``builder(num_classes=, input_shape=, **options)`` as model
    ``name`` (lower case; ``model.name`` in a config). ``options`` are the ``model.*`` keys it
    accepts (key → one-line doc).

    The builder returns a :class:`BlockModel` or a plain ``nn.Sequential`` (its children become
    the blocks, in order, the last one the head; docs/extending.md). A name taken by another
    builder is a one-line :class:`ConfigError`.
    """
    if not isinstance(name, str) or not name or name != name.lower() or " " in name:
        raise ConfigError("register_model", f"model {name!r}: the name must be a lower-case word")

    def wrap(builder: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
        old = _BUILDERS.get(name)
        if old is not None and (old.__module__, old.__qualname__) != (
            builder.__module__,
            builder.__qualname__,
        ):
            raise ConfigError(
                "register_model",
                f"model '{name}': the name is taken (registered by {old.__module__}); "
                "choose another",
            )
        doc = description or (builder.__doc__ or name).strip().splitlines()[0]
        MODELS[name] = ModelInfo(name, doc, dict(options or {}))
        _BUILDERS[name] = builder
        return builder

    return wrap


def build_model(
    name: str,
    *,
    num_classes: int,
    input_shape: tuple[int, ...],
    head: Sequence[str] | None = None,
    **options: Any,
) -> BlockModel:
    """Build the registered model ``name`` for ``input_shape`` ((C, H, W) or (D,)) and classes.

    ``head`` (``model.head``) names the blocks that form the head instead of the model's own
    choice. The model's contract is checked (:func:`adopt`). Raises :class:`ConfigError` for an
    unknown model, an unknown option, an invalid value or a model that breaks the contract.
    Parameters are initialised from torch's global RNG: seed it first for a reproducible model.
    """
    from fedpart.registry import lookup  # noqa: PLC0415

    name = lookup(list(MODELS), name, "model.name", "model")
    valid = MODELS[name].options
    for opt in options:
        if opt not in valid:
            choices = ", ".join(sorted(valid)) or "(none)"
            raise ConfigError(
                f"model.{opt}", f"unknown option for model '{name}'; valid: {choices}"
            )
    shape = tuple(int(s) for s in input_shape)
    if not shape or any(s < 1 for s in shape):
        raise ValueError(f"input_shape must be positive sizes, got {input_shape}")
    if int(num_classes) < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    built = _BUILDERS[name](num_classes=int(num_classes), input_shape=shape, **options)
    return adopt(built, name, shape, head)


class SequentialModel(BlockModel):
    """A plain ``nn.Sequential`` as a :class:`BlockModel`: its children are the blocks, in
    order (state-dict keys unchanged: ``0.weight``, ...), the last one the head."""

    def __init__(self, seq: nn.Sequential) -> None:
        super().__init__()
        for child_name, child in seq.named_children():
            self.add_module(child_name, child)


def adopt(
    model: Any, name: str, input_shape: tuple[int, ...], head: Sequence[str] | None = None
) -> BlockModel:
    """``model`` checked against the block-model contract, in one line per breach:

    - a plain ``nn.Sequential`` is taken as blocks (:class:`SequentialModel`); any other
      module that is not a :class:`BlockModel` is refused, saying how to wrap it;
    - ``head`` (``model.head``) must name the model's last blocks;
    - the structure is checked and ``feature_dim`` set by a dry forward pass (what
      :meth:`BlockModel._finalize` does; the model need not call it);
    - ``forward(x)`` must equal ``classify(features(x))`` (:func:`check_forward`).
    """
    if isinstance(model, nn.Sequential):
        model = SequentialModel(model)
    if not isinstance(model, BlockModel):
        raise ConfigError(
            "model.name",
            f"model '{name}' builds a {type(model).__name__}, not a fedpart BlockModel: return an "
            "nn.Sequential (its children become the blocks, the last one the head) or subclass "
            "fedpart.models.BlockModel (docs/extending.md)",
        )
    if head is not None:
        head = tuple(head)
        unknown = [b for b in head if b not in model.block_names]
        if unknown or not head or model.block_names[-len(head) :] != head:
            raise ConfigError(
                "model.head",
                f"{list(head)} must name the last block(s) of model '{name}', whose blocks are "
                f"{', '.join(model.block_names)}",
            )
        model.head_names = head
        model.feature_dim = 0
    if not model.feature_dim:
        try:
            model._finalize(input_shape)
        except ValueError as exc:
            raise ConfigError("model.name", f"model '{name}': {exc}") from exc
    check_forward(model, name, input_shape)
    return model


def check_forward(model: BlockModel, name: str, input_shape: tuple[int, ...]) -> None:
    """Refuse a model whose own ``forward`` computes something else than
    ``classify(features(x))`` (on two seeded random samples, eval mode, no RNG consumed)."""
    if type(model).forward is BlockModel.forward:
        return
    x = torch.randn(2, *input_shape, generator=torch.Generator().manual_seed(0))
    modes = [(m, m.training) for m in model.modules()]
    try:
        model.eval()
        with torch.no_grad():
            whole = model(x)
            split = model.classify(model.features(x))
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(
            "model.name",
            f"model '{name}': classify(features(x)) fails where forward(x) runs ({first}); "
            "training calls forward, evaluation features then classify",
        ) from exc
    finally:
        for m, mode in modes:
            m.train(mode)
    if whole.shape != split.shape or not torch.allclose(whole, split, rtol=1e-4, atol=1e-5):
        gap = (
            f"max gap {float((whole - split).abs().max()):.3g}"
            if whole.shape == split.shape
            else f"shapes {tuple(whole.shape)} and {tuple(split.shape)}"
        )
        raise ConfigError(
            "model.name",
            f"model '{name}': forward(x) differs from classify(features(x)) ({gap}); training "
            "calls forward and evaluation features then classify, so they must agree: drop the "
            "model's own forward or make it classify(features(x)) (docs/extending.md)",
        )
