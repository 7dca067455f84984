"""Channel groups of a width-sliced model: which channels a client of width ``p`` keeps.

A :class:`WidthPlan` names a model's *channel groups* (sets of layer outputs that must share one
index set: a plain layer's output, or a ResNet stage's residual stream) and, for every state key,
which dimensions follow which group. :meth:`WidthPlan.channels` picks the kept channels of each
group for a width (a prefix, or a window rolling with the round); :meth:`WidthPlan.index_sets`
turns them into *index sets*: per state key, one tensor of kept positions per dimension
(``None`` = the whole dimension). A client holds the coordinates in the outer product of its
per-dimension sets; :mod:`fedpart.models.width` slices, embeds and averages states by them.

Slicing rules of :func:`width_plan`: the first layer's input stays whole (image channels or raw
features), the classifier's outputs stay whole, a norm layer follows the channels of its input,
and a ``Linear`` after a flatten keeps the features of the kept channels (channel-major:
channel ``c`` of a ``C×H×W`` map is features ``c·HW … c·HW+HW−1``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

__all__ = ["Axis", "IndexSets", "KeyIndex", "WidthPlan", "kept_count", "width_plan"]

#: kept positions along each dimension of one tensor (``None``: the whole dimension)
KeyIndex = tuple[Tensor | None, ...]
#: per state key, what a client holds; a key that is absent is held whole
IndexSets = dict[str, KeyIndex]

_NORMS = (nn.modules.batchnorm._BatchNorm, nn.GroupNorm, nn.LayerNorm)


@dataclass(frozen=True)
class Axis:
    """Dimension ``dim`` of a tensor follows channel group ``group``.

    ``repeat > 1`` is a flattened feature map: channel ``c`` owns features
    ``c·repeat … c·repeat + repeat − 1`` (``torch.flatten`` of ``[B, C, H, W]`` is channel-major).
    """

    dim: int
    group: str
    repeat: int = 1


def kept_count(size: int, p: float) -> int:
    """Channels kept of ``size`` at width ``p``: ``⌈p·size⌉`` and at least one (HeteroFL's
    rounding; with ``p`` a multiple of 1/16 and sizes divisible by 16 it is exactly ``p·size``)."""
    if not 0.0 < p <= 1.0:
        raise ValueError(f"width must be in (0, 1], got {p}")
    return max(1, math.ceil(p * size - 1e-9))


@dataclass
class WidthPlan:
    """A model's channel groups and, per state key, the dimensions that follow them.

    ``groups`` maps each sliceable group to its full size; ``axes`` maps each state key to its
    sliced dimensions (keys not listed, e.g. ``num_batches_tracked``, are never sliced).
    """

    groups: dict[str, int] = field(default_factory=dict)
    axes: dict[str, tuple[Axis, ...]] = field(default_factory=dict)

    def channels(self, p: float, *, kind: str = "prefix", offset: int = 0) -> dict[str, Tensor]:
        """The kept channels of every group at width ``p``.

        ``prefix``: ``0 … k−1`` with ``k = kept_count(size, p)`` (HeteroFL, Fjord, Pa3dFL).
        ``rolling``: ``(offset + i) mod size`` for ``i < k`` (FedRolex rolls ``offset`` with the
        round); the order is kept as is, since any order works as long as every layer uses it.
        """
        out: dict[str, Tensor] = {}
        for group, size in self.groups.items():
            k = kept_count(size, p)
            if kind == "prefix":
                out[group] = torch.arange(k)
            elif kind == "rolling":
                out[group] = (torch.arange(k) + int(offset)) % size
            else:
                raise ValueError(f"unknown channel selection {kind!r}; valid: prefix, rolling")
        return out

    def index_sets(
        self,
        channels: Mapping[str, Tensor] | None = None,
        *,
        p: float | None = None,
        kind: str = "prefix",
        offset: int = 0,
    ) -> IndexSets:
        """Per state key, the kept positions of each sliced dimension.

        Give either explicit ``channels`` (group → kept channel indices; groups left out stay
        whole) or a width ``p`` (with ``kind`` and ``offset`` as in :meth:`channels`).
        """
        if (channels is None) == (p is None):
            raise ValueError("give exactly one of channels or p")
        chosen = self.channels(p, kind=kind, offset=offset) if p is not None else channels
        assert chosen is not None
        for group, idx in chosen.items():
            if group not in self.groups:
                raise KeyError(f"unknown channel group {group!r}; groups: {sorted(self.groups)}")
            if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= self.groups[group]):
                raise IndexError(f"channel index out of range for group {group!r}")
        out: IndexSets = {}
        for key, axes in self.axes.items():
            ndim = 1 + max(a.dim for a in axes)
            per_dim: list[Tensor | None] = [None] * ndim
            for a in axes:
                idx = chosen.get(a.group)
                if idx is None:
                    continue
                idx = idx.to(torch.long)
                if a.repeat > 1:
                    step = torch.arange(a.repeat, device=idx.device)
                    idx = (idx[:, None] * a.repeat + step[None, :]).reshape(-1)
                per_dim[a.dim] = idx
            if any(i is not None for i in per_dim):
                out[key] = tuple(per_dim)
        return out

    # ------------------------------------------------------------------ construction
    def add_layer(
        self,
        prefix: str,
        module: nn.Module,
        *,
        out_group: str | None,
        in_group: str | None,
        repeat: int = 1,
    ) -> None:
        """Register a conv/linear/norm module's tensors: outputs follow ``out_group``, inputs
        ``in_group`` (``None``: that dimension is never sliced)."""
        pre = f"{prefix}." if prefix else ""
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            if isinstance(module, nn.Conv2d) and module.groups != 1:
                raise ValueError(f"grouped convolution {prefix!r} cannot be width-sliced")
            weight: list[Axis] = []
            if out_group is not None:
                weight.append(Axis(0, out_group))
                if module.bias is not None:
                    self.axes[pre + "bias"] = (Axis(0, out_group),)
            if in_group is not None:
                weight.append(Axis(1, in_group, repeat))
            if weight:
                self.axes[pre + "weight"] = tuple(weight)
        elif isinstance(module, _NORMS):
            if in_group is None:
                return
            if isinstance(module, nn.LayerNorm) and len(module.normalized_shape) != 1:
                raise ValueError(f"LayerNorm {prefix!r} over several dims cannot be width-sliced")
            names = [n for n, t in module.named_parameters(recurse=False) if t is not None]
            names += [
                n for n, t in module.named_buffers(recurse=False) if t is not None and t.dim() == 1
            ]
            for n in names:
                self.axes[pre + n] = (Axis(0, in_group),)
        else:
            raise ValueError(f"cannot width-slice {type(module).__name__} at {prefix!r}")


def width_plan(model: nn.Module) -> WidthPlan:
    """The :class:`WidthPlan` of a zoo model.

    - A model with its own ``width_plan()`` method supplies it; a factorized model, which slices
      θ_v's columns rather than channels, has ``width_index_sets(p)`` instead
      (:func:`fedpart.models.width.model_index_sets`).
    - ``ResNet18`` (either norm): the residual stream of each stage is one group shared by the
      stem or the stage's shortcut, the second conv of each block and their norms; each block's
      first conv is a group of its own. With ``norm=gn`` a narrow model keeps ``gn_groups``
      groups, so ``p·C`` must stay divisible by it, and a slice is *not* the full model with
      channels zeroed (each group's statistics are over different channels).
    - Any other model must be a chain whose conv/linear/norm modules are registered in forward
      order (every CNN, VGG11, LeNet5 and the MLP of the zoo): each conv/linear output is a group,
      a norm follows its input, the last ``Linear`` is the classifier.

    Raises ``ValueError`` for a module that cannot be sliced (grouped conv, unknown layer type).
    """
    own = getattr(model, "width_plan", None)
    if callable(own):
        plan = own()
        assert isinstance(plan, WidthPlan)
        return plan
    if callable(getattr(model, "width_index_sets", None)):
        raise ValueError(
            f"{type(model).__name__} slices its own factors: use model_index_sets(model, p)"
        )
    from fedpart.models.resnet import BasicBlock, ResNet18

    if isinstance(model, ResNet18):
        return _resnet_plan(model, BasicBlock)
    return _chain_plan(model)


def _stateful_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    return [
        (name, m)
        for name, m in model.named_modules()
        if any(True for _ in m.parameters(recurse=False))
        or any(b is not None for b in m.buffers(recurse=False))
    ]


def _chain_plan(model: nn.Module) -> WidthPlan:
    plan = WidthPlan()
    layers = _stateful_modules(model)
    linears = [n for n, m in layers if isinstance(m, nn.Linear)]
    classifier = linears[-1] if linears else None
    current: str | None = None  # the group of the running activation; None = the input
    for name, module in layers:
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            fan_in = module.in_channels if isinstance(module, nn.Conv2d) else module.in_features
            repeat = 1
            if current is not None:
                size = plan.groups[current]
                if fan_in % size:
                    raise ValueError(
                        f"{name!r} takes {fan_in} inputs, not a multiple of the {size} "
                        f"channels of {current!r}: not a chain model"
                    )
                repeat = fan_in // size
                if repeat > 1 and isinstance(module, nn.Conv2d):
                    raise ValueError(f"{name!r}: {fan_in} input channels after {size}")
            out = None if name == classifier else name
            if out is not None:
                fan_out = (
                    module.out_channels if isinstance(module, nn.Conv2d) else module.out_features
                )
                plan.groups[out] = fan_out
            plan.add_layer(name, module, out_group=out, in_group=current, repeat=repeat)
            current = out
        else:
            plan.add_layer(name, module, out_group=None, in_group=current)
    return plan


def _resnet_plan(model: nn.Module, block_type: type) -> WidthPlan:
    plan = WidthPlan()
    stem = model.get_submodule("stem")
    stream = "stem"
    plan.groups[stream] = stem.conv.out_channels
    plan.add_layer("stem.conv", stem.conv, out_group=stream, in_group=None)
    plan.add_layer("stem.norm", stem.norm, out_group=None, in_group=stream)
    for li in range(1, 5):
        layer = model.get_submodule(f"layer{li}")
        for bi, block in enumerate(layer):
            assert isinstance(block, block_type)
            pre = f"layer{li}.{bi}"
            inner = f"{pre}.conv1"
            plan.groups[inner] = block.conv1.out_channels
            out = stream
            if not isinstance(block.shortcut, nn.Identity):
                out = f"layer{li}"
                plan.groups[out] = block.conv2.out_channels
                plan.add_layer(
                    f"{pre}.shortcut.0", block.shortcut[0], out_group=out, in_group=stream
                )
                plan.add_layer(f"{pre}.shortcut.1", block.shortcut[1], out_group=None, in_group=out)
            plan.add_layer(f"{pre}.conv1", block.conv1, out_group=inner, in_group=stream)
            plan.add_layer(f"{pre}.norm1", block.norm1, out_group=None, in_group=inner)
            plan.add_layer(f"{pre}.conv2", block.conv2, out_group=out, in_group=inner)
            plan.add_layer(f"{pre}.norm2", block.norm2, out_group=None, in_group=out)
            stream = out
    plan.add_layer("fc", model.get_submodule("fc"), out_group=None, in_group=stream)
    return plan
