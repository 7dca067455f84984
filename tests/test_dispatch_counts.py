"""The dispatch counter of ``fedpart bench`` (``fedpart.bench.dispatch``) counts exactly, and what
it measures of the batched backend: operators and host synchronisations per round against the
clients per round (issue 41)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedpart.bench.cli import main
from fedpart.bench.dispatch import DispatchCounter
from fedpart.bench.measure import measure_interleaved
from fedpart.config import load_config
from fedpart.engine import mixing
from fedpart.engine.simulation import Simulation
from markdown_tables import tables as read_tables

QUICKSTART = Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml"


# ----------------------------------------------------------------------------- the counter
def test_known_snippets_are_counted_exactly():
    x = torch.arange(6.0)
    with DispatchCounter() as c:
        x.sum().item()
    assert c.ops == {"aten.sum.default": 1, "aten._local_scalar_dense.default": 1}
    assert c.total_syncs == 1 and c.syncs == {"scalar": 1}

    with DispatchCounter() as c:
        bool(x[0] > 1)
        int(x[1])
        float(x[2])
    assert c.syncs == {"scalar": 3}
    assert c.ops["aten._local_scalar_dense.default"] == 3

    # .tolist() and .numpy() of a CPU tensor never reach the dispatcher: seen as host reads
    with DispatchCounter() as c:
        x.tolist()
        x.numpy()
        np.asarray(x)  # __array__, which calls numpy(): one read
    assert c.syncs == {"host read": 3}
    assert c.sync_ops == {
        ("host read", "tolist"): 1,
        ("host read", "numpy"): 1,
        ("host read", "__array__"): 1,
    }

    # operators whose output size depends on values
    with DispatchCounter() as c:
        x[x > 2]
        x.nonzero()
    assert c.syncs == {"data-dependent shape": 2}

    # the operators after torch.func's transforms: a vmap-ed product is one batched product
    a, v, w, img = (
        torch.randn(5, 3, 3),
        torch.randn(5, 3),
        torch.randn(4, 1, 3, 3),
        torch.ones(2, 1, 8, 8),
    )
    with DispatchCounter() as c:
        F.conv2d(img, w)
        torch.func.vmap(torch.mv)(a, v)
    assert c.ops["aten.convolution.default"] == 1 and c.ops["aten.bmm.default"] == 1
    assert "aten.mv.default" not in c.ops and c.total_syncs == 0

    # what the CPU cannot see: .cpu() of a CPU tensor dispatches nothing
    with DispatchCounter() as c:
        x.cpu()
        x.to("cpu")
    assert c.total_ops == 0 and c.total_syncs == 0
    # and nothing is counted after the block
    x.sum().item()
    assert c.total_ops == 0


def test_reads_of_a_device_tensor_are_copies_to_the_host():
    """A meta tensor stands in for a GPU's: ``.cpu()`` and ``copy_`` into host memory are copies
    to the host, ``.tolist()`` one read (not also its copy inside), ``.item()`` a scalar read;
    with a GPU ``device``, reads of host tensors are listed, not counted."""
    t = torch.ones(3, device="meta")
    with DispatchCounter("cuda") as c:
        for read in (t.cpu, t.tolist, lambda: torch.empty(3).copy_(t), lambda: t.sum().item()):
            with pytest.raises((NotImplementedError, RuntimeError)):  # meta has no values
                read()
        torch.arange(3).tolist()  # host data on a GPU run
    assert c.sync_ops == {
        ("to host", "aten._to_copy"): 1,
        ("to host", "tolist"): 1,
        ("to host", "aten.copy_"): 1,
        ("scalar", "aten._local_scalar_dense"): 1,
        ("host read", "tolist"): 1,
    }
    assert c.syncs == {"to host": 3, "scalar": 1}


def test_sites_name_the_source_line():
    here = str(Path(__file__).resolve().parent)
    with DispatchCounter(sites=here) as c:
        torch.ones(2).sum().item()
    (site,) = {s for s, _ in c.sites}
    assert site.startswith("test_dispatch_counts.py:")
    assert Counter(op for _, op in c.sites.elements()) == {
        "aten.ones": 1,
        "aten.sum": 1,
        "aten._local_scalar_dense": 1,
        "sync: scalar": 1,
    }


# ----------------------------------------------------------------------------- the engine
#: the quick start's recipe over 100 clients of 16 samples (12 or 13 to train on: two steps of
#: batch 10 each), so that a round's steps are the same whatever its clients
EQUAL_CLIENTS = [
    "partition.kind=iid",
    "partition.num_clients=100",
    "partition.pool_size=1600",
    "partition.min_size=0",
    "federation.rounds=2",
    "output.checkpoint_every=0",
]
#: the arithmetic of a training step: the batched backend dispatches it once for all clients
STEP_KERNELS = (
    "aten.convolution.default",
    "aten.convolution_backward.default",
    "aten.max_pool2d_with_indices.default",
    "aten.max_pool2d_with_indices_backward.default",
    "aten._fused_sgd_.default",
)


def _counted(backend: str, per_round: int) -> dict[str, DispatchCounter]:
    """Round 1 (after a warm-up round and evaluation) and the evaluation after it, counted."""
    cfg = load_config(
        QUICKSTART,
        [*EQUAL_CLIENTS, f"engine.backend={backend}", f"federation.join_ratio={per_round / 100}"],
    )
    torch.set_num_threads(1)
    sim = Simulation(cfg)
    sim.run_round(0)
    sim.evaluate()
    with DispatchCounter(sim.device) as train:
        assert sim.run_round(1)["participants"] == per_round
    with DispatchCounter(sim.device) as evaluation:
        sim.evaluate()
    return {"train": train, "eval": evaluation}


@pytest.fixture(scope="module")
def batched() -> dict[int, dict[str, DispatchCounter]]:
    threads = torch.get_num_threads()
    try:
        return {n: _counted("batched", n) for n in (10, 50)}
    finally:
        torch.set_num_threads(threads)


def _ops(counts: dict[str, DispatchCounter]) -> int:
    return sum(c.total_ops for c in counts.values())


def _syncs(counts: dict[str, DispatchCounter]) -> int:
    return sum(c.total_syncs for c in counts.values())


def test_batched_syncs_per_round_are_a_constant(batched):
    """Training reads every step's losses back once per round, evaluation the per-client sums
    once: two synchronisations per round, with 10 clients as with 50."""
    assert _syncs(batched[10]) == _syncs(batched[50]) == 2
    assert batched[50]["train"].sync_ops == {("host read", "tolist"): 1}
    assert batched[50]["eval"].sync_ops == {("host read", "tolist"): 1}


def test_batched_step_arithmetic_does_not_grow_with_the_clients(batched):
    """The convolutions, pooling and SGD update of a round are dispatched once per step for
    all clients: the same counts with 10 clients per round as with 50."""
    ten, fifty = batched[10]["train"].ops, batched[50]["train"].ops
    for name in STEP_KERNELS:
        assert ten[name] == fifty[name] > 0, name


def test_batched_growth_per_client_is_the_in_order_average(batched):
    """A batched FedAvg round of the quick start (100 equal clients) costs 2 operators per added
    client: the in-order average's product and sum of that client's tensors (one
    ``_foreach_mul`` and one ``_foreach_add_`` over all of them, exact by construction). The
    batches of a phase come from one index tensor (:class:`~fedpart.engine.batch_plan.
    BatchPlan`), the trained states are rows of the stacked tensors, every client is evaluated
    in one pass. Before: 63 operators per client, then 38; 916 and 2,436 a round at 10 and 50
    clients (now 595 and 675)."""
    assert _ops(batched[50]) - _ops(batched[10]) == 2 * 40
    ten, fifty = batched[10]["train"].ops, batched[50]["train"].ops
    assert fifty["aten._foreach_mul.Tensor"] - ten["aten._foreach_mul.Tensor"] == 40
    assert fifty["aten._foreach_add_.List"] - ten["aten._foreach_add_.List"] == 40


@pytest.fixture(scope="module")
def folded() -> dict[int, dict[str, DispatchCounter]]:
    """The same rounds with the average folded as on a GPU under ``engine.deterministic``
    (:data:`fedpart.engine.mixing.FOLD_DEVICES`; the CPU's ``index_add_`` adds in the same
    order, so the numbers are the loop's)."""
    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mixing, "FOLD_DEVICES", frozenset({"cpu", "cuda"}))
        try:
            return {n: _counted("batched", n) for n in (10, 50)}
        finally:
            torch.set_num_threads(threads)


def test_batched_ops_per_round_do_not_grow_with_the_clients(folded):
    """With the average folded (CUDA's path under the engine's deterministic switches), a
    batched FedAvg round dispatches as many operators with 50 clients as with 10: the batches
    from one index tensor, the states as rows of the stacked tensors, the evaluation in one pass
    and the average in one ``index_add_``; the syncs stay 2."""
    assert _ops(folded[10]) == _ops(folded[50])
    assert _syncs(folded[10]) == _syncs(folded[50]) == 2
    assert folded[50]["train"].ops["aten.index_add_.default"] == 1


def test_batched_host_draws_are_one_permutation_per_client_and_epoch(batched):
    """What stays per client is each client's batch order, drawn on the host from its own
    seeded stream (the numbers depend on it): one permutation per client (one epoch), counted
    apart from the round's operators."""
    for n in (10, 50):
        assert batched[n]["train"].draws == {"aten.randperm.generator": n}
        assert batched[n]["eval"].total_draws == 0


# ----------------------------------------------------------------------------- fedpart bench
def test_bench_counts_one_extra_untimed_round():
    """After the timed rounds, each variant runs the last round's index once more under the
    counter; the timed rows and the accuracy are the timed rounds' own. A variant whose work runs
    in worker processes is not counted."""
    calls: list[tuple[str, str, int]] = []

    class Fake:
        def __init__(self, backend: str) -> None:
            self.backend = backend

        def train_round(self, rnd: int) -> int:
            calls.append((self.backend, "train", rnd))
            torch.ones(2).sum().item()  # 3 operators, 1 synchronisation
            return 10

        def evaluate(self) -> dict[str, float]:
            calls.append((self.backend, "eval", -1))
            return {"accuracy": 0.5}

    plan = [(name, lambda name=name: Fake(name)) for name in ("sequential", "processes")]
    results = measure_interleaved(plan, repeats=2, count=True)
    trained = [(name, rnd) for name, kind, rnd in calls if kind == "train"]
    assert trained == [
        ("sequential", 0),  # set-up and warm-up
        ("processes", 0),
        ("sequential", 1),  # the timed rounds, interleaved
        ("processes", 1),
        ("processes", 2),
        ("sequential", 2),
        ("sequential", 2),  # counted: the last round's index again; not the worker processes
    ]
    assert calls[-1] == ("sequential", "eval", -1)
    seq, proc = results
    assert [r["round"] for r in seq.rounds] == [1, 2]
    assert (seq.ops_per_round, seq.syncs_per_round) == (3, 1)
    assert (proc.ops_per_round, proc.syncs_per_round) == (None, None)
    # without count (the default), nothing more runs
    calls.clear()
    (plain,) = measure_interleaved(plan[:1], repeats=1)
    assert [c[1] for c in calls] == ["train", "eval", "train", "eval"]
    assert plain.ops_per_round is None


def test_bench_report_has_the_count_columns(tmp_path):
    out = tmp_path / "bench.md"
    argv = ["--dataset", "digits", "--clients", "6", "--min-size", "10", "--repeats", "1"]
    argv += ["--workloads", "fedavg", "--variants", "sequential,batched,ceiling"]
    assert main([*argv, "--out", str(out)]) == 0
    report = out.read_text()
    rows = {r["variant"]: r for r in read_tables(report)["fedavg"]}
    for variant in ("sequential", "batched", "ceiling"):
        assert int(rows[variant]["ops/round"].replace(",", "")) > 0
    # evaluation reads its sums back twice; the ceiling trains without reading anything
    assert int(rows["batched"]["syncs/round"]) >= 2
    assert rows["ceiling"]["syncs/round"] == "0"
    assert "*ops/round*, *syncs/round*" in report
    assert main([*argv, "--counts", "false", "--out", str(out)]) == 0
    rows = {r["variant"]: r for r in read_tables(out.read_text())["fedavg"]}
    assert {r["ops/round"] for r in rows.values()} == {"—"}
