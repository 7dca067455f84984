"""Evaluation in one pass: every client's personalised model on its own samples as one batched
computation, not client by client (the batched backend's evaluation).

:func:`evaluation.evaluate_clients` (the reference) already shares one body pass among clients
whose body tensors are the same objects; it then applies each client's head in its own call,
and a method whose clients all differ in their bodies (Ditto, Local-Only, pFedMe, …) runs one
forward per client. Here the clients' samples are laid out as a padded ``[G, N]`` matrix of pool
indices (``N`` the largest client's count) and the per-client tensors are stacked, so that

- a shared body's output is scattered into that layout and every head applied at once
  (``vmap`` over the stacked heads), and
- distinct bodies run as ``vmap`` over the stacked whole models, ``⌈eval_batch_size / G⌉``
  samples of every client per pass;

the per-client sums are then masked sums over the rows (:class:`Outcomes`), read back to the
host together. The arithmetic is the reference's, batched: the numbers agree with it up to float
rounding (``tests/test_evaluation_pass.py``). Models that differ between clients (capacity-aware
methods) and clients without samples go through the reference.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch.func import vmap

from fedpart.engine.data import FederatedData
from fedpart.engine.functional import classify, features
from fedpart.models import BlockModel

#: the most bytes of clients' stacked models evaluated together where their bodies differ
STACK_BYTES = 256 * 2**20
#: a bucket's samples over its padded cells, at least (clients of similar sizes together)
FILL = 0.8


class Bucket:
    """Clients of similar sample counts, padded to the largest of them: ``members`` (positions in
    the evaluated list), ``rows`` (``[g, n]`` positions in the concatenation of every client's
    indices; padding repeats the member's first), ``index`` (the pool indices there) and
    ``valid``."""

    def __init__(self, members: list[int], sizes: list[int], offsets: list[int], device) -> None:
        n = sizes[members[0]]
        rows, valid = [], []
        for i in members:
            own = list(range(offsets[i], offsets[i] + sizes[i]))
            rows.append(own + [offsets[i]] * (n - sizes[i]))
            valid.append([True] * sizes[i] + [False] * (n - sizes[i]))
        # built on the host: no read-back of a device tensor's size
        self.members = members
        self.rows = torch.tensor(rows, device=device)
        self.valid = torch.tensor(valid, device=device)
        self.index: torch.Tensor


class Layout:
    """Every client's samples in buckets of clients of similar counts (sorted by count, a new
    bucket where padding would make up more than ``1 − FILL`` of it): the padded ``[g, n]``
    blocks the batched computations run on, and where client ``i``'s row is."""

    def __init__(self, indices: Sequence[torch.Tensor]) -> None:
        self.sizes = [int(i.numel()) for i in indices]
        offsets = [0]
        for n in self.sizes:
            offsets.append(offsets[-1] + n)
        device = indices[0].device
        self.concat = torch.cat(list(indices))
        groups: list[list[int]] = []
        filled = 0
        for i in sorted(range(len(self.sizes)), key=lambda i: -self.sizes[i]):
            top = self.sizes[groups[-1][0]] if groups else 0
            if not groups or filled + self.sizes[i] < FILL * (len(groups[-1]) + 1) * top:
                groups.append([])
                filled = 0
            groups[-1].append(i)
            filled += self.sizes[i]
        self.buckets = [Bucket(m, self.sizes, offsets, device) for m in groups]
        for b in self.buckets:
            b.index = self.concat[b.rows]
        #: client i's (bucket, row)
        self.where = {
            i: (k, r) for k, b in enumerate(self.buckets) for r, i in enumerate(b.members)
        }
        #: client order from the buckets' rows concatenated
        order = [i for b in self.buckets for i in b.members]
        inverse = [0] * len(order)
        for pos, i in enumerate(order):
            inverse[i] = pos
        self.inverse = torch.tensor(inverse, device=device)


class Outcomes(Sequence):
    """Per-client (correct, loss) held bucket by bucket; ``outcomes[i]`` is client ``i``'s pair
    (views), :meth:`sums` every client's number correct and loss sum in one read-back."""

    def __init__(self, parts: list[tuple[torch.Tensor, torch.Tensor]], layout: Layout) -> None:
        self.parts, self.layout = parts, layout

    def __len__(self) -> int:
        return len(self.layout.sizes)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        if not 0 <= i < len(self):
            raise IndexError(i)
        k, r = self.layout.where[i]
        n = self.layout.sizes[i]
        correct, loss = self.parts[k]
        return correct[r, :n], loss[r, :n]

    def sums(self) -> list[tuple[float, float]]:
        counts, losses = [], []
        for (correct, loss), b in zip(self.parts, self.layout.buckets, strict=True):
            counts.append((correct & b.valid).sum(1, dtype=torch.float64))
            losses.append(torch.where(b.valid, loss, 0.0).sum(1, dtype=torch.float64))
        both = torch.stack([torch.cat(counts), torch.cat(losses)], 1)[self.layout.inverse]
        return [(float(c), float(v)) for c, v in both.tolist()]


#: operators of a forward pass ``vmap``-ed over stacked models against a plain one (FedAvgCNN,
#: measured by ``benchmarks/evaluation_pass.py``: 75 against 40)
VMAP_PASS_COST = 2


def _chunks(members: list[int], most: int) -> list[list[int]]:
    return [members[i : i + most] for i in range(0, len(members), most)]


def fewer_passes(layout: Layout, batch_size: int, most: int) -> bool:
    """Whether to evaluate whole models in one pass per bucket: on a GPU, where it dispatches
    fewer operators than client by client — its forward passes, each :data:`VMAP_PASS_COST`
    times a plain one's, against one pass per ``batch_size`` samples of each client (100 MNIST
    clients of Dirichlet 0.1 on CUDA's evaluation batch of 4,096: 11 passes against 100); never
    on the CPU, where the grouped convolutions of the ``vmap`` cost more time than the
    operators save (``benchmarks/evaluation_pass.py`` on a 2-core AMD EPYC: 1.25 s client by
    client against 6.14 s in one pass at a batch of 4,096, 1.21 against 3.08 at 256)."""
    if layout.concat.device.type == "cpu":
        return False
    ours, reference = pass_counts(layout, batch_size, most)
    return VMAP_PASS_COST * ours < reference


def pass_counts(layout: Layout, batch_size: int, most: int) -> tuple[int, int]:
    """(forward passes of whole models in one pass per bucket, at most ``most`` models stacked;
    forward passes client by client) at ``batch_size`` samples per pass."""
    ours = sum(
        -(-b.index.shape[1] // max(1, batch_size // len(chunk)))
        for b in layout.buckets
        for chunk in _chunks(b.members, most)
    )
    return ours, sum(-(-n // batch_size) for n in layout.sizes)


def _stack(
    states: Sequence[dict[str, torch.Tensor]], keys: Sequence[str]
) -> dict[str, torch.Tensor]:
    return {k: torch.stack([s[k] for s in states]) for k in keys}


def _score(logits: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(correct, loss) of ``[g, n, K]`` logits against ``[g, n]`` labels."""
    g, n, k = logits.shape
    loss = F.cross_entropy(logits.reshape(g * n, k), y.reshape(-1), reduction="none")
    return logits.argmax(2) == y, loss.view(g, n)


@torch.no_grad()
def evaluate_one_pass(
    model: BlockModel,
    states: Sequence[dict[str, torch.Tensor]],
    indices: Sequence[torch.Tensor],
    data: FederatedData,
    batch_size: int,
    layout: Layout | None = None,
    whole_models: bool | None = None,
) -> Outcomes | None:
    """Every client's (correct, loss) on its samples in one batched computation per bucket, or
    ``None`` where the reference must do it: a client without samples, or clients whose bodies
    differ unless ``whole_models`` (``None``: where :func:`fewer_passes` says so)."""
    if not states or any(int(i.numel()) == 0 for i in indices):
        return None
    model.eval()
    head = set(model.head_names)
    body_keys = [k for k in states[0] if model.block_of(k) not in head]
    head_keys = [k for k in states[0] if model.block_of(k) in head]
    layout = layout or Layout(indices)
    parts = []
    if len({tuple(id(s[k]) for k in body_keys) for s in states}) == 1:
        # one body pass over every client's samples, then each bucket's heads at once
        concat = layout.concat
        z = torch.cat(
            [
                features(model, states[0], data.batch(concat[s : s + batch_size])[0])
                for s in range(0, concat.numel(), batch_size)
            ]
        )
        if len({tuple(id(s[k]) for k in head_keys) for s in states}) == 1:  # one model
            logits = classify(model, states[0], z)
            for b in layout.buckets:
                parts.append(_score(logits[b.rows], data.y[b.index]))
            return Outcomes(parts, layout)
        for b in layout.buckets:
            heads = _stack([states[i] for i in b.members], head_keys)
            with model.conv_layout(channels_last=False):  # vmap cannot query memory formats
                logits = vmap(lambda h, zi: classify(model, h, zi))(heads, z[b.rows])
            parts.append(_score(logits, data.y[b.index]))
        return Outcomes(parts, layout)
    # every client's whole model, stacked (clients sharing a body too: a copy each), at most
    # STACK_BYTES of them at a time, ⌈batch_size / g⌉ samples of each per pass
    size = sum(t.numel() * t.element_size() for t in states[0].values())
    most = max(1, STACK_BYTES // max(1, size))
    if whole_models is False or (
        whole_models is None and not fewer_passes(layout, batch_size, most)
    ):
        return None

    def forward(s: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        return classify(model, s, features(model, s, x))

    for b in layout.buckets:
        chunks, first = [], 0
        for members in _chunks(b.members, most):
            whole = _stack([states[i] for i in members], list(states[0]))
            index = b.index[first : first + len(members)]
            first += len(members)
            g, n = index.shape
            step = max(1, batch_size // g)
            cols = []
            for start in range(0, n, step):
                x, _ = data.batch(index[:, start : start + step].reshape(-1))
                with model.conv_layout(channels_last=False):
                    cols.append(vmap(forward)(whole, x.view(g, -1, *x.shape[1:])))
            chunks.append(torch.cat(cols, 1))
        parts.append(_score(torch.cat(chunks), data.y[b.index]))
    return Outcomes(parts, layout)
