"""Every client's batches of one phase, drawn up front: the batched backends' batch indices.

A group of clients trains one phase step by step together (:mod:`fedpart.engine.batched`). The
batches are those of the sequential trainer (:func:`~fedpart.engine.training.train_client`):
per client and epoch, the permutation ``randperm(n, generator=torch_generator(seed, "batches",
rnd, client, phase, epoch))`` of its training positions, cut into batches by
:func:`~fedpart.engine.training.batch_slices`. Those draws stay one per client and epoch (the
numbers depend on those streams; :func:`fedpart.seeding.host_draws` marks them). Everything
after them is a fixed number of operators whatever the clients:

* :class:`BatchPlan` turns the permutations into one ``[steps, clients, batch_size]`` tensor of
  pool indices (and a mask of the real entries) with a few tensor operations, once per phase,
  on the data's device;
* :meth:`BatchPlan.gather` reads step ``t``'s batches of the clients still training (a prefix,
  the clients being ordered longest first) as one indexed read of the pool and one preparation:
  ``x [active, L, ...]``, ``y [active, L]``, with ``L`` the step's longest batch (or a given
  width) and, when the batches differ in length, their padding set to zero (as
  ``pad_sequence`` pads) and a weight per sample (1 real, 0 padding).

The values are those the sequential trainer reads: the same pool indices, each sample prepared
on its own (normalisation is per sample). With augmentation each client's batch is prepared with
its own generator, as the sequential trainer does, so that step reads client by client.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

from fedpart.engine.data import FederatedData
from fedpart.engine.training import TrainSettings
from fedpart.seeding import host_draws, torch_generator

__all__ = ["BatchPlan", "StepBatch", "samples_per_epoch", "steps_per_epoch"]


def steps_per_epoch(n: int, batch_size: int, drop_last: bool) -> int:
    """The number of batches :func:`~fedpart.engine.training.batch_slices` makes of ``n``
    samples."""
    if n == 0:
        return 0
    if drop_last and n >= batch_size:
        return n // batch_size
    return -(-n // batch_size)


def samples_per_epoch(n: int, batch_size: int, drop_last: bool) -> int:
    """The number of samples :func:`~fedpart.engine.training.batch_slices` uses of ``n``
    samples in one epoch."""
    if drop_last and n >= batch_size:
        return (n // batch_size) * batch_size
    return n


@dataclass
class StepBatch:
    """One step's batches of the active clients: ``x [active, L, ...]``, ``y [active, L]``,
    ``w [active, L]`` (1 real sample, 0 padding; ``None`` when every batch has ``L`` samples)
    and each client's batch length."""

    x: Tensor
    y: Tensor
    w: Tensor | None
    lengths: list[int]


class BatchPlan:
    """The batches of ``clients`` (every one with data, ordered by steps per epoch, longest
    first) in one phase of ``epochs`` epochs, drawn as the sequential trainer draws them."""

    def __init__(
        self,
        data: FederatedData,
        clients: list[int],
        rnd: int,
        phase_no: int,
        epochs: int,
        settings: TrainSettings,
    ) -> None:
        bs, drop_last, seed = settings.batch_size, settings.drop_last, settings.seed
        self.data, self.clients, self.batch_size = data, clients, bs
        self.rnd, self.phase_no, self.seed = rnd, phase_no, seed
        sizes = [data.clients[c].num_train for c in clients]
        self.per_epoch = [steps_per_epoch(n, bs, drop_last) for n in sizes]
        self.used = [samples_per_epoch(n, bs, drop_last) for n in sizes]
        self.totals = [epochs * s for s in self.per_epoch]
        if not clients or min(sizes) == 0:
            raise ValueError("a batch plan needs clients that all have training data")
        with host_draws():  # one permutation per client and epoch, from its own stream
            perms = [
                torch.randperm(n, generator=torch_generator(seed, "batches", rnd, c, phase_no, e))
                for c, n in zip(clients, sizes, strict=True)
                for e in range(epochs)
            ]
        # cell (step t, client i, slot b) is position k·bs + b of epoch t // s_i's permutation,
        # k = t mod s_i, real where t < T_i and the position is below the samples used
        host = dict(dtype=torch.long)
        n = torch.tensor(sizes, **host)[None, :, None]
        s = torch.tensor(self.per_epoch, **host)[None, :, None]
        used = torch.tensor(self.used, **host)[None, :, None]
        total = torch.tensor(self.totals, **host)[None, :, None]
        perm_at = torch.tensor([0, *_cumsum([epochs * m for m in sizes])[:-1]], **host)
        pool_at = torch.tensor([0, *_cumsum(sizes)[:-1]], **host)
        t = torch.arange(self.totals[0], **host)[:, None, None]
        b = torch.arange(bs, **host)[None, None, :]
        epoch = t // s
        pos = (t - epoch * s) * bs + b
        real = (t < total) & (pos < used)
        flat = torch.where(real, perm_at[None, :, None] + epoch * n + pos, 0)
        at = torch.where(real, pool_at[None, :, None] + torch.cat(perms)[flat], 0)
        train = torch.cat([data.clients[c].train for c in clients])
        #: [steps, clients, batch_size] pool indices (0 where padding) and the real cells
        self.index = train[at.to(train.device)]
        self.real = real.to(train.device)
        self._augment: dict[int, tuple[int, torch.Generator]] = {}

    def lengths(self, t: int, active: int) -> list[int]:
        """The batch lengths of step ``t`` of the first ``active`` clients."""
        bs = self.batch_size
        return [min(bs, self.used[i] - (t % self.per_epoch[i]) * bs) for i in range(active)]

    def gather(
        self, t: int, active: int, device: torch.device, width: int | None = None
    ) -> StepBatch:
        """Step ``t``'s batches of the first ``active`` clients on ``device``, ``width`` samples
        wide (default: the step's longest batch)."""
        lengths = self.lengths(t, active)
        wide = width or max(lengths)
        ragged = min(lengths) != wide
        if self.data.augment != "none":
            return self._gather_augmented(t, lengths, wide, device)
        x, y = self.data.batch(self.index[t, :active, :wide].reshape(-1), train=True)
        x = x.to(device).view(active, wide, *x.shape[1:])
        y = y.to(device).view(active, wide)
        if not ragged:
            return StepBatch(x, y, None, lengths)
        real = self.real[t, :active, :wide].to(device)
        x = torch.where(real.view(active, wide, *[1] * (x.dim() - 2)), x, 0.0)
        return StepBatch(x, torch.where(real, y, 0), real.to(x.dtype), lengths)

    def _gather_augmented(
        self, t: int, lengths: list[int], wide: int, device: torch.device
    ) -> StepBatch:
        """Each client's batch prepared with its epoch's augmentation generator (drawn from in
        the client's step order, as the sequential trainer does), padded to ``wide``."""
        xs, ys = [], []
        for i, m in enumerate(lengths):
            epoch = t // self.per_epoch[i]
            if self._augment.get(i, (-1,))[0] != epoch:
                keys = (self.rnd, self.clients[i], self.phase_no, epoch)
                self._augment[i] = (epoch, torch_generator(self.seed, "augment", *keys))
            x, y = self.data.batch(self.index[t, i, :m], train=True, generator=self._augment[i][1])
            xs.append(x.to(device))
            ys.append(y.to(device))
        if min(lengths) == wide:
            return StepBatch(torch.stack(xs), torch.stack(ys), None, lengths)
        x = pad_sequence(xs + [xs[0].new_zeros(wide, *xs[0].shape[1:])], batch_first=True)[:-1]
        y = pad_sequence(ys + [ys[0].new_zeros(wide)], batch_first=True)[:-1]
        w = pad_sequence([x.new_ones(m) for m in lengths] + [x.new_zeros(wide)], batch_first=True)
        return StepBatch(x, y, w[:-1], lengths)


def _cumsum(values: list[int]) -> list[int]:
    out, acc = [], 0
    for v in values:
        acc += v
        out.append(acc)
    return out
