"""The Ray backend (a local 2-worker Ray) gives the sequential backend's numbers exactly."""

import pytest

import fedpart
from resume_check import assert_same_run

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


@pytest.mark.parametrize(
    ("algorithm", "topology"),
    [("fedper", {}), ("fedprox", {}), ("dfedpgp", {"neighbors": 2})],
)
def test_ray_equals_sequential(tiny_cfg, local_ray, algorithm, topology):
    cfg = {
        **tiny_cfg,
        "algorithm": {"name": algorithm},
        "topology": topology,
        "federation": {**tiny_cfg["federation"], "rounds": 2},
        "engine": {"threads": 1},
    }
    seq = fedpart.run({**cfg, "engine": {"threads": 1, "backend": "sequential"}}, write=False)
    par = fedpart.run({**cfg, "engine": {"threads": 1, "backend": "ray"}}, write=False)
    assert par.simulation.backend == "ray"
    assert_same_run(seq, par)


def test_task_options_ask_for_gpus_on_cuda_only():
    """The tasks' GPU share follows engine.device (not the driver's hardware, so this runs on a
    machine without a GPU); Ray accepts the options."""
    from fedpart.config import EngineConfig
    from fedpart.engine.ray_backend import _train_task, task_options
    from fedpart.errors import FedpartError

    assert task_options(EngineConfig(device="cpu", ray_gpus_per_client=0.5)) == {"num_cpus": 1}
    for device in ("cuda", "cuda:1"):
        options = task_options(EngineConfig(device=device, ray_gpus_per_client=0.5))
        # max_calls=0: the worker is reused, so it moves the data pool to its GPU once per run
        assert options == {"num_cpus": 1, "num_gpus": 0.5, "max_calls": 0}
        ray.remote(**options)(_train_task)  # valid Ray options
    assert task_options(EngineConfig(device="cuda"))["num_gpus"] == 0.25  # the default share
    with pytest.raises(FedpartError, match="ray_gpus_per_client"):
        task_options(EngineConfig(device="cuda", ray_gpus_per_client=0.0))


def test_tensors_travel_as_cpu_tensors_and_land_on_the_receivers_device():
    """A job's tensors — the start state and those a recipe's closures hold — are written as CPU
    tensors and rebuilt on the receiving side's device (``meta`` stands in for a GPU here)."""
    import pickle

    import torch

    from fedpart.engine.ray_backend import _dumps, _loads
    from fedpart.engine.recipe import LossTerm, Phase, Recipe, proximal

    reference = {"w": torch.arange(4.0)}
    recipe = Recipe(phases=(Phase(loss_terms=(LossTerm("prox", proximal(reference), 0.1),)),))
    param = torch.nn.Parameter(torch.ones(2))
    job = (3, {"w": reference["w"], "b": torch.zeros(2)}, recipe, param)
    blob = _dumps(job)
    # what travels is plain CPU tensors: readable without the receiver's device
    client, start, plain_recipe, plain_param = pickle.loads(blob)
    assert client == 3 and start["w"].device.type == "cpu"
    assert torch.equal(start["w"], reference["w"]) and start["w"] is not reference["w"]
    assert type(plain_param) is torch.nn.Parameter and plain_param.requires_grad

    _, start, moved_recipe, moved_param = _loads(blob, torch.device("meta"))
    assert {t.device.type for t in start.values()} == {"meta"}
    assert moved_param.device.type == "meta" and type(moved_param) is torch.nn.Parameter
    term = moved_recipe.phases[0].loss_terms[0]
    assert term.fn({"w": torch.zeros(4, device="meta")}).device.type == "meta"
    # unpickled outside _loads, tensors stay on the CPU
    assert pickle.loads(_dumps(torch.ones(1))).device.type == "cpu"


def test_data_pool_copied_to_a_device(tiny_cfg):
    """``data_on``: the pool, labels and index arrays on the device, the bundle left alone; the
    same object when they are there already."""
    import dataclasses

    import torch

    from fedpart.config import Config
    from fedpart.data import load_dataset
    from fedpart.engine.data import build_federated_data
    from fedpart.engine.ray_backend import data_on

    cfg = Config.from_dict(tiny_cfg)
    data = build_federated_data(cfg, load_dataset("digits", cfg.dataset.root))
    data = dataclasses.replace(data, global_test=torch.arange(5))  # digits has no test split

    moved = data_on(data, "meta")
    assert moved.x.device.type == moved.y.device.type == "meta"
    assert moved.global_test.device.type == "meta"
    assert {t.device.type for c in moved.clients for t in (c.train, c.val, c.test)} == {"meta"}
    assert moved.bundle is data.bundle and data.x.device.type == "cpu"
    assert data_on(data, "cpu") is data  # already there: no copy


@pytest.mark.parametrize("algorithm", ["fedprox", "fedrod"])
def test_gpu_task_on_the_fake_cuda_device(algorithm):
    """A GPU task's work, run here on the fake CUDA device of ``tests/fake_cuda.py`` (which
    raises where a GPU would meet tensors on two devices and computes the CPU's values): a job
    sent from a driver on cuda travels as CPU tensors; in the task the model, the pool, the start
    state and the tensors the recipe holds (FedProx's reference, FedRoD's class counts) are on
    cuda; the result travels back as CPU tensors and lands on the driver's device; the numbers
    are the CPU's, bit for bit."""
    import copy
    import pickle
    from pathlib import Path

    import torch

    from fedpart.config import load_config
    from fedpart.engine.ray_backend import _dumps, _loads, _train_job, data_on
    from fedpart.engine.simulation import Simulation
    from fedpart.engine.store import compact_state
    from fedpart.engine.training import train_client

    if torch.cuda.is_available():
        pytest.skip("a real GPU: the fake device is for CPU-only machines")
    fake_cuda = pytest.importorskip("fake_cuda")
    quickstart = Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml"
    overrides = [
        f"algorithm.name={algorithm}",
        "partition.num_clients=8",
        "engine.backend=sequential",
        "engine.conv_layout=contiguous",
    ]
    sim = Simulation(load_config(quickstart, overrides))
    algo, rnd, client = sim.algorithm, 0, 3
    start = compact_state(algo.start_state(rnd, client))
    recipe, settings = algo.recipe(rnd, client), sim.train_settings(rnd, client)
    frozen = algo.frozen_blocks(rnd)
    expected = train_client(sim.model, start, recipe, sim.data, client, rnd, settings, frozen)

    cuda = torch.device("cuda")
    with fake_cuda.FakeCuda() as gpu:
        start_on_gpu = {k: v.to(cuda) for k, v in start.items()}
        payload = _dumps((client, rnd, start_on_gpu, recipe, settings, frozen))
        model, data = copy.deepcopy(sim.model).to(cuda), data_on(sim.data, cuda)
        assert gpu.on_cuda(data.x) and gpu.on_cuda(data.clients[client].train)
        blob = _train_job(model, data, payload, cuda)
        result = _loads(blob, cuda)  # in a driver on the GPU
        assert all(gpu.on_cuda(t) for t in result.state.values())
    sent = pickle.loads(payload)[2]
    received = pickle.loads(blob)
    assert {t.device.type for t in [*sent.values(), *received.state.values()]} == {"cpu"}
    assert received.state.keys() == expected.state.keys()
    assert all(torch.equal(received.state[k], expected.state[k]) for k in expected.state)
    assert (received.loss, received.samples, received.steps) == (
        expected.loss,
        expected.samples,
        expected.steps,
    )
