import pytest
import torch

torch.set_num_threads(1)


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
