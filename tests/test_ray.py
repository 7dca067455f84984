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
