"""FedPer and FedCMD through Flower's simulation engine give `fedpart run`'s accuracies.

Skipped without flwr (``pip install 'fedpart[flower]'``). Most of its time is the start of the
engine's local Ray and its actors (about 20 s on two cores); the two rounds take a few seconds.
"""

import math

import pytest

import fedpart
from fedpart.config import load_config
from fedpart.errors import FedpartError

flwr = pytest.importorskip("flwr")

from flwr.serverapp import ServerApp  # noqa: E402
from flwr.simulation import run_simulation  # noqa: E402

from fedpart.flower import FlowerSimulation, client_app, run_on_grid  # noqa: E402

QUICKSTART = "configs/quickstart.yaml"
# FedCMD's selection phase is round 0 (K_p = max(1, ⌊0.1·2⌋)); in round 1 its l* is personal,
# the layers after it tailored per client and φ uploaded: every path of the node protocol
METHODS = ("fedper", "fedcmd")


def _overrides(method):
    return [f"algorithm.name={method}", "federation.rounds=2"]


def test_flower_equals_fedpart_run():
    configs = {m: load_config(QUICKSTART, _overrides(m)) for m in METHODS}
    results = {}
    app = ServerApp()

    @app.main()
    def main(grid, context):
        # both runs over the same nodes: Ray and its actors start once
        for method, cfg in configs.items():
            results[method] = run_on_grid(grid, cfg, timeout=300)

    n = configs["fedper"].partition.num_clients
    run_simulation(
        app,
        client_app(),
        num_supernodes=n,
        backend_config={
            "client_resources": {"num_cpus": 1},
            "init_args": {"num_cpus": 2, "include_dashboard": False},
        },
    )
    assert set(results) == set(METHODS)
    for method in METHODS:
        ref = fedpart.run(configs[method], write=False)
        got = results[method]
        assert len(got.metrics) == len(ref.metrics) == 2
        for a, b in zip(got.metrics, ref.metrics, strict=True):
            for key in ("accuracy", "accuracy_weighted", "loss", "train_loss", "up_bytes"):
                assert math.isclose(a[key], b[key], rel_tol=1e-6, abs_tol=1e-9), (method, key)
        assert got.client_accuracy == pytest.approx(ref.client_accuracy, abs=1e-9)
    assert results["fedcmd"].summary["fedcmd"]["layer"] is not None


@pytest.mark.parametrize(
    ("method", "message"),
    [("ditto", "own local update"), ("dfedavg", "decentralized"), ("heterofl", "widths")],
)
def test_flower_refuses_in_one_line(method, message):
    cfg = load_config(QUICKSTART, _overrides(method))
    with pytest.raises(FedpartError, match=message) as err:
        FlowerSimulation(cfg, grid=None)
    assert "\n" not in str(err.value)
