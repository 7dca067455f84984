"""Width-sliced submodels and holder averaging: capacity heterogeneity as masked mixing.

A client of width ``p`` holds a subset of every layer's output channels (or hidden units) and,
in the next layer, the matching input slice. Which subset is a choice of the method: a prefix
(HeteroFL, Fjord, Pa3dFL), a window rolling with the round (FedRolex), or any set. The server
then averages every coordinate over the clients that hold it, and a coordinate nobody held keeps
its value (:func:`holder_average`); Dis-PFL's sparse masks are the same operation on boolean
masks (:func:`masked_average`).

Three levels, each usable alone:

- **channels**: a :class:`~fedpart.models.width_plan.WidthPlan` (:mod:`fedpart.models.width_plan`)
  names a model's channel groups and picks the kept channels of each for a width.
- **index sets**: per state key, one tensor of kept positions per dimension (``None`` = the whole
  dimension): :meth:`~fedpart.models.width_plan.WidthPlan.index_sets`. This form knows nothing
  about layers, so factorized models (``models.factorized``) and methods can build their own.
- **states and modules**: :func:`slice_state` (a client's sub-state), :func:`embed_state` (put it
  back into full shape), :func:`narrow_model` (the ``nn.Module`` of that width, whose
  ``state_dict`` has the same keys as the full model and the sliced shapes).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence

import torch
from torch import Tensor, nn

from fedpart.models.base import BlockModel
from fedpart.models.width_plan import IndexSets, KeyIndex, width_plan

__all__ = [
    "embed_state",
    "holder_average",
    "index_masks",
    "index_sets_on",
    "masked_average",
    "model_index_sets",
    "narrow_model",
    "slice_state",
    "submodel_state",
]


def _take(t: Tensor, index: KeyIndex) -> Tensor:
    for dim, idx in enumerate(index):
        if idx is not None:
            t = t.index_select(dim, idx.to(t.device))
    return t


def _grid(shape: Sequence[int], index: KeyIndex, device: torch.device) -> tuple[Tensor, ...]:
    """Broadcastable index tensors addressing the outer product of ``index`` in ``shape``."""
    ndim = len(shape)
    out = []
    for dim in range(ndim):
        idx = index[dim] if dim < len(index) else None
        idx = torch.arange(shape[dim], device=device) if idx is None else idx.to(device)
        view = [1] * ndim
        view[dim] = -1
        out.append(idx.reshape(view))
    return tuple(out)


def slice_state(state: Mapping[str, Tensor], index_sets: IndexSets) -> dict[str, Tensor]:
    """A client's sub-state: every tensor restricted to its kept positions (copies)."""
    return {k: _take(v, index_sets[k]) if k in index_sets else v.clone() for k, v in state.items()}


def embed_state(
    full_state: Mapping[str, Tensor], sub_state: Mapping[str, Tensor], index_sets: IndexSets
) -> dict[str, Tensor]:
    """Full-shaped tensors holding ``sub_state`` at its positions and ``full_state`` elsewhere.

    With a zero ``full_state`` this is the full model with every unheld coordinate zeroed.
    """
    out: dict[str, Tensor] = {}
    for key, full in full_state.items():
        sub = sub_state[key]
        if key not in index_sets:
            out[key] = sub.clone()
            continue
        t = full.clone()
        t[_grid(t.shape, index_sets[key], t.device)] = sub.to(t.dtype)
        out[key] = t
    return out


def index_masks(
    state: Mapping[str, Tensor], index_sets: IndexSets, keys: Sequence[str] | None = None
) -> dict[str, Tensor]:
    """Boolean full-shaped masks of the coordinates an index set holds (for :func:`masked_average`)."""
    out: dict[str, Tensor] = {}
    for key in state if keys is None else keys:
        t = state[key]
        if key not in index_sets:
            out[key] = torch.ones(t.shape, dtype=torch.bool, device=t.device)
            continue
        m = torch.zeros(t.shape, dtype=torch.bool, device=t.device)
        m[_grid(t.shape, index_sets[key], t.device)] = True
        out[key] = m
    return out


def _normalise(weights: Sequence[float], n: int) -> list[float]:
    w = [float(x) for x in weights]
    if len(w) != n:
        raise ValueError(f"{n} clients but {len(w)} weights")
    if any(x < 0 or not math.isfinite(x) for x in w):
        raise ValueError(f"weights must be finite and >= 0, got {w}")
    return w


def holder_average(
    full_state: Mapping[str, Tensor],
    client_substates: Sequence[Mapping[str, Tensor]],
    client_index_sets: Sequence[IndexSets],
    weights: Sequence[float],
    keys: Sequence[str] | None = None,
) -> dict[str, Tensor]:
    """Average every coordinate over the clients that hold it; unheld coordinates keep their value.

    ``new[c] = Σ_{i holds c} w_i · x_i[c] / Σ_{i holds c} w_i``, and ``new[c] = full[c]`` where no
    client with a positive weight holds ``c``. Client ``i`` sent ``client_substates[i]`` shaped as
    :func:`slice_state` with ``client_index_sets[i]``; a key it did not send, it does not hold.
    With every client holding everything this is :func:`fedpart.engine.mixing.weighted_average`.
    Work is one scatter per client and tensor, in float64; integer tensors (BatchNorm's
    ``num_batches_tracked``) are rounded back. ``keys`` restricts the result to those keys
    (default: every key of ``full_state``).
    """
    n = len(client_substates)
    if len(client_index_sets) != n:
        raise ValueError(f"{n} sub-states but {len(client_index_sets)} index sets")

    def add(i: int, key: str, full: Tensor, acc: Tensor, held: Tensor, wi: float) -> None:
        sub, index = client_substates[i], client_index_sets[i]
        if key not in sub:
            return
        value = sub[key].to(device=full.device, dtype=torch.float64)
        if key in index:
            grid = _grid(full.shape, index[key], full.device)
            acc.index_put_(grid, value * wi, accumulate=True)
            held.index_put_(grid, torch.full_like(value, wi), accumulate=True)
        else:
            acc.add_(value, alpha=wi)
            held.add_(wi)

    return _holder_mean(full_state, keys, _normalise(weights, n), add)


def masked_average(
    full_state: Mapping[str, Tensor],
    client_states: Sequence[Mapping[str, Tensor]],
    client_masks: Sequence[Mapping[str, Tensor]],
    weights: Sequence[float],
    keys: Sequence[str] | None = None,
) -> dict[str, Tensor]:
    """:func:`holder_average` with full-shaped client tensors and boolean masks of what each holds.

    For sparse personalised models (Dis-PFL) and any selection that is not an outer product of
    per-dimension sets. A key missing from a client's masks is held whole; a key missing from its
    state is not held.
    """
    n = len(client_states)
    if len(client_masks) != n:
        raise ValueError(f"{n} states but {len(client_masks)} masks")

    def add(i: int, key: str, full: Tensor, acc: Tensor, held: Tensor, wi: float) -> None:
        if key not in client_states[i]:
            return
        value = client_states[i][key].to(device=full.device, dtype=torch.float64)
        mask = client_masks[i].get(key)
        if mask is None:
            acc.add_(value, alpha=wi)
            held.add_(wi)
        else:
            m = mask.to(device=full.device, dtype=torch.float64)
            acc.addcmul_(value, m, value=wi)
            held.add_(m, alpha=wi)

    return _holder_mean(full_state, keys, _normalise(weights, n), add)


def _holder_mean(
    full_state: Mapping[str, Tensor],
    keys: Sequence[str] | None,
    weights: list[float],
    add: Callable[[int, str, Tensor, Tensor, Tensor, float], None],
) -> dict[str, Tensor]:
    """Σ w_i·x_i / Σ w_i per coordinate over its holders, in float64; ``add`` puts client i's
    weighted values and weights of ``key`` into the accumulators (the index-set or mask form)."""
    out: dict[str, Tensor] = {}
    for key in full_state if keys is None else keys:
        full = full_state[key]
        acc = torch.zeros(full.shape, dtype=torch.float64, device=full.device)
        held = torch.zeros(full.shape, dtype=torch.float64, device=full.device)
        for i, wi in enumerate(weights):
            if wi != 0.0:
                add(i, key, full, acc, held, wi)
        out[key] = _finish(full, acc, held)
    return out


def _finish(full: Tensor, acc: Tensor, held: Tensor) -> Tensor:
    mean = acc / held.clamp_min(torch.finfo(torch.float64).tiny)
    if not full.is_floating_point():
        mean = mean.round()
    return torch.where(held > 0, mean, full.to(torch.float64)).to(full.dtype)


# --------------------------------------------------------------------------------- modules
def model_index_sets(
    model: nn.Module, p: float, *, kind: str = "prefix", offset: int = 0
) -> IndexSets:
    """What a width-``p`` client holds of ``model``'s state: the model's own
    ``width_index_sets(p)`` (factorized models, prefix only), else its :func:`width_plan`'s."""
    own = getattr(model, "width_index_sets", None)
    if callable(own):
        if kind != "prefix":
            raise ValueError(f"{type(model).__name__} is pruned by prefix only, not {kind!r}")
        return own(p)
    return width_plan(model).index_sets(p=p, kind=kind, offset=offset)


def index_sets_on(index: IndexSets, device: torch.device | str) -> IndexSets:
    """``index`` with every index tensor on ``device``: a method keeps its clients' index sets
    where the states they slice live, so that slicing and averaging copy nothing from the host
    (on a GPU each such copy makes the host wait for every queued kernel)."""
    return {
        key: tuple(None if i is None else i.to(device) for i in dims) for key, dims in index.items()
    }


def submodel_state(
    model: nn.Module,
    full_state: Mapping[str, Tensor],
    p: float,
    *,
    kind: str = "prefix",
    offset: int = 0,
) -> tuple[dict[str, Tensor], IndexSets]:
    """The width-``p`` sub-state of ``full_state`` for ``model``, and its index sets."""
    index = model_index_sets(model, p, kind=kind, offset=offset)
    return slice_state(full_state, index), index


def narrow_model(
    model: nn.Module,
    p: float | None = None,
    *,
    channels: Mapping[str, Tensor] | None = None,
    kind: str = "prefix",
    offset: int = 0,
) -> nn.Module:
    """The ``nn.Module`` of width ``p`` (or of explicit kept ``channels`` per group).

    A deep copy of ``model`` whose tensors are replaced by their slices and whose size attributes
    (``in_channels``, ``out_features``, ``num_features``, …) follow, so its ``state_dict`` has the
    full model's keys with the client's shapes and :func:`slice_state` of a full state loads into
    it. ``feature_dim`` of a :class:`BlockModel` becomes its head's input width. A factorized
    model (``models.factorized``) builds its narrow version itself (its ``narrow(p)`` method).
    """
    own = getattr(model, "narrow", None)
    if callable(own) and channels is None:
        if p is None:
            raise ValueError("give p")
        return own(p)
    plan = width_plan(model)
    if channels is None:
        if p is None:
            raise ValueError("give exactly one of p or channels")
        channels = plan.channels(p, kind=kind, offset=offset)
    elif p is not None:
        raise ValueError("give exactly one of p or channels")
    index = plan.index_sets(channels)
    narrow = copy.deepcopy(model)
    modules = dict(narrow.named_modules())
    for key, idx in index.items():
        owner, _, name = key.rpartition(".")
        module = modules[owner]
        if name in module._parameters:
            old = module._parameters[name]
            assert old is not None
            module._parameters[name] = nn.Parameter(
                _take(old.detach(), idx).clone(), requires_grad=old.requires_grad
            )
        else:
            buf = module._buffers[name]
            assert buf is not None
            module._buffers[name] = _take(buf, idx).clone()
    for module in modules.values():
        _resize(module)
    if isinstance(narrow, BlockModel):
        head = narrow.get_submodule(narrow.head_names[0])
        first = next((m for m in head.modules() if isinstance(m, nn.Linear)), None)
        if first is not None:
            narrow.feature_dim = first.in_features
    return narrow


def _resize(module: nn.Module) -> None:
    if isinstance(module, nn.Conv2d):
        module.out_channels = module.weight.shape[0]
        module.in_channels = module.weight.shape[1] * module.groups
    elif isinstance(module, nn.Linear):
        module.out_features, module.in_features = module.weight.shape
    elif isinstance(module, nn.modules.batchnorm._BatchNorm):
        ref = module.weight if module.weight is not None else module.running_mean
        if ref is not None:
            module.num_features = ref.shape[0]
    elif isinstance(module, nn.GroupNorm):
        if module.weight is not None:
            module.num_channels = module.weight.shape[0]
            if module.num_channels % module.num_groups:
                raise ValueError(
                    f"GroupNorm with {module.num_groups} groups cannot hold "
                    f"{module.num_channels} channels: choose a width where p·C divides"
                )
    elif isinstance(module, nn.LayerNorm) and module.weight is not None:
        module.normalized_shape = tuple(module.weight.shape)
