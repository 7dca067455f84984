"""Whether Pa3dFL's hyper-network personalizes (issue 22): a toy federation whose clients want
different tensors, the step's measured gains, the closed-form diagnostics, and the per-round
metrics a run logs."""

import math

import pytest
import torch

from fedpart.config import Config
from fedpart.engine.hypernetwork import HyperNetwork, hypernetwork_step
from fedpart.engine.simulation import Simulation

TARGETS = {"a.weight": (6, 5), "a.bias": (6,), "b.v": (4, 7)}
LAYERS = {"a.weight": "a", "a.bias": "a", "b.v": "b"}
N = 8
#: how far a client's local training takes it towards its optimum
LOCAL = 0.2


def _init():
    gen = torch.Generator().manual_seed(1)
    return {k: torch.randn(s, generator=gen) for k, s in TARGETS.items()}


def _hn(**options):
    init = _init()
    defaults = {"encoder_init": "he", "centred": True}
    return HyperNetwork(
        N,
        TARGETS,
        embed_dim=8,
        hidden_dim=16,
        depth=3,
        attention=True,
        layers=LAYERS,
        init=init,
        seed=0,
        **{**defaults, **options},
    )


def _optima():
    """Two groups of clients, each wanting its own tensors: client i's optimum is a group
    direction plus a small personal one, away from the common initialisation."""
    gen = torch.Generator().manual_seed(2)
    init = _init()
    group = [{k: 0.5 * torch.randn(s, generator=gen) for k, s in TARGETS.items()} for _ in "ab"]
    return [
        {
            k: init[k] + group[i % 2][k] + 0.1 * torch.randn(s, generator=gen)
            for k, s in TARGETS.items()
        }
        for i in range(N)
    ]


def _federate(hn, optima, rounds=40, **step):
    """Each round half the clients take half a step from what they receive towards their
    optimum (their local training) and the hyper-network takes one step on what they return."""
    steps = []
    for rnd in range(rounds):
        clients = [(rnd + 3 * k) % N for k in range(N // 2)]
        received = hn.generate(clients)
        trained = [
            {k: v + LOCAL * (optima[c][k] - v) for k, v in received[pos].items()}
            for pos, c in enumerate(clients)
        ]
        steps.append(hypernetwork_step(hn, clients, trained, None, 1.0, **step))
    return steps


def _distance(a, b):
    return math.sqrt(sum(float((a[k] - b[k]).pow(2).sum()) for k in a))


def test_attention_gives_clients_with_different_targets_different_tensors():
    hn = _hn()
    optima = _optima()
    steps = _federate(hn, optima, max_gain=1.0, measure=True)
    generated = hn.generate(range(N))
    mean = {k: sum(o[k] for o in optima) / N for k in TARGETS}
    # every client ends nearer its own optimum than the clients' common mean is
    for c in range(N):
        assert _distance(generated[c], optima[c]) < 0.6 * _distance(mean, optima[c])
    report = hn.diagnostics()
    assert report["entropy_max"] == pytest.approx(math.log(N))
    assert all(h < math.log(N) - 0.05 for h in report["entropy"].values())
    assert all(s > 0.1 for s in report["spread"].values())
    # the temperatures moved from their initial 1
    assert all(abs(t - 1.0) > 1e-4 for t in report["tau"].values())
    # the steps moved the clients along what each asked beyond the mean, and never further
    # than the clients' mean update
    assert max(s.gain_personal for s in steps) > 0.05
    assert all(s.gain <= 1.0 + 1e-3 for s in steps)


def test_the_pre_fix_hypernetwork_gives_every_client_the_same_tensors():
    """PyTorch's default encoder and decoders reading the raw attention mix (the hyper-network
    before issue 22): the encoded embeddings nearly coincide, the attention stays uniform and
    the generated tensors are the same for every client. The test above would fail on it."""
    hn = _hn(encoder_init="default", centred=False)
    optima = _optima()
    _federate(hn, optima, max_gain=1.0)
    report = hn.diagnostics()
    assert all(s < 0.01 for s in report["spread"].values())
    assert all(h > math.log(N) - 0.01 for h in report["entropy"].values())


def test_spread_is_the_pairwise_distance_of_the_generated_tensors():
    hn = _hn()
    _federate(hn, _optima(), rounds=5)
    with torch.no_grad():
        out = hn(range(N))
    for layer in ("a", "b"):
        keys = [k for k, v in LAYERS.items() if v == layer]
        flat = torch.cat([out[k].reshape(N, -1) for k in keys], dim=1).double()
        pairwise = torch.cdist(flat, flat).pow(2).sum() / (N * (N - 1))
        norm = flat.pow(2).sum(1).mean()
        expected = float((pairwise / norm).sqrt())
        assert hn.diagnostics()["spread"][layer] == pytest.approx(expected, rel=1e-4)


def test_gain_of_the_bias_path_is_the_learning_rate():
    """Only the decoders' biases trainable: one step of learning rate ``lr`` moves every
    client's tensors by exactly ``lr`` times the clients' mean update (gain = lr) and nothing
    personal (gain_personal = 0)."""
    hn = _hn()
    for name, p in hn.named_parameters():
        p.requires_grad_(name.startswith("decoders") and name.endswith("bias"))
    clients = [0, 2, 5]
    received = hn.generate(clients)
    trained = [{k: v + torch.randn_like(v) for k, v in r.items()} for r in received]
    step = hypernetwork_step(hn, clients, trained, None, 0.3, measure=True)
    assert step.gain == pytest.approx(0.3, rel=1e-4)
    assert step.gain_personal == pytest.approx(0.0, abs=1e-5)


def test_gain_limit_and_clipping_shorten_the_step():
    optima = _optima()
    clients = [0, 1, 2, 3]
    steps = {}
    for name, options in {
        "plain": {},
        "limited": {"max_gain": 0.5},
        "clipped": {"max_grad_norm": 1e-3},
    }.items():
        hn = _hn()
        received = hn.generate(clients)
        trained = [{k: optima[c][k] for k in r} for c, r in zip(clients, received, strict=True)]
        steps[name] = hypernetwork_step(hn, clients, trained, None, 1.0, measure=True, **options)
    assert steps["plain"].gain > 0.5 and steps["plain"].scale == 1.0
    limited = steps["limited"]
    assert limited.scale < 1.0
    # shortened to the limit to first order; the rest of the way is not linear, and a step is
    # only ever shortened further
    assert 0.3 < max(limited.gain, limited.move) <= 0.5 + 1e-3
    assert steps["clipped"].grad_norm == pytest.approx(steps["plain"].grad_norm)
    assert 0 < steps["clipped"].gain < 0.1 * steps["plain"].gain


def test_the_step_limit_stops_its_tries_early_on_the_cpu_with_the_same_step():
    """On the CPU the step limit stops at the first try that keeps the step; on an accelerator
    (the fake CUDA device: CPU values, bit for bit) it always makes ``LIMIT_TRIES``. The steps
    and the hyper-network they leave are the same."""
    from fake_cuda import FakeCuda, torch_switches_kept

    def federate(device):
        hn = _hn().to(device)
        calls = []
        hn.register_forward_hook(lambda *_: calls.append(1))
        optima = [{k: v.to(device) for k, v in o.items()} for o in _optima()]
        steps = _federate(hn, optima, rounds=12, max_gain=1.5, measure=True)
        return steps, {k: v.detach().cpu() for k, v in hn.state_dict().items()}, len(calls)

    cpu_steps, cpu_state, cpu_calls = federate("cpu")
    with torch_switches_kept(), FakeCuda():
        gpu_steps, gpu_state, gpu_calls = federate("cuda")
    assert any(s.scale < 1.0 for s in cpu_steps) and any(s.scale == 1.0 for s in cpu_steps)
    assert cpu_steps == gpu_steps
    assert all(torch.equal(cpu_state[k], gpu_state[k]) for k in cpu_state)
    assert cpu_calls < gpu_calls


def _run(tiny_cfg, algorithm, **options):
    cfg = {
        **tiny_cfg,
        "partition": {**tiny_cfg["partition"], "split": [0.6, 0.2, 0.2]},
        "model": {"name": "fedavgcnn", "padding": 2, "width": 4},
        "algorithm": {"name": algorithm, **options},
        "federation": {**tiny_cfg["federation"], "rounds": 2, "momentum": 0.0},
    }
    return Simulation(Config.from_dict(cfg)).run()


def test_pa3dfl_logs_whether_its_hypernetwork_personalizes(tiny_cfg):
    result = _run(tiny_cfg, "pa3dfl")
    layers = {"conv1", "conv2", "fc1", "local_head"}
    for row in result.metrics:
        assert row["hn_entropy_max"] == pytest.approx(math.log(6))
        for key in ("hn_entropy", "hn_tau", "hn_spread", "hn_attention_self"):
            assert set(row[key]) == layers, key
            assert all(math.isfinite(v) for v in row[key].values())
        for key in ("hn_loss", "hn_gain", "hn_gain_personal", "hn_grad_norm", "hn_step_scale"):
            assert math.isfinite(row[key]), key
        assert row["hn_gain"] <= 1.0 + 1e-3  # hn_max_gain = 1
    assert set(result.summary["pa3dfl"]["tau"]) == layers


def test_pfedhn_logs_its_step_and_spread(tiny_cfg):
    result = _run(tiny_cfg, "pfedhn")
    row = result.metrics[0]
    assert {"hn_loss", "hn_gain", "hn_gain_personal", "hn_spread"} <= set(row)
    assert "hn_entropy" not in row  # no attention
    # the step moves the generated models by about the clients' mean update (at the old
    # hn_lr = 0.1 it was 0.14 of it: FedAvg at a server step of 0.14)
    assert 0.5 < row["hn_gain"] <= 1.0 + 1e-3
