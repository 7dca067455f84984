"""output.tensorboard: the event files hold every metrics.jsonl number per round, read back with
TensorBoard's own reader; a run killed and resumed has each round exactly once."""

import json
import os
import subprocess
import sys

import pytest

import fedpart

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import (  # noqa: E402
    EventAccumulator,
)

from fedpart.tracking.tensorboard import flatten  # noqa: E402

TINY = """\
seed: 0
dataset: {name: digits}
partition: {kind: dirichlet, num_clients: 6, alpha: 0.5, min_size: 20, split: [0.75, 0.0, 0.25]}
model: {name: mlp, hidden: 16}
algorithm: {name: fedavg}
federation: {rounds: 4, join_ratio: 0.5, local_epochs: 1, batch_size: 32, lr: 0.05}
engine: {backend: sequential, threads: 1}
output:
  checkpoint_every: 2
  tensorboard: true
"""


def _events(run_dir):
    acc = EventAccumulator(
        str(run_dir / "tensorboard"), size_guidance={"scalars": 0, "histograms": 0, "tensors": 0}
    )
    acc.Reload()
    return acc


def test_flatten_nests_and_drops_non_numbers():
    row = {"round": 3, "accuracy": 0.5, "fedcmd": {"layer": 2, "tau": {"a": 1.5}}, "x": None}
    row |= {"ok": True, "name": "a", "nan": float("nan")}
    assert flatten(row) == {"accuracy": 0.5, "fedcmd/layer": 2.0, "fedcmd/tau/a": 1.5}


def test_killed_and_resumed_run_has_every_round_once(tmp_path):
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(TINY)
    out = tmp_path / "RUN"
    cmd = [sys.executable, "-m", "fedpart.cli", "run", str(cfg), f"output.dir={out}", "--quiet"]
    # killed at the start of round 3: rounds 0-2 logged, the checkpoint is at round 2
    env = {**os.environ, "FEDPART_CRASH_AT": "round.start@4"}
    assert subprocess.run(cmd, env=env, capture_output=True).returncode != 0
    fedpart.resume(out)  # in this process: one interpreter start less
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    acc = _events(out)
    tags = acc.Tags()
    for key in ("accuracy", "accuracy_weighted", "loss", "up_bytes", "train_loss", "lr"):
        assert key in tags["scalars"], key
        points = acc.Scalars(key)
        assert [p.step for p in points] == [r["round"] for r in rows if r.get(key) is not None]
        for p, r in zip(points, (r for r in rows if r.get(key) is not None), strict=True):
            assert p.value == pytest.approx(r[key], rel=1e-6)
    assert [h.step for h in acc.Histograms("clients/accuracy")] == [0, 1, 2, 3]
    assert "config/text_summary" in tags["tensors"]  # add_text: a string tensor
