"""The process backend (worker processes on this machine) gives the sequential backend's numbers
bit for bit, for a centralized, a cloud-edge (per-client aggregation) and a decentralized method."""

import pytest

import fedpart
from resume_check import assert_same_run


@pytest.mark.parametrize(
    ("algorithm", "extra"),
    [
        ("fedper", {}),
        ("fedcmd", {"algorithm": {"name": "fedcmd", "selection_rounds": 1}}),
        ("dfedpgp", {"topology": {"neighbors": 2}}),
    ],
)
def test_processes_equal_sequential(tiny_cfg, algorithm, extra):
    cfg = {
        **tiny_cfg,
        "algorithm": {"name": algorithm},
        "federation": {**tiny_cfg["federation"], "rounds": 3},
        "evaluation": {"participants": "both"},
        **extra,
    }
    seq = fedpart.run({**cfg, "engine": {"threads": 1, "backend": "sequential"}}, write=False)
    par = fedpart.run(
        {**cfg, "engine": {"threads": 1, "backend": "processes", "workers": 2}}, write=False
    )
    assert par.simulation.backend == "processes"
    assert par.simulation._remote is None  # the workers are stopped at the end of the run
    assert_same_run(seq, par)


def test_methods_with_their_own_local_update_refuse_processes(tiny_cfg):
    cfg = {**tiny_cfg, "algorithm": {"name": "ditto"}, "engine": {"backend": "processes"}}
    with pytest.raises(fedpart.FedpartError, match="engine.backend"):
        fedpart.run(cfg, write=False)


def test_jobs_ship_only_their_own_client_state():
    """A start state made of views into a stacked [clients × ...] tensor (a decentralized
    method's mixed states) is copied before pickling, so a job carries one client's tensors,
    not every client's (100 DFedPGP clients once sent 230 MB per job and exhausted memory)."""
    import pickle

    import torch

    from fedpart.engine.store import compact_state

    stacked = torch.randn(100, 1000)
    own = torch.randn(1000)
    state = {"w": stacked[7], "b": own}
    small = compact_state(state)
    assert torch.equal(small["w"], stacked[7])
    assert small["b"] is own  # a tensor owning its storage is not copied
    assert len(pickle.dumps(small)) < 3 * 1000 * 4 + 4096
    assert len(pickle.dumps(state)) > 100 * 1000 * 4
