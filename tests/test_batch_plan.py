"""A phase's batches drawn up front (:class:`fedpart.engine.batch_plan.BatchPlan`) are the
sequential trainer's batches, read for all clients at once."""

from __future__ import annotations

import pytest
import torch

from fedpart.bench.dispatch import DispatchCounter
from fedpart.engine.batch_plan import BatchPlan, steps_per_epoch
from fedpart.engine.data import ClientData
from fedpart.engine.training import TrainSettings, batch_slices
from fedpart.seeding import torch_generator


class _Data:
    """A pool of 200 labelled samples [1, 2, 2] (each sample's pixels = its pool index) and
    clients of the given sizes over disjoint pool indices."""

    augment = "none"

    def __init__(self, sizes: list[int]) -> None:
        gen = torch.Generator().manual_seed(0)
        order = torch.randperm(200, generator=gen)
        self.x = torch.arange(200, dtype=torch.float32).view(200, 1, 1, 1).expand(200, 1, 2, 2)
        self.y = torch.arange(200) % 10
        self.clients, at = [], 0
        for n in sizes:
            self.clients.append(ClientData(train=order[at : at + n], val=order[:0], test=order[:0]))
            at += n

    def batch(self, index, *, train=False, generator=None):
        return self.x[index] + 0.5, self.y[index]


def _settings(bs: int, drop_last: bool) -> TrainSettings:
    return TrainSettings(
        lr=0.1,
        momentum=0.0,
        weight_decay=0.0,
        batch_size=bs,
        local_epochs=3,
        drop_last=drop_last,
        seed=5,
    )


def _sorted(sizes: list[int], bs: int, drop_last: bool) -> list[int]:
    return sorted(range(len(sizes)), key=lambda i: -steps_per_epoch(sizes[i], bs, drop_last))


@pytest.mark.parametrize("drop_last", [False, True])
def test_the_plan_holds_the_sequential_trainers_batches(drop_last):
    sizes = [23, 7, 40, 16, 3, 31]  # smaller than a batch, whole batches, a ragged last batch
    bs, epochs, rnd, phase = 8, 3, 4, 1
    data = _Data(sizes)
    clients = _sorted(sizes, bs, drop_last)
    settings = _settings(bs, drop_last)
    plan = BatchPlan(data, clients, rnd, phase, epochs, settings)
    for i, c in enumerate(clients):
        train = data.clients[c].train
        want = [
            index
            for e in range(epochs)
            for index in batch_slices(
                sizes[c],
                bs,
                drop_last,
                torch_generator(5, "batches", rnd, c, phase, e),
                of=train,
            )
        ]
        assert plan.totals[i] == len(want)
        for t, index in enumerate(want):
            m = len(index)
            assert plan.lengths(t, i + 1)[i] == m
            assert torch.equal(plan.index[t, i, :m], index)
            assert plan.real[t, i].tolist() == [True] * m + [False] * (bs - m)
        assert not plan.real[len(want) :, i].any()


def test_a_step_reads_every_clients_batch_once_with_zero_padding():
    sizes = [20, 20, 13]  # batch 8: steps 8, 8, 4 / 8, 8, 4 / 8, 5
    data = _Data(sizes)
    plan = BatchPlan(data, [0, 1, 2], 0, 0, 1, _settings(8, False))
    full = plan.gather(0, 3, torch.device("cpu"))
    assert full.w is None and full.lengths == [8, 8, 8] and full.x.shape == (3, 8, 1, 2, 2)
    assert torch.equal(full.x[:, :, 0, 0, 0], plan.index[0].float() + 0.5)
    last = plan.gather(1, 3, torch.device("cpu"))
    assert last.lengths == [8, 8, 5] and last.x.shape[:2] == (3, 8)
    assert last.w is not None and last.w[2].tolist() == [1.0] * 5 + [0.0] * 3
    assert torch.equal(last.x[2, 5:], torch.zeros(3, 1, 2, 2))  # padding as pad_sequence pads
    assert torch.equal(last.y[2, 5:], torch.zeros(3, dtype=torch.long))
    assert torch.equal(last.x[2, :5, 0, 0, 0], plan.index[1, 2, :5].float() + 0.5)
    short = plan.gather(2, 2, torch.device("cpu"))  # the third client has finished
    assert short.lengths == [4, 4] and short.w is None and short.x.shape[:2] == (2, 4)
    wide = plan.gather(2, 2, torch.device("cpu"), width=8)
    assert wide.x.shape[:2] == (2, 8) and wide.w is not None and wide.w.sum() == 8


def test_the_plan_dispatches_the_same_operators_for_more_clients():
    """Only the permutations (one per client and epoch, host draws) grow with the clients."""
    counts = {}
    for n in (3, 12):
        data = _Data([15] * n)
        with DispatchCounter("cpu") as c:
            plan = BatchPlan(data, list(range(n)), 0, 0, 2, _settings(4, False))
            for t in range(plan.totals[0]):
                plan.gather(t, n, torch.device("cpu"))
        counts[n] = c
    assert counts[3].total_ops == counts[12].total_ops
    assert counts[3].total_draws == 6 and counts[12].total_draws == 24


def test_a_plan_needs_clients_with_data():
    with pytest.raises(ValueError, match="training data"):
        BatchPlan(_Data([5, 0]), [0, 1], 0, 0, 1, _settings(4, False))
