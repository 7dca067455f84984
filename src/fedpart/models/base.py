"""The block-model contract, the model registry and the layers the zoo is built from.

A :class:`BlockModel` is an ``nn.Module`` whose top-level child modules are its *blocks*, in
forward order. The last block(s) form the *head* (the classifier); the others form the *body*
(the feature extractor). Every ``state_dict`` entry (parameters and buffers) lives under exactly
one block, so a method can say which parameters are personal, shared or frozen by naming blocks.

Every model is usable with :func:`torch.func.functional_call` and :func:`torch.func.vmap`: no
in-place operations on activations, flattening with ``torch.flatten(x, 1)``.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedpart.errors import ConfigError

__all__ = [
    "BlockModel",
    "ConvBlock",
    "DenseBlock",
    "LayoutConv2d",
    "batchnorm_keys",
    "count_parameters",
]


# --------------------------------------------------------------------------------- the contract
class BlockModel(nn.Module):
    """A classifier whose top-level child modules are its blocks, in forward order.

    Subclasses register their blocks as attributes in forward order (``build_model`` then
    checks the structure and sets :attr:`feature_dim` by a dry forward pass; a model may also
    call :meth:`_finalize` itself). They set :attr:`head_names` when the head is more than the
    last block, and override :meth:`pool_features` when the body output needs more than
    flattening (e.g. global average pooling). A model must compute ``forward(x)`` as
    ``classify(features(x))``: training calls ``forward``, evaluation ``features`` once and
    then each client's head; ``build_model`` refuses a model whose two paths differ.
    """

    _declared_head: tuple[str, ...] | None = None
    #: what ``engine.conv_layout=auto`` picks on the CPU: channels-last unless measured slower for
    #: this model (``benchmarks/conv_layout.py``)
    channels_last_on_cpu: bool = True

    def __init__(self) -> None:
        super().__init__()
        self.feature_dim: int = 0

    # ------------------------------------------------------------------ block structure
    @property
    def block_names(self) -> tuple[str, ...]:
        """Names of the top-level child modules, in forward order."""
        return tuple(self._modules)

    @property
    def head_names(self) -> tuple[str, ...]:
        """The classifier block(s): the last block unless the model (or ``model.head`` in a
        config) says otherwise. Methods keep these personal (FedPer), train them apart
        (FedRep) or freeze them (FedBABU); the rest is the body."""
        if self._declared_head is not None:
            return self._declared_head
        return (self.block_names[-1],)

    @head_names.setter
    def head_names(self, names: Sequence[str]) -> None:
        self._declared_head = tuple(names)

    def body_names(self) -> tuple[str, ...]:
        """The feature-extractor blocks: :attr:`block_names` minus :attr:`head_names`."""
        head = set(self.head_names)
        return tuple(b for b in self.block_names if b not in head)

    def block_of(self, key: str) -> str:
        """The block a ``state_dict`` key (parameter or buffer) belongs to.

        Raises ``KeyError`` only for a key that names no block of this model.
        """
        block = key.split(".", 1)[0]
        if block not in self._modules:
            raise KeyError(
                f"{key!r} is not under any block of {type(self).__name__}: {self.block_names}"
            )
        return block

    def block_keys(self) -> dict[str, list[str]]:
        """Block name → its ``state_dict`` keys (parameters and buffers), in state-dict order."""
        out: dict[str, list[str]] = {b: [] for b in self.block_names}
        for key in self.state_dict():
            out[self.block_of(key)].append(key)
        return out

    # ------------------------------------------------------------------ computation
    def set_channels_last(self, enabled: bool) -> None:
        """Compute this model's convolutions (:class:`LayoutConv2d`) in the channels-last layout.

        Parameters and the state dict keep their usual (contiguous) layout: each convolution
        converts its input and weight on the fly, so only the computation changes. On the CPU
        oneDNN's channels-last convolutions and pooling are several times faster than the NCHW
        ones for the small images of federated benchmarks (``fedpart bench``); the results are
        equal up to float rounding (a different summation order), not bit-identical.
        """
        for module in self.modules():
            if isinstance(module, LayoutConv2d):
                module.channels_last = bool(enabled)

    @contextlib.contextmanager
    def conv_layout(self, *, channels_last: bool) -> Iterator[None]:
        """Compute in the given layout inside the ``with`` block; the previous one is restored."""
        previous = self.channels_last
        self.set_channels_last(channels_last)
        try:
            yield
        finally:
            self.set_channels_last(previous)

    @property
    def channels_last(self) -> bool:
        """Whether :meth:`set_channels_last` is on (``False`` for models without convolutions)."""
        return any(isinstance(m, LayoutConv2d) and m.channels_last for m in self.modules())

    def pool_features(self, x: Tensor) -> Tensor:
        """Turn the last body block's output into the flat ``[B, F]`` feature tensor."""
        return torch.flatten(x, 1)

    def features(self, x: Tensor) -> Tensor:
        """Run the body; return a flat ``[B, feature_dim]`` tensor."""
        for name in self.body_names():
            x = self._modules[name](x)
        return self.pool_features(x)

    def classify(self, z: Tensor) -> Tensor:
        """Run the head on features ``z``; return logits ``[B, num_classes]``."""
        for name in self.head_names:
            z = self._modules[name](z)
        return z

    def forward(self, x: Tensor) -> Tensor:
        return self.classify(self.features(x))

    def block_outputs(self, x: Tensor) -> dict[str, Tensor]:
        """The output of every block, in forward order (the last body output after pooling).

        ``block_outputs(x)[head_names[-1]]`` equals ``forward(x)``. Methods that score layers by
        their activations (FedCMD) use this.
        """
        outputs: dict[str, Tensor] = {}
        body = self.body_names()
        for name in body:
            x = self._modules[name](x)
            outputs[name] = x
        x = self.pool_features(x)
        if body:
            outputs[body[-1]] = x
        for name in self.head_names:
            x = self._modules[name](x)
            outputs[name] = x
        return outputs

    # ------------------------------------------------------------------ construction helper
    def _finalize(self, input_shape: Sequence[int]) -> None:
        """Check the block structure and set :attr:`feature_dim` by a dry forward pass."""
        names = self.block_names
        head = self.head_names
        if not names or not head or tuple(names[-len(head) :]) != tuple(head):
            raise ValueError(f"head {head} must be the last blocks of {names}")
        own = list(self._parameters) + list(self._buffers)
        if own:
            raise ValueError(f"{type(self).__name__} holds tensors outside its blocks: {own}")
        z = dry_forward(self.features, [self], input_shape)
        if z.dim() != 2:
            raise ValueError(f"features() of {type(self).__name__} returned shape {tuple(z.shape)}")
        self.feature_dim = int(z.shape[1])


def dry_forward(
    fn: Callable[[Tensor], Tensor],
    modules: Iterable[nn.Module],
    input_shape: Sequence[int],
    *,
    model: str = "",
    key: str = "model.name",
    hint: str = "",
) -> Tensor:
    """Run ``fn`` on one all-zero sample (eval mode, no grad); report a too-small input.

    The modules are put back in their previous train/eval mode, and no BatchNorm statistics
    change. A shape error becomes a :class:`ConfigError` on ``key`` that ends with ``hint``.
    """
    mods = list(modules)
    modes = [(m, m.training) for sub in mods for m in sub.modules()]
    try:
        for sub in mods:
            sub.eval()
        with torch.no_grad():
            return fn(torch.zeros(1, *input_shape))
    except RuntimeError as exc:
        size = "x".join(str(s) for s in input_shape)
        msg = f"input {size} is too small for model '{model}'" if model else f"input {size} failed"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(key, f"{msg} ({first}){'; ' + hint if hint else ''}") from exc
    finally:
        for m, mode in modes:
            m.train(mode)


def count_parameters(model: nn.Module, blocks: Iterable[str] | None = None) -> int:
    """Number of parameter entries (buffers excluded) in ``blocks`` (all blocks when ``None``)."""
    if blocks is None:
        return sum(p.numel() for p in model.parameters())
    wanted = set([blocks] if isinstance(blocks, str) else blocks)
    if isinstance(model, BlockModel):
        unknown = wanted - set(model.block_names)
        if unknown:
            raise KeyError(f"unknown blocks {sorted(unknown)}; blocks: {model.block_names}")
    return sum(p.numel() for k, p in model.named_parameters() if k.split(".", 1)[0] in wanted)


def batchnorm_keys(model: nn.Module, *, statistics: bool = True, affine: bool = False) -> list[str]:
    """State-dict keys of the model's BatchNorm layers: their running statistics
    (``running_mean``, ``running_var``, ``num_batches_tracked``) and/or affine parameters
    (``weight``, ``bias``). Personal BatchNorm (FedBN, FL-bench's local statistics) keeps them."""
    keys: list[str] = []
    for name, module in model.named_modules():
        if not isinstance(module, nn.modules.batchnorm._BatchNorm):
            continue
        prefix = f"{name}." if name else ""
        if affine:
            keys += [prefix + k for k, _ in module.named_parameters(recurse=False)]
        if statistics:
            keys += [prefix + k for k, b in module.named_buffers(recurse=False) if b is not None]
    return keys


# --------------------------------------------------------------------------------- layers
class LayoutConv2d(nn.Conv2d):
    """``nn.Conv2d`` that can compute in the channels-last layout (``channels_last``, off by
    default; see :meth:`BlockModel.set_channels_last`). Its parameters and state-dict keys are
    exactly ``nn.Conv2d``'s; only the layout of the computation changes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.channels_last = False

    def forward(self, x: Tensor) -> Tensor:
        weight = self.weight
        if self.channels_last:
            # ``.to`` (not ``.contiguous``): a 1-channel tensor is already "contiguous" in both
            # layouts, and only ``.to`` gives it the channels-last strides oneDNN dispatches on
            x = x.to(memory_format=torch.channels_last)
            weight = weight.to(memory_format=torch.channels_last)
        return self._conv_forward(x, weight, self.bias)


class ConvBlock(LayoutConv2d):
    """``Conv2d`` → [``BatchNorm2d``] → ReLU → ``MaxPool2d(pool)``; its keys are the conv's
    (``<block>.weight``) and, with ``batchnorm=True``, the norm's (``<block>.norm.*``).

    ``relu=False`` or ``pool=0`` drop that step. ReLU and max-pooling commute exactly, so the
    block computes pool-then-ReLU (a quarter of the ReLU work; "pool, relu" as some papers print
    it is the same function, with the same gradients). ``channels_last`` (off by default; see
    :meth:`BlockModel.set_channels_last`) computes the convolution in that layout.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        *,
        padding: int = 0,
        relu: bool = True,
        pool: int = 2,
        batchnorm: bool = False,
    ) -> None:
        super().__init__(in_channels, out_channels, kernel_size, padding=padding)
        self.relu = relu
        self.pool = pool
        self.norm = nn.BatchNorm2d(out_channels) if batchnorm else None

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, relu={self.relu}, pool={self.pool}"

    def forward(self, x: Tensor) -> Tensor:
        x = super().forward(x)
        if self.norm is not None:
            x = self.norm(x)
        # Pooling first: max-pooling commutes with ReLU exactly (values and gradients, ties
        # included), and the ReLU then touches a quarter of the elements.
        if self.pool:
            x = F.max_pool2d(x, self.pool)
        if self.relu:
            x = F.relu(x)
        return x


class DenseBlock(nn.Linear):
    """Flatten to ``[B, F]`` → ``Linear`` → optional ReLU; its keys are ``<block>.weight/bias``."""

    def __init__(self, in_features: int, out_features: int, *, relu: bool = True) -> None:
        super().__init__(in_features, out_features)
        self.relu = relu

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, relu={self.relu}"

    def forward(self, x: Tensor) -> Tensor:
        x = super().forward(torch.flatten(x, 1))
        return F.relu(x) if self.relu else x


# --------------------------------------------------------------------------------- option checks
def int_option(key: str, value: Any, *, low: int = 0) -> int:
    """An integer option ``>= low`` (booleans refused)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(
            f"model.{key}",
            f"expected an integer >= {low}, got {value!r}; valid: {low}, {low + 1}, ...",
        )
    return value


def choice_option(key: str, value: Any, choices: Sequence[Any]) -> Any:
    """An option that must be one of ``choices``."""
    if value not in choices:
        valid = ", ".join(str(c) for c in choices)
        raise ConfigError(f"model.{key}", f"invalid value {value!r}; valid: {valid}")
    return value


def image_shape(model: str, input_shape: tuple[int, ...]) -> tuple[int, int, int]:
    """``input_shape`` as (C, H, W), or a ConfigError saying the model needs images."""
    if len(input_shape) != 3:
        raise ConfigError(
            "model.name",
            f"model '{model}' needs image input (C, H, W) but the dataset gives {input_shape}; "
            "use model.name=mlp for flat features",
        )
    c, h, w = input_shape
    return c, h, w


def flat_size(shape: Sequence[int]) -> int:
    """Number of entries of one sample of ``shape``."""
    return math.prod(shape)
