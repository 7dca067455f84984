"""Training a server hyper-network: :func:`hypernetwork_step`, the pFedHN rule (Pa3dFL
Eq. 7–8), what one step did (:class:`HyperStep`), and a round's metrics (:func:`hn_metrics`).

:mod:`fedpart.engine.hypernetwork` describes the whole; :mod:`fedpart.engine.hypernetwork_model`
holds the network.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from fedpart.engine.hypernetwork_model import HyperNetwork
from fedpart.models.width import embed_state, index_masks, slice_state
from fedpart.models.width_plan import IndexSets

__all__ = ["LIMIT_TRIES", "HyperStep", "hn_metrics", "hypernetwork_step"]


@dataclasses.dataclass(frozen=True)
class HyperStep:
    """What one :func:`hypernetwork_step` did.

    ``loss``: ``L_HN`` before the step. ``grad_norm``: the gradient's global norm before any
    clipping. ``scale``: the factor the step limit applied to it (1: none). With ``measure``
    (or a limit), how the step taken moved the participants' generated tensors ``Δ_i`` against
    what they asked for, ``u_i = θ_i − prune_i(h(i))`` (a coordinate a client does not hold
    counts for neither; means are over the clients that hold a coordinate):

    - ``gain``: ``⟨Δ̄, ū⟩ / ‖ū‖²``, the step along the clients' mean update (1: the generated
      tensors moved by exactly the mean update, as FedAvg's server step would move a model);
    - ``gain_personal``: ``Σ_i ⟨Δ_i − Δ̄, u_i − ū⟩ / Σ_i ‖u_i − ū‖²``, the step along what each
      client asked for beyond the mean (0: every client is moved alike, nothing is personal);
    - ``move``: ``√(Σ_i ‖Δ_i‖² / Σ_i ‖u_i‖²)``, how far the tensors moved against how far the
      clients moved them.
    """

    loss: float
    grad_norm: float
    scale: float = 1.0
    gain: float | None = None
    gain_personal: float | None = None
    move: float | None = None


def _padded(
    values: Sequence[Mapping[str, Tensor]], index: Sequence[IndexSets] | None, shapes: Mapping
) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """Clients' (possibly pruned) tensors in full shape, zero where not held, and the masks."""
    out: dict[str, list[Tensor]] = {}
    held: dict[str, list[Tensor]] = {}
    for pos, value in enumerate(values):
        sets = index[pos] if index else {}
        zeros = {k: v.new_zeros(shapes[k]) for k, v in value.items()}
        for key, full in embed_state(zeros, value, sets).items():
            out.setdefault(key, []).append(full)
        for key, mask in index_masks(zeros, sets).items():
            held.setdefault(key, []).append(mask)
    return (
        {k: torch.stack(v) for k, v in out.items()},
        {k: torch.stack(v) for k, v in held.items()},
    )


def _gains(
    asked: dict[str, Tensor], moved: dict[str, Tensor], held: dict[str, Tensor]
) -> tuple[Tensor, Tensor, Tensor]:
    """``gain``, ``gain_personal`` and ``move`` of :class:`HyperStep` as 0-d tensors."""
    dot = common = dev_dot = dev_sq = moved_sq = asked_sq = 0
    for key, u in asked.items():
        d, m = moved[key], held[key]
        count = m.sum(0).clamp_min(1)
        u_mean, d_mean = u.sum(0) / count, d.sum(0) / count
        dot = dot + (u_mean * d_mean).sum()
        common = common + u_mean.pow(2).sum()
        u_dev = torch.where(m, u - u_mean, 0.0)
        d_dev = torch.where(m, d - d_mean, 0.0)
        dev_dot = dev_dot + (u_dev * d_dev).sum()
        dev_sq = dev_sq + u_dev.pow(2).sum()
        moved_sq = moved_sq + d.pow(2).sum()
        asked_sq = asked_sq + u.pow(2).sum()
    tiny = torch.finfo(torch.float32).tiny
    return (
        dot / common.clamp_min(tiny),
        dev_dot / dev_sq.clamp_min(tiny),
        (moved_sq / asked_sq.clamp_min(tiny)).sqrt(),
    )


def _pruned(
    out: Mapping[str, Tensor], pos: int, keys: Sequence[str], index: Sequence[IndexSets] | None
) -> dict[str, Tensor]:
    """Client ``pos``'s tensors ``keys`` of a generated batch, pruned to its index sets."""
    mine = {k: out[k][pos] for k in keys}
    return slice_state(mine, index[pos]) if index else mine


#: how many times a limited step is shortened and measured again (a fixed number on an
#: accelerator: the decision stays on the device, so a round reads it back once, whatever the
#: step needed; on the CPU the tries stop at the first that keeps the step, with the same result)
LIMIT_TRIES = 4


def hypernetwork_step(
    hn: HyperNetwork,
    clients: Sequence[int],
    trained: Sequence[Mapping[str, Tensor]],
    index: Sequence[IndexSets] | None,
    lr: float,
    *,
    max_grad_norm: float | None = None,
    max_gain: float | None = None,
    measure: bool = False,
) -> HyperStep:
    """One pFedHN step (Pa3dFL Eq. 7–8): regenerate the clients' tensors with a graph, and move
    the hyper-network's parameters, temperatures and every embedding by ``−lr`` times the
    gradient of ``(1/m) Σ_i ½ Σ_k ‖prune_i(h(i)_k) − θ_i,k‖²`` (``θ`` = ``trained[i]``, fixed).
    Pruned-away entries get no gradient; through the attention, unsampled clients' embeddings
    do.

    ``max_grad_norm``: the gradient is first scaled down to that global norm if it is longer
    (pFedHN's code clips at 50). ``max_gain``: the step is shortened until it moves the
    participants' generated tensors no further than ``max_gain`` times what they asked, both
    along their mean update and in total (:class:`HyperStep`'s ``gain`` and ``move``; 1: never
    further than FedAvg's server step would go): after the step the tensors are generated again
    and the step is scaled by ``max_gain`` over the larger of the two (a tenth if they are not
    finite), up to :data:`LIMIT_TRIES` times. ``measure``: report the gains of the step taken.
    Returns the :class:`HyperStep`; its numbers reach the host in one transfer."""
    if not clients:
        return HyperStep(0.0, 0.0)
    keys = [list(target) for target in trained]
    generated = hn(clients)
    loss = generated[next(iter(generated))].new_zeros(())
    before: list[dict[str, Tensor]] = []
    for pos, target in enumerate(trained):
        pruned = _pruned(generated, pos, keys[pos], index)
        before.append({k: v.detach() for k, v in pruned.items()})
        for key, value in target.items():
            loss = loss + 0.5 * (pruned[key] - value.detach().to(pruned[key].dtype)).pow(2).sum()
    loss = loss / len(clients)
    params = [p for p in hn.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    moves = [(p, g) for p, g in zip(params, grads, strict=True) if g is not None]
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for _, g in moves]))
    tiny = torch.finfo(norm.dtype).tiny
    with torch.no_grad():
        if max_grad_norm is not None:
            # a tensor factor, never a host read: min(1, max / ‖g‖)
            clip = (max_grad_norm / norm.clamp_min(tiny)).clamp(max=1.0)
            moves = [(p, g * clip) for p, g in moves]
        for p, g in moves:
            p.sub_(g, alpha=lr)
        scale = norm.new_ones(())
        values = [loss.detach(), norm]
        if max_gain is None and not measure:
            return HyperStep(*torch.stack([*values, scale]).double().cpu().tolist())
        asked, held = _padded(
            [
                {k: v.detach().to(before[pos][k].dtype) - before[pos][k] for k, v in t.items()}
                for pos, t in enumerate(trained)
            ],
            index,
            hn.shapes,
        )

        def gains() -> tuple[Tensor, Tensor, Tensor]:
            after = hn(clients)
            moved = [
                {k: v - before[pos][k] for k, v in _pruned(after, pos, keys[pos], index).items()}
                for pos in range(len(clients))
            ]
            return _gains(asked, _padded(moved, index, hn.shapes)[0], held)

        gain, personal, move = gains()
        if max_gain is not None:
            for _ in range(LIMIT_TRIES):
                excess = torch.maximum(gain, move) / max_gain
                excess = torch.where(torch.isfinite(excess), excess, torch.full_like(excess, 10.0))
                if excess.device.type == "cpu" and bool(excess <= 1.0):
                    # where a read is free: a try that keeps the step changes nothing (the
                    # parameters move by zero and the gains are measured again the same)
                    break
                new = torch.where(excess > 1.0, scale / excess.clamp_min(tiny), scale)
                for p, g in moves:  # from −scale·lr·g to −new·lr·g
                    p.add_(g * (scale - new), alpha=lr)
                scale = new
                gain, personal, move = gains()
        values += [scale, gain, personal, move]
    host = torch.stack([v.reshape(()).double() for v in values]).cpu().tolist()
    if not measure:
        host = host[:3]
    return HyperStep(*host)


def hn_metrics(hn: HyperNetwork, step: HyperStep) -> dict[str, Any]:
    """A round's ``metrics.jsonl`` entries of a hyper-network method: the step's gradient norm
    and gains (:class:`HyperStep`) and :meth:`HyperNetwork.diagnostics`, as ``hn_*`` keys
    (per-layer values as ``{layer: value}``)."""
    row: dict[str, Any] = {"hn_grad_norm": step.grad_norm, "hn_step_scale": step.scale}
    if step.gain is not None:
        row["hn_gain"] = step.gain
        row["hn_gain_personal"] = step.gain_personal
        row["hn_move"] = step.move
    row.update({f"hn_{k}": v for k, v in hn.diagnostics().items()})
    return row
