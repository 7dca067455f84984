"""The capacity baselines of Pa3dFL: Fjord, FLANC, TailorFL, pFedGate, and ``fedpart cost``."""

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from fedpart.cli import main
from fedpart.config import Config
from fedpart.engine.mixing import tensor_bytes
from fedpart.engine.simulation import Simulation
from fedpart.models.width_plan import kept_count
from resume_check import assert_resume_bit_identical, run_quickstart_uniform

QUICKSTART = Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml"


def _cfg(tiny_cfg, algorithm, rounds=1, options=None, **federation):
    fed = {**tiny_cfg["federation"], "rounds": rounds, "capacity": "uniform", **federation}
    return {**tiny_cfg, "algorithm": {"name": algorithm, **(options or {})}, "federation": fed}


def _sim(tiny_cfg, algorithm, **kw):
    return Simulation(Config.from_dict(_cfg(tiny_cfg, algorithm, **kw)))


# ------------------------------------------------------------------------------ Fjord
def test_fjord_widths_never_exceed_the_clients_and_lie_on_the_grid(tiny_cfg):
    sim = _sim(tiny_cfg, "fjord")
    algo = sim.algorithm
    grid = {k / 16 for k in range(1, 17)}
    for client in range(6):
        p_i = algo.width(client)
        sim.train(0, client, algo.start_state(0, client))
        assert algo.sampled, "one width per local step"
        assert all(p <= p_i + 1e-12 and p in grid for p in algo.sampled)
    # a wide client draws several widths over its steps
    wide = max(range(6), key=algo.width)
    sim.train(1, wide, algo.start_state(1, wide))
    assert len(set(algo.sampled)) > 1


def test_fjord_distillation_vanishes_at_the_largest_width(tiny_cfg):
    from fedpart.algorithms.fjord import distillation, ordered_dropout_loss

    sim = _sim(tiny_cfg, "fjord")
    algo = sim.algorithm
    logits = torch.randn(5, 10)
    assert float(distillation(logits, logits, 2.0)) == pytest.approx(0.0, abs=1e-7)
    assert float(distillation(logits, torch.randn(5, 10), 2.0)) > 0
    client = max(range(6), key=algo.width)
    p_i = algo.width(client)
    model = algo.model_for(client)
    state = algo.start_state(0, client)
    x = torch.randn(4, 64)
    y = torch.tensor([0, 1, 2, 3])
    draws = torch.Generator().manual_seed(0)
    loss = ordered_dropout_loss(algo, p_i, [p_i], draws, model, state, x, y)
    from torch.func import functional_call

    assert torch.equal(loss, F.cross_entropy(functional_call(model, state, (x,)), y))


@pytest.mark.parametrize("train_teacher", [True, False])
def test_fjord_trains_the_widest_submodel_at_every_step(tiny_cfg, train_teacher):
    """In-place distillation: a step at a drawn width ``p < p_i`` also takes the widest
    submodel's CE step, so coordinates outside the width-``p`` prefix (only the teacher uses
    them) get a gradient. Without it (``train_teacher=false``, Fjord before issue 22) the full
    model of an Ideal client learned on 1/16 of its steps: 14.0 % on the quick start against
    FedAvg's 88.0 % (87.3 % with it)."""
    from fedpart.algorithms.fjord import ordered_dropout_loss

    sim = _sim(tiny_cfg, "fjord", options={"train_teacher": train_teacher}, capacity="ideal")
    algo = sim.algorithm
    state = {
        k: v.clone().requires_grad_(v.is_floating_point())
        for k, v in algo.start_state(0, 0).items()
    }
    x = torch.randn(4, 64)
    y = torch.tensor([0, 1, 2, 3])
    draws = torch.Generator().manual_seed(0)
    loss = ordered_dropout_loss(algo, 1.0, [1 / 16], draws, algo.model_for(0), state, x, y)
    assert algo.sampled == [1 / 16]
    (grad,) = torch.autograd.grad(loss, [state["fc1.weight"]])
    kept = kept_count(32, 1 / 16)
    assert grad[:kept].abs().sum() > 0  # the sampled submodel's rows learn either way
    assert bool(grad[kept:].abs().sum() > 0) == train_teacher


# ------------------------------------------------------------------------------ TailorFL
def test_tailorfl_filters_fit_the_width_and_differ_across_clients(tiny_cfg):
    values = [0.25, 0.25, 0.25, 0.25, 0.25, 1.0]  # five clients of width 1/2
    tiny_cfg["model"]["hidden"] = [32, 32]  # fc1 shared (largest norms), fc2 personal
    sim = _sim(tiny_cfg, "tailorfl", capacity="list", capacity_values=values)
    algo = sim.algorithm
    shared = [algo.filters(c)["fc1"] for c in range(5)]
    assert all(torch.equal(s, shared[0]) for s in shared)
    sets = [algo.filters(c)["fc2"] for c in range(6)]
    for c in range(5):
        assert sets[c].numel() == kept_count(32, 0.5)
        assert sets[c].unique().numel() == sets[c].numel()
    assert sets[5].tolist() == list(range(32))
    assert len({tuple(s.tolist()) for s in sets[:5]}) > 1, "personal filters differ"
    before = [s.clone() for s in sets]
    sim.run_round(0)
    after = [algo.filters(c)["fc2"] for c in range(6)]
    assert all(a.numel() == b.numel() for a, b in zip(after, before, strict=True))
    # the client's slice is exactly its filters: its submodel's rows are those of the server
    index = algo.index_sets(1, 0)
    assert torch.equal(index["fc2.weight"][0], after[0])
    assert torch.equal(index["classifier.weight"][1], after[0])
    assert torch.equal(index["fc2.weight"][1], algo.filters(0)["fc1"])


def test_tailorfl_width_scaling_sends_w_over_p_and_weights_holders_n_over_p(tiny_cfg):
    values = [0.25, 0.25, 1.0, 1.0, 1.0, 1.0]  # two clients of width 1/2
    kw = {"capacity": "list", "capacity_values": values}
    plain = _sim(tiny_cfg, "tailorfl", **kw).algorithm
    scaled = _sim(tiny_cfg, "tailorfl", options={"width_scaling": True}, **kw).algorithm
    for c, p in ((0, 0.5), (2, 1.0)):
        a, b = plain.start_state(0, c), scaled.start_state(0, c)
        assert all(torch.equal(b[k], a[k] / p) for k in a)
        a, b = plain.eval_state(c), scaled.eval_state(c)
        assert all(torch.equal(b[k], a[k] / p) for k in a)
    # a narrow and a whole client both hold fc1's largest filters: the average weights them
    # n / p (2:1 at equal n) after the narrow upload is multiplied back by p
    before = {k: v.clone() for k, v in scaled.ctx.store.global_state.items()}
    index = scaled.index_sets(0, 0)
    rows = index["fc1.weight"][0]
    uploads = {0: {k: torch.ones_like(v) for k, v in scaled.start_state(0, 0).items()}}
    uploads[2] = {k: torch.zeros_like(v) for k, v in before.items()}
    scaled.aggregate(0, uploads, {0: 1.0, 2: 1.0})
    assert len(index["fc1.weight"]) == 1  # rows only: fc1 reads the whole input
    got = scaled.ctx.store.global_state["fc1.weight"][rows]
    assert torch.allclose(got, torch.full_like(got, 2 * 0.5 / 3))


def test_tailorfl_filter_exchange_moves_towards_similar_clients():
    from fedpart.algorithms.tailorfl import exchange_filters

    member = torch.tensor([[1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1]], dtype=torch.float64)
    corr = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]], dtype=torch.float64)
    row = exchange_filters(member, corr, 0, limit=1)
    assert row.sum() == 2 and (row * member[1]).sum() == 1  # one filter swapped in
    assert torch.equal(exchange_filters(member, corr, 0, limit=0), member[0])


# ------------------------------------------------------------------------------ FLANC
def _cnn_cfg(tiny_cfg, algorithm, values, **kw):
    cfg = _cfg(tiny_cfg, algorithm, capacity="list", capacity_values=values, join_ratio=1.0, **kw)
    cfg["model"] = {"name": "fedavgcnn", "padding": 2, "width": 4}
    return cfg


def test_flanc_basis_is_shared_by_all_and_coefficients_by_width(tiny_cfg):
    values = [0.25, 0.25, 1.0, 1.0, 0.01, 0.01]  # widths 1/2, 1/2, 1, 1, 1/16, 1/16
    sim = Simulation(Config.from_dict(_cnn_cfg(tiny_cfg, "flanc", values)))
    algo = sim.algorithm
    basis = list(algo.basis)
    assert basis and all(k.endswith("_u") for k in basis)
    seen = {}
    aggregate = algo.aggregate

    def spy(rnd, uploads, weights):
        seen.update(uploads=uploads, weights=weights)
        aggregate(rnd, uploads, weights)

    algo.aggregate = spy
    sim.run_round(0)
    uploads, weights = seen["uploads"], seen["weights"]
    states = [algo.start_state(1, c) for c in range(6)]
    for k in basis:  # θ_u: one tensor for every client, the average of all uploads
        assert all(torch.equal(s[k], states[0][k]) for s in states)
        mean = sum(weights[c] * uploads[c][k].double() for c in range(6)) / sum(weights.values())
        assert torch.allclose(states[0][k].double(), mean, atol=1e-6)
    v = "personal.fc1_v"
    for a, b in ((0, 1), (2, 3), (4, 5)):  # θ_v: shared within a width group ...
        assert torch.equal(states[a][v], states[b][v])
        mean = (weights[a] * uploads[a][v] + weights[b] * uploads[b][v]) / (weights[a] + weights[b])
        assert torch.allclose(states[a][v], mean.float(), atol=1e-6)
    # ... and not across groups: the narrow group's coefficients are not the wide one's slice
    narrow = states[0][v]
    sliced = algo.index_sets(1, 0)[v][1]
    assert not torch.allclose(states[2][v][:, sliced], narrow)


@pytest.mark.parametrize("basis_init", ["orthonormal", "scaled"])
def test_flanc_basis_starts_where_its_regulariser_wants_it(tiny_cfg, basis_init):
    """``basis_init=orthonormal``: every θ_u starts with orthonormal columns, so FLANC's
    ``‖θ_uᵀθ_u − I‖²`` is 0 at the start, and θ_v is rescaled so that each composed weight has
    the variance of a plain layer's default initialisation. The former init (``scaled``) gave
    θ_u columns of squared norm k²R1/R2 (12.5 and 50 on the quick start's convolutions), which
    the regulariser pulled to 1 in the first round (conv2's weight moved by 65 % in round 0,
    FedAvg's by 9 %): 64.2 % on the quick start at Ideal, 75.9 % with orthonormal bases."""
    cfg = _cnn_cfg(tiny_cfg, "flanc", [1.0] * 6, options={"basis_init": basis_init})
    sim = Simulation(Config.from_dict(cfg))
    model = sim.model
    for name, weight in model.composed_weights().items():
        u = sim.store.global_state[f"general.{name}_u"]
        off = (u.t() @ u - torch.eye(u.shape[1])).abs().max()
        assert bool(off < 1e-5) == (basis_init == "orthonormal")
        if basis_init == "orthonormal":
            geo = model.layer_geometry(name)
            plain = 1.0 / math.sqrt(3 * geo.in_channels * geo.k2)
            assert float(weight.detach().std()) == pytest.approx(plain, rel=0.25)


def test_flanc_on_the_paper_cnn_is_the_cost_tables_flanc_model():
    from types import SimpleNamespace

    import numpy as np

    from fedpart.algorithms.flanc import FLANC, FLANCOptions
    from fedpart.engine.width_cost import client_model
    from fedpart.models import Pa3dFLCNN

    sim = SimpleNamespace(
        cfg=SimpleNamespace(seed=0),
        capacity=SimpleNamespace(width=np.array([1 / 16, 1 / 2, 1.0])),
        data=SimpleNamespace(bundle=SimpleNamespace(input_shape=(1, 28, 28))),
    )
    model = FLANC(FLANCOptions(), sim).wrap_model(Pa3dFLCNN(10, (1, 28, 28), variant="fmnist"))
    ours = {k: v.shape for k, v in model.state_dict().items()}
    table = client_model("flanc", 1.0, variant="fmnist").state_dict()
    assert ours == {k: v.shape for k, v in table.items()}


# ------------------------------------------------------------------------------ pFedGate
@pytest.mark.parametrize("sparsity", [0.05, 0.3, 0.7])
@pytest.mark.parametrize("selection", ["public", "global"])
def test_pfedgate_masks_respect_the_sparsity_and_are_block_sparse(sparsity, selection):
    from fedpart.models import MLP
    from fedpart.models.gated import GatedModel

    torch.manual_seed(0)
    model = GatedModel(
        MLP(10, (64,), hidden=[32, 16]), (64,), blocks=5, sparsity=sparsity, selection=selection
    )
    torch.nn.init.normal_(model.gate.weight, std=0.5)
    x = torch.randn(8, 64)
    m = model.mask(x)
    assert m.shape == (model.num_blocks,) == (6 * 5,)  # 3 layers × (weight, bias) × B
    kept = m > 0
    sizes = model._sizes
    if selection == "global":
        assert 0 < float(sizes[kept].sum()) <= sparsity * float(sizes.sum())
    else:  # every tensor's first block, and the rest of each group within (s - m) of it
        first = model._first
        assert kept[first].all()
        floor = min(0.2, sparsity)
        for group in (model._linear & ~first, ~model._linear & ~first):
            within = round(float(sizes[group].sum()) * (sparsity - floor))
            assert float(sizes[group & kept].sum()) <= within
    gated = model.gated_parameters(m)
    for name, p in model.net.named_parameters():
        rows = model._rows[name]
        for b in rows.unique():
            ratio = gated[name][rows == b] / p[rows == b]
            if kept[b]:  # a kept block is the model's block times its score
                assert torch.allclose(ratio, m[b].expand_as(ratio))
            else:  # a dropped block is zero as a whole
                assert torch.all(gated[name][rows == b] == 0)
    # the scores are batch-level and trained through the kept blocks
    loss = F.cross_entropy(model(x), torch.arange(8) % 10)
    (grad,) = torch.autograd.grad(loss, [model.gate.weight])
    assert grad.abs().sum() > 0


def test_pfedgate_public_selection_never_cuts_a_layer_where_the_global_knapsack_does():
    """The Pa3dFL CNN's fc1 weight holds 93 % of its parameters: one knapsack within s = 0.1
    drops all of it (the model's output then ignores its input, so narrow clients sit at chance);
    pFedGate's public rule keeps every tensor's first block."""
    from fedpart.models.cnn import Pa3dFLCNN
    from fedpart.models.gated import GatedModel

    torch.manual_seed(0)
    x = torch.randn(4, 1, 28, 28)
    out = {}
    for selection in ("public", "global"):
        model = GatedModel(
            Pa3dFLCNN(10, (1, 28, 28), variant="fmnist"), (1, 28, 28), selection=selection
        )
        model.train()
        narrow = model.with_sparsity(0.1)
        narrow.mask(x)
        out[selection] = model.take_stats()[0.1]
        y = narrow(x)
        out[selection] += (float((y - y.mean(0)).abs().max().detach()),)
    batches, kept, cut, spread = out["global"]
    assert (batches, cut) == (1, 1) and kept <= 0.1 and spread == 0  # one output for all
    batches, kept, cut, spread = out["public"]
    assert (batches, cut) == (1, 0) and spread > 1e-5
    assert kept == pytest.approx(0.2, abs=0.01)  # about 1/B of every tensor, above s


def test_pfedgate_head_cut_to_its_first_block_answers_two_classes_unless_kept_whole():
    """Below s = 1/B the public rule keeps only the first block of every tensor; the head's
    blocks are rows, i.e. classes, so the narrow model scores classes 0-1 only (the other
    logits are exactly 0); ``mask_head=False`` keeps the head whole."""
    from fedpart.models.cnn import Pa3dFLCNN
    from fedpart.models.gated import GatedModel

    torch.manual_seed(0)
    x = torch.randn(4, 1, 28, 28)
    logits = {}
    for mask_head in (True, False):
        torch.manual_seed(1)
        model = GatedModel(
            Pa3dFLCNN(10, (1, 28, 28), variant="fmnist"), (1, 28, 28), mask_head=mask_head
        )
        logits[mask_head] = model.with_sparsity(0.1)(x).detach()
    assert torch.all(logits[True][:, 2:] == 0) and torch.all(logits[True][:, :2] != 0)
    assert torch.all(logits[False] != 0)


def test_pfedgate_at_full_sparsity_starts_as_the_global_model():
    from fedpart.models import MLP
    from fedpart.models.gated import GatedModel

    net = MLP(10, (64,), hidden=[32])
    model = GatedModel(net, (64,))
    x = torch.randn(4, 64)
    assert torch.equal(model(x), net(x))


def test_pfedgate_client_keeps_its_gate_and_uses_its_capacity(tiny_cfg):
    sim = _sim(tiny_cfg, "pfedgate", join_ratio=1.0)
    algo = sim.algorithm
    assert algo.personal_blocks() == {"gate"}
    for c in range(6):
        assert algo.model_for(c).sparsity == pytest.approx(min(1.0, sim.capacity.capacity[c]))
    keys = algo.download_keys(0)
    assert not any(k.startswith("gate.") for k in keys)
    sim.run_round(0)
    gates = [sim.store.client_state(c)["gate.weight"] for c in range(6)]
    assert all(g.abs().sum() > 0 for g in gates)
    assert not torch.equal(gates[0], gates[1])


# ------------------------------------------------------------------------------ all of them
@pytest.mark.parametrize("algorithm", ["fjord", "tailorfl", "flanc"])
def test_a_client_never_receives_more_than_its_width(tiny_cfg, algorithm):
    cfg = _cnn_cfg(tiny_cfg, algorithm, [0.01, 0.05, 0.25, 0.5, 0.8, 1.0])
    sim = Simulation(Config.from_dict(cfg))
    algo = sim.algorithm
    keys = algo.download_keys(0)
    full = tensor_bytes(sim.store.global_state)
    for c in range(6):
        own = tensor_bytes(algo.model_for(c).state_dict())
        assert algo.download_bytes(0, c, keys) <= own
        if algo.width(c) < 1:
            assert own < full


def test_tailorfl_resume_is_bit_identical(tiny_cfg, tmp_path):
    assert_resume_bit_identical(_cfg(tiny_cfg, "tailorfl"), tmp_path)


@pytest.mark.parametrize("algorithm", ["fjord", "tailorfl", "flanc", "pfedgate"])
def test_quickstart_with_uniform_capacity(algorithm, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run_quickstart_uniform(algorithm, tmp_path / "run") in (0, None)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["accuracy"]["final"] is not None


# ------------------------------------------------------------------------------ fedpart cost
def test_cost_command_prints_table2_cells(capsys):
    assert main(["cost", "--method", "pfedgate", "--ratio", "0.00390625", "--no-memory"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| pfedgate"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1:3] == ["1/256", "1/16"]
    assert float(cells[3]) == pytest.approx(5.5, rel=0.03)  # Table 2: 5.5 ×10⁷ FLOPs
    assert float(cells[4]) == pytest.approx(36.3, rel=0.03)  # and 36.3 ×10⁻¹ MB
    assert cells[6] == "5.5 / 36.3 / 39.2"
    assert main(["cost", "--method", "flanc", "--width", "0.5", "--batch", "64"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "| flanc" in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert float(cells[3]) == pytest.approx(21.1, rel=0.03)  # Table 8, B = 64
    assert float(cells[5]) > 0  # peak memory measured


def test_cost_command_reads_a_config(capsys):
    config = QUICKSTART.parent / "pa3dfl" / "fjord.yaml"
    assert main(["cost", str(config), "--no-memory", "--width", "0.25"]) == 0
    out = capsys.readouterr().out
    assert "Pa3dFL CNN (fmnist), batch 50" in out and "| fjord | 1/16 | 1/4 |" in out


@pytest.mark.parametrize(
    "args",
    [
        ["--method", "nope"],
        ["--width", "0.3"],
        ["--width", "0"],
        ["--ratio", "2"],
        ["--batch", "0"],
        ["--variant", "mnist"],
        ["--width", "0.5", "--ratio", "0.25"],
        [str(QUICKSTART)],
        ["x=1"],
    ],
)
def test_cost_command_errors_are_one_line(args, capsys):
    assert main(["cost", *args, "--no-memory"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1


@pytest.mark.parametrize("algorithm", ["fjord", "heterofl", "pfedhn", "pfedgate", "flanc"])
def test_capacity_baselines_resume_bit_identical(tiny_cfg, tmp_path, algorithm):
    """A run stopped after round 2 and resumed equals the straight run, bit for bit: each
    method's server state (hyper-network, per-width coefficients, gates) is in the checkpoint."""
    if algorithm == "flanc":  # factorizes a CNN
        cfg = _cnn_cfg(tiny_cfg, algorithm, [0.25, 1.0, 0.01, 0.25, 1.0, 0.01])
    else:
        cfg = _cfg(tiny_cfg, algorithm)
    assert_resume_bit_identical(cfg, tmp_path)


def test_tailorfl_models_script_reproduces_the_reported_client_accuracies(
    tiny_cfg, tmp_path, capsys, monkeypatch
):
    """``benchmarks/pa3dfl/tailorfl_models.py`` rebuilds every client's test model from the last
    checkpoint: its ``own`` column equals the accuracies the run reported, client by client, at
    the whole width the three selections agree, and without a checkpoint it is one line, exit 2."""
    import importlib.util

    from fedpart import api

    folder = Path(__file__).resolve().parents[1] / "benchmarks" / "pa3dfl"
    monkeypatch.syspath_prepend(str(folder))
    spec = importlib.util.spec_from_file_location("tailorfl_models", folder / "tailorfl_models.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    tiny_cfg["model"]["hidden"] = [32, 32]  # fc1 shared, fc2 personal
    for scaling in (False, True):
        cfg = _cfg(
            tiny_cfg,
            "tailorfl",
            rounds=2,
            options={"width_scaling": scaling},
            capacity="list",
            capacity_values=[0.25] * 5 + [1.0],  # five clients of width 1/2
        )
        cfg["output"] = {"dir": str(tmp_path / f"run{scaling}"), "checkpoint_every": 1}
        api.run(cfg)
        run = tmp_path / f"run{scaling}"
        reported = json.loads((run / "clients.json").read_text())["client_accuracy"]
        rows, overlap, done = script.evaluate(run)
        assert done == 2
        assert [r["own"] for r in rows] == pytest.approx([100 * a for a in reported], abs=1e-9)
        whole = [r for r in rows if r["width"] >= 1.0]
        assert whole and all(r["own"] == r["by norm"] == r["whole"] for r in whole)
        assert overlap and all("Jaccard" in line for line in overlap)
        # the run logs the mechanism: the shared layer's sets are nested (clients of one width
        # hold the same filters), the personal layer's differ
        rows_logged = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        logged = [r for r in rows_logged if "tailorfl_overlap" in r]
        assert len(logged) == 2
        assert logged[-1]["tailorfl_overlap"]["fc1"] == 1.0
        assert logged[-1]["tailorfl_overlap"]["fc2"] < 1.0
        assert all(v >= 0 for r in logged for v in r["tailorfl_moved"].values())
    assert script.main([str(run)]) == 0
    assert "| all | 6 |" in capsys.readouterr().out
    assert script.main([str(tmp_path / "nothing")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_pfedgate_models_script_reproduces_the_reported_client_accuracies(
    tiny_cfg, tmp_path, capsys, monkeypatch
):
    """``benchmarks/pa3dfl/pfedgate_models.py`` rebuilds every client's gated model from the last
    checkpoint: its ``own`` column equals the accuracies the run reported, client by client; at
    sparsity 1 the whole head changes nothing; the run logs the kept fractions and no cut."""
    import importlib.util

    from fedpart import api

    folder = Path(__file__).resolve().parents[1] / "benchmarks" / "pa3dfl"
    monkeypatch.syspath_prepend(str(folder))
    spec = importlib.util.spec_from_file_location("pfedgate_models", folder / "pfedgate_models.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    cfg = _cfg(
        tiny_cfg, "pfedgate", rounds=2, capacity="list", capacity_values=[0.1] * 3 + [1.0] * 3
    )
    cfg["output"] = {"dir": str(tmp_path / "run"), "checkpoint_every": 1}
    api.run(cfg)
    run = tmp_path / "run"
    reported = json.loads((run / "clients.json").read_text())["client_accuracy"]
    rows, done = script.evaluate(run)
    assert done == 2
    assert [r["own"] for r in rows] == pytest.approx([100 * a for a in reported], abs=1e-9)
    assert all(r["own"] == r["whole head"] for r in rows if r["width"] >= 1.0)
    assert all(1 <= r["classes"] <= 10 for r in rows)
    logged = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    logged = [r for r in logged if "pfedgate_kept" in r]
    assert len(logged) == 2 and all(r["pfedgate_cut"] == 0 for r in logged)
    assert all(0 < k <= 1 for r in logged for k in r["pfedgate_kept"].values())
    assert script.main([str(run)]) == 0
    assert "| all | 6 |" in capsys.readouterr().out
    assert script.main([str(tmp_path / "nothing")]) == 2
