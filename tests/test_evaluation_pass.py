"""Evaluation in one pass (``fedpart.engine.evaluation_pass``, the batched backend's) gives the
reference's per-client results: the same correct samples, losses up to float rounding."""

from __future__ import annotations

import pytest
import torch

import fedpart
from fedpart.config import Config
from fedpart.engine.evaluation import evaluate_clients, host_sums
from fedpart.engine.evaluation_pass import (
    FILL,
    Layout,
    Outcomes,
    evaluate_one_pass,
    fewer_passes,
)
from fedpart.engine.simulation import Simulation


def _sim(model: dict, clients: int = 12) -> Simulation:
    cfg = {
        "seed": 3,
        "dataset": {"name": "digits"},
        "partition": {"kind": "dirichlet", "num_clients": clients, "alpha": 0.3, "min_size": 5},
        "model": model,
        "algorithm": {"name": "fedper"},
        "federation": {"rounds": 1},
        "engine": {"eval_batch_size": 32},
    }
    return Simulation(Config.from_dict(cfg))


CNN = {"name": "fedavgcnn", "padding": 2, "width": 4}
BN = {"name": "fedavgcnn", "padding": 2, "width": 4, "norm": "bn"}


def _states(sim: Simulation, own: str) -> list[dict[str, torch.Tensor]]:
    """Per client: ``head`` its own head on the shared body, ``whole`` its own model, ``some``
    its own model for every other client (the rest share the global one), ``none`` the global
    model."""
    base = sim.store.global_state
    head = set(sim.model.head_names)
    g = torch.Generator().manual_seed(0)
    out = []
    for c in range(sim.data.num_clients):
        mine = own == "whole" or (own == "some" and c % 2 == 0)
        state = {}
        for k, v in base.items():
            moved = mine or (own == "head" and sim.model.block_of(k) in head)
            if moved and v.is_floating_point():
                state[k] = v + 0.05 * torch.randn(v.shape, generator=g)
            else:
                state[k] = v
        out.append(state)
    return out


@pytest.mark.parametrize("model", [CNN, BN], ids=["cnn", "batchnorm"])
@pytest.mark.parametrize("own", ["head", "whole", "some", "none"])
def test_one_pass_equals_client_by_client(model, own):
    sim = _sim(model)
    data = sim.data
    index = [data.clients[c].test for c in range(data.num_clients)]
    states = _states(sim, own)
    ref = evaluate_clients(sim.model, states, index, data, 32)
    layout = Layout(index)
    assert len(layout.buckets) > 1  # clients of different sizes: several buckets
    one = evaluate_one_pass(sim.model, states, index, data, 32, layout, whole_models=True)
    assert isinstance(one, Outcomes) and len(one) == len(ref)
    for (ok, loss), (ok1, loss1) in zip(ref, one, strict=True):
        assert torch.equal(ok, ok1)
        torch.testing.assert_close(loss1, loss, rtol=1e-5, atol=1e-6)
    for (c, v), (c1, v1) in zip(host_sums(ref), host_sums(one), strict=True):
        assert c == c1 and v1 == pytest.approx(v, rel=1e-5)


def test_the_layout_holds_every_sample_once_and_pads_little():
    sizes = [40, 3, 17, 9, 40, 1, 25, 12]
    index = []
    start = 0
    for n in sizes:
        index.append(torch.arange(start, start + n))
        start += n
    layout = Layout(index)
    seen = []
    for b in layout.buckets:
        real = int(b.valid.sum())
        assert len(b.members) == 1 or real >= FILL * b.valid.numel()
        for row, i in enumerate(b.members):
            n = sizes[i]
            assert torch.equal(b.index[row, :n], index[i]) and int(b.valid[row].sum()) == n
            seen.append(i)
    assert sorted(seen) == list(range(len(sizes)))


def test_what_one_pass_leaves_to_the_reference():
    sim = _sim(CNN)
    data = sim.data
    index = [data.clients[c].test for c in range(data.num_clients)]
    whole = _states(sim, "whole")
    assert evaluate_one_pass(sim.model, whole, index, data, 32, whole_models=False) is None
    assert evaluate_one_pass(sim.model, _states(sim, "head"), index, data, 32, whole_models=False)
    empty = [*index[:-1], index[-1][:0]]
    assert evaluate_one_pass(sim.model, whole, empty, data, 32, whole_models=True) is None
    # on the CPU whole models go client by client (slower in one pass, measured)
    assert evaluate_one_pass(sim.model, whole, index, data, 4096) is None


def test_whole_models_go_in_one_pass_where_that_dispatches_fewer_operators():
    sizes = [50, 40, 45, 12, 10, 11, 3, 60]
    index = [torch.arange(n) for n in sizes]
    layout = Layout(index)
    layout.concat = layout.concat.to("meta")  # as on a GPU: only the device is read
    assert fewer_passes(layout, 4096, most=100)  # one pass per bucket against one per client
    assert not fewer_passes(layout, 8, most=100)  # 1 sample per client a pass: more passes
    assert not fewer_passes(Layout(index), 4096, most=100)  # the CPU


def test_the_batched_backend_evaluates_in_one_pass_and_keeps_its_layout(tiny_cfg, monkeypatch):
    """Every round's evaluation of all clients goes through one pass on one kept layout; the run's
    accuracies are the sequential backend's."""
    import fedpart.engine.evaluation_pass as ep

    built = []
    monkeypatch.setattr(ep.Layout, "__init__", _counting(ep.Layout.__init__, built))
    cfg = {**tiny_cfg, "algorithm": {"name": "fedper"}, "evaluation": {"every": 1}}
    bat = fedpart.run({**cfg, "engine": {"backend": "batched"}}, write=False)
    rounds = len(bat.metrics)
    assert rounds >= 2 and len(built) == 1  # all clients: one layout for every round
    seq = fedpart.run({**cfg, "engine": {"backend": "sequential"}}, write=False)
    for r1, r2 in zip(seq.metrics, bat.metrics, strict=True):
        assert r1["accuracy"] == pytest.approx(r2["accuracy"], abs=1e-2)


def _counting(init, calls):
    def wrapped(self, indices):
        calls.append(len(indices))
        init(self, indices)

    return wrapped
