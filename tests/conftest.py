from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)

QUICKSTART = Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml"


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--device``: run the device checks (``tests/test_device_checks.py``, marked ``device``)
    on this device; without it they are skipped. The other options size them."""
    group = parser.getgroup("device", "device checks (tests/test_device_checks.py)")
    group.addoption(
        "--device",
        default=None,
        help="run the device checks on cuda, cuda:N or cpu (a self-check); default: skipped",
    )
    group.addoption("--device-rounds", type=int, default=3, help="rounds of each run (default 3)")
    group.addoption(
        "--device-methods", default=None, help="comma-separated methods (default: every method)"
    )
    group.addoption(
        "--device-tolerance",
        type=float,
        default=1.0,
        help="largest accepted device - CPU final accuracy difference, points (default 1)",
    )
    group.addoption(
        "--device-kill-rounds", type=int, default=20, help="rounds of the killed run (default 20)"
    )
    group.addoption(
        "--device-kill-method",
        default=None,
        help="method of the killed run (default fedavg if selected, else the first)",
    )
    group.addoption(
        "--device-config", default=str(QUICKSTART), help="the config (default the quick start)"
    )
    group.addoption(
        "--device-outcomes",
        default=None,
        help="append each check's outcome to this file as a JSON line (benchmarks/gpu_smoke.py)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "device: a device check, run with --device (else skipped)")
    path = config.getoption("--device-outcomes")
    if path:
        from device_checks import OutcomeWriter

        config.pluginmanager.register(OutcomeWriter(Path(path), config), "device-outcomes")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    marked = [item for item in items if item.get_closest_marker("device") is not None]
    if not marked:
        return
    from device_checks import skip_reason

    reason = skip_reason(config.getoption("--device"))
    if reason is not None:
        for item in marked:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def tiny_cfg(tmp_path):
    """A small, fast experiment on the bundled digits data (as a dict)."""
    return {
        "seed": 3,
        "dataset": {"name": "digits"},
        "partition": {"kind": "dirichlet", "num_clients": 6, "alpha": 0.5, "min_size": 20},
        "model": {"name": "mlp", "hidden": [32]},
        "algorithm": {"name": "fedavg"},
        "federation": {
            "rounds": 4,
            "join_ratio": 0.5,
            "batch_size": 16,
            "lr": 0.1,
            "momentum": 0.5,
        },
        "output": {"dir": str(tmp_path / "run"), "checkpoint_every": 2},
    }


@pytest.fixture(autouse=True)
def _no_inherited_auto_workers(monkeypatch):
    """``fedpart.cli.main`` sets FEDPART_AUTO_WORKERS=1 in this process; each test starts
    without it, as a Python caller would."""
    monkeypatch.delenv("FEDPART_AUTO_WORKERS", raising=False)
