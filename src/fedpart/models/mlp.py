"""A fully connected network for flat features (or flattened images)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fedpart.errors import ConfigError
from fedpart.models.base import BlockModel, DenseBlock, flat_size
from fedpart.models.registry import register_model

__all__ = ["MLP"]


class MLP(BlockModel):
    """Blocks ``fc1``..``fcK`` (Linear + ReLU, one per hidden width) | head ``classifier`` (Linear).

    An image input (C, H, W) is flattened by ``fc1``. With no hidden layer the model is a linear
    classifier whose features are the flattened input.
    """

    def __init__(
        self, num_classes: int, input_shape: tuple[int, ...], *, hidden: Sequence[int] = (200, 200)
    ) -> None:
        super().__init__()
        width = flat_size(input_shape)
        for i, out_features in enumerate(hidden, start=1):
            self.add_module(f"fc{i}", DenseBlock(width, out_features))
            width = out_features
        self.classifier = DenseBlock(width, num_classes, relu=False)
        self._finalize(input_shape)


def _hidden_option(value: Any) -> tuple[int, ...]:
    items = [value] if isinstance(value, int) and not isinstance(value, bool) else value
    ok = isinstance(items, list | tuple) and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in items
    )
    if not ok:
        raise ConfigError(
            "model.hidden",
            f"expected a list of positive integers, got {value!r}; valid: e.g. [200, 200] or []",
        )
    return tuple(items)


@register_model(
    "mlp",
    "Fully connected network (flattens images): fc1..fcK | head classifier",
    {"hidden": "hidden layer widths (list of ints, default [200, 200]; [] = linear model)"},
)
def _build_mlp(
    *, num_classes: int, input_shape: tuple[int, ...], hidden: Any = (200, 200)
) -> BlockModel:
    return MLP(num_classes, input_shape, hidden=_hidden_option(hidden))
