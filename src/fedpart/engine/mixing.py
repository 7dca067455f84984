"""Aggregation as mixing: ``new[i] = Σ_j W[i, j] · old[j]`` over the stacked tensors of one key."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch


def mix(stacked: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Apply a mixing matrix ``weights`` [m, n] to ``stacked`` [n, ...]; returns [m, ...].

    The weights are brought to ``stacked``'s device and dtype (a graph's mixing matrix is made on
    the host; the states may live on a GPU)."""
    flat = stacked.reshape(stacked.shape[0], -1)
    out = weights.to(device=flat.device, dtype=flat.dtype) @ flat
    return out.reshape((weights.shape[0], *stacked.shape[1:]))


def weighted_average(
    states: Sequence[Mapping[str, torch.Tensor]], weights: Sequence[float], keys: Sequence[str]
) -> dict[str, torch.Tensor]:
    """Σ_j w_j · state_j[key] / Σ_j w_j for each key: one row of a mixing matrix.

    Integer tensors (e.g. BatchNorm's ``num_batches_tracked``) are averaged and rounded.
    """
    w = torch.tensor([float(x) for x in weights], dtype=torch.float64)
    return mix_states(states, (w / w.sum())[None], keys)[0]


def mix_states(
    states: Sequence[Mapping[str, torch.Tensor]], weights: torch.Tensor, keys: Sequence[str]
) -> list[dict[str, torch.Tensor]]:
    """Row i of the result is Σ_j W[i, j] · states[j] for each key: a general mixing matrix
    ``weights`` [m, n] (float64) over n states, giving m mixed states. Per-client server
    aggregation (pFedSim, FedCMD, FedFomo, FedAP) is one such matrix, row i being what client i
    receives; FedAvg is the rank-one case. Integer tensors are mixed in float64 and rounded.

    The weights may live anywhere; the result lives on the states' device. A rank-one mix (an
    average) is :func:`average_states_in_order`, the same sum on every machine and device,
    without stacking the states (1,000 uploads of a 2 MB layer would otherwise take another
    2 GB).
    """
    if not keys:
        return [{} for _ in range(weights.shape[0])]
    device = states[0][keys[0]].device
    w = weights.to(device=device, dtype=torch.float64)
    if w.shape[0] == 1:
        return [average_states_in_order(states, w[0], keys)]
    out: list[dict[str, torch.Tensor]] = [{} for _ in range(w.shape[0])]
    for key in keys:
        tensors = [s[key] for s in states]
        mixed = _mix_block(tensors, w)
        for i in range(w.shape[0]):
            out[i][key] = mixed[i]
    return out


def average_in_order(tensors: Sequence[torch.Tensor], weights: torch.Tensor) -> torch.Tensor:
    """``Σ_j weights[j] · tensors[j]``, accumulated in the order of ``j`` with one rounding per
    product and per sum (``acc = acc + w_j · x_j``), in the tensors' dtype (integers in float64,
    then rounded).

    Exact by construction: each coordinate's result depends only on that coordinate's values,
    not on the tensor's size or layout, the BLAS library, the CPU (MKL on Intel takes other code
    paths than on AMD) or the device — elementwise products and sums are correctly rounded IEEE
    operations everywhere. It gives what the earlier ``weights @ stacked`` gave on the machines
    the recorded results were made on: ``tests/test_recorded_numbers.py`` reruns recorded FedAvg
    rounds (bit for bit when oneDNN's convolutions are held to the same instruction set).
    """
    first = tensors[0]
    exact = first.is_floating_point()
    dtype = first.dtype if exact else torch.float64
    # the weights as 0-dim views, made by one operator (not one indexing per state)
    w = weights.to(device=first.device, dtype=dtype).unbind(0)
    acc = first.to(dtype) * w[0]
    for j in range(1, len(tensors)):
        acc = acc + tensors[j].to(dtype) * w[j]
    return acc if exact else acc.round().to(first.dtype)


def average_states_in_order(
    states: Sequence[Mapping[str, torch.Tensor]], weights: torch.Tensor, keys: Sequence[str]
) -> dict[str, torch.Tensor]:
    """:func:`average_in_order` of every key: the same roundings, with the floating-point tensors
    of one state multiplied and added as one list (``torch._foreach_mul``, ``_foreach_add_``) —
    two operators per state whatever the number of tensors, not two per state and tensor."""
    groups: dict[tuple[torch.dtype, torch.device], list[str]] = {}
    out: dict[str, torch.Tensor] = {}
    for k in keys:
        t = states[0][k]
        if t.is_floating_point():
            groups.setdefault((t.dtype, t.device), []).append(k)
        else:
            out[k] = average_in_order([s[k] for s in states], weights)
    for (dtype, device), group in groups.items():
        if len(states) > 1 and folds(device):
            out.update(zip(group, _fold(states, weights.to(device, dtype), group), strict=True))
            continue
        w = weights.to(device=device, dtype=dtype).unbind(0)
        acc = torch._foreach_mul([states[0][k] for k in group], w[0])
        for j in range(1, len(states)):
            torch._foreach_add_(acc, torch._foreach_mul([states[j][k] for k in group], w[j]))
        out.update(zip(group, acc, strict=True))
    return {k: out[k] for k in keys}


#: device types on which :func:`average_states_in_order` folds the states in one ``index_add_``.
#: CUDA's kernel adds the rows of its source in the index's order under
#: ``torch.use_deterministic_algorithms`` (the engine's ``engine.deterministic``): the loop's bits
#: in 9 of 9 tries on an H200, and with atomics, in no fixed order, without it
#: (``benchmarks/fold_check.py --device cuda``; docs/results/gpu.md, "Fourth lease"). The CPU's
#: kernel adds row after row too, but there the loop is faster (the fold's copy of every upload,
#: ``benchmarks/fold_check.py --time``), so it folds only where a test asks it to.
FOLD_DEVICES: frozenset[str] = frozenset({"cuda"})


def folds(device: torch.device) -> bool:
    """Whether the average on ``device`` is one fold (:data:`FOLD_DEVICES`; on CUDA only under
    deterministic algorithms)."""
    if device.type not in FOLD_DEVICES:
        return False
    return device.type == "cpu" or torch.are_deterministic_algorithms_enabled()


#: bytes of uploads :func:`_fold` stacks at a time (more states are folded chunk after chunk into
#: the same accumulator: the same order, a few more operators, bounded memory)
FOLD_BYTES = 256 * 2**20


def _fold(
    states: Sequence[Mapping[str, torch.Tensor]], w: torch.Tensor, group: Sequence[str]
) -> list[torch.Tensor]:
    """The in-order average of the ``group``'s tensors (one dtype and device) in a number of
    operators that does not depend on the number of states (up to :data:`FOLD_BYTES` of them at
    a time): every state's tensors as one row of a matrix, the rows multiplied by their weights
    at once, then added onto the first row by one ``index_add_`` in their order —
    ``acc = acc + w_j · x_j``, the loop's roundings."""
    first = states[0]
    row_bytes = sum(first[k].numel() * first[k].element_size() for k in group)
    chunk = max(1, FOLD_BYTES // max(1, row_bytes))
    acc: torch.Tensor | None = None
    for lo in range(0, len(states), chunk):
        part = states[lo : lo + chunk]
        n = len(part)
        flat = torch.cat([torch.stack([s[k] for s in part]).reshape(n, -1) for k in group], 1)
        flat.mul_(w[lo : lo + n].view(n, 1))
        if acc is None:
            acc, flat = flat[:1].clone(), flat[1:]
        if len(flat):
            index = torch.zeros(len(flat), dtype=torch.long, device=flat.device)
            acc.index_add_(0, index, flat)
    assert acc is not None
    parts = acc[0].split([first[k].numel() for k in group])
    return [p.view(first[k].shape).clone() for p, k in zip(parts, group, strict=True)]


def _mix_block(tensors: Sequence[torch.Tensor], w: torch.Tensor) -> torch.Tensor:
    stacked = torch.stack(list(tensors))
    if stacked.is_floating_point():
        return mix(stacked, w.to(stacked.dtype))
    return mix(stacked.double(), w).round().to(stacked.dtype)


def normalize_rows(weights: torch.Tensor, how: str = "linear") -> torch.Tensor:
    """Row-stochastic weights from non-negative scores: ``linear`` divides each row by its sum,
    ``softmax`` takes exp then divides (pFedSim's and FedCMD's code). A row of zeros under
    ``linear`` is left at zero (the caller decides what such a client receives)."""
    w = weights.to(torch.float64)
    if how == "softmax":
        e = torch.exp(w)
        return e / e.sum(1, keepdim=True)
    if how != "linear":
        raise ValueError(f"unknown normalisation {how!r}")
    sums = w.sum(1, keepdim=True)
    return torch.where(sums > 0, w / sums.clamp_min(1e-300), torch.zeros_like(w))


def tensor_bytes(tensors: Mapping[str, torch.Tensor]) -> int:
    """Bytes on the wire of a dict of tensors (their raw payload)."""
    return sum(t.numel() * t.element_size() for t in tensors.values())
