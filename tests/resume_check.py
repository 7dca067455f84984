"""The shared resume check: a run stopped after round 2 and resumed to 4 equals a straight run."""

import json
from pathlib import Path

import torch
from safetensors.torch import load_file

import fedpart


def assert_resume_bit_identical(base: dict, tmp_path: Path) -> dict[str, torch.Tensor]:
    """Run ``base`` for 4 rounds straight and stopped at 2 then resumed (checkpoints every 2);
    assert equal summaries and bit-identical checkpoints; return the checkpoint's tensors."""
    rounds_4 = {**base, "federation": {**base["federation"], "rounds": 4}}
    rounds_2 = {**base, "federation": {**base["federation"], "rounds": 2}}
    fedpart.run({**rounds_4, "output": {"dir": str(tmp_path / "straight"), "checkpoint_every": 2}})
    fedpart.run({**rounds_2, "output": {"dir": str(tmp_path / "stopped"), "checkpoint_every": 2}})
    fedpart.resume(tmp_path / "stopped", ["federation.rounds=4"])
    s1 = json.loads((tmp_path / "straight" / "summary.json").read_text())
    s2 = json.loads((tmp_path / "stopped" / "summary.json").read_text())
    s1.pop("wall_seconds"), s2.pop("wall_seconds")
    assert s1 == s2
    p1 = load_file(str(tmp_path / "straight" / "checkpoint" / "state.safetensors"))
    p2 = load_file(str(tmp_path / "stopped" / "checkpoint" / "state.safetensors"))
    assert p1.keys() == p2.keys()
    assert all(torch.equal(p1[k], p2[k]) for k in p1)
    return p1


def assert_same_run(a: fedpart.api.Result, b: fedpart.api.Result) -> None:
    """Two runs of one config (e.g. on two backends) gave the same numbers: every client's
    model bit for bit and the same summary (wall time and the backend's name aside)."""
    for c in range(a.simulation.data.num_clients):
        x, y = a.simulation.algorithm.eval_state(c), b.simulation.algorithm.eval_state(c)
        assert all(torch.equal(x[k], y[k]) for k in x)
    s1, s2 = dict(a.summary), dict(b.summary)
    s1.pop("wall_seconds"), s2.pop("wall_seconds")
    s1.pop("backend"), s2.pop("backend")
    assert s1 == s2


QUICKSTART = Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml"


def run_quickstart_uniform(algorithm: str, run_dir: Path) -> object:
    """``fedpart run configs/quickstart.yaml algorithm.name=X federation.capacity=uniform
    federation.rounds=2`` into ``run_dir`` through the CLI; returns its exit code."""
    from fedpart.cli import main

    return main(
        [
            "run",
            str(QUICKSTART),
            f"algorithm.name={algorithm}",
            "federation.capacity=uniform",
            "federation.rounds=2",
            f"output.dir={run_dir}",
            "--quiet",
        ]
    )
