"""A user's own dataset, model and method from a package outside the repository, seen by every
command: ``--plugin``, the ``plugins`` config key and an installed entry point; a run killed
and resumed in a new process to the numbers of an uninterrupted one; the model contract and
degenerate setups refused in one line (docs/extending.md)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import fedpart
from fedpart.errors import ConfigError
from interpreter import interpreter_env

PLUGIN = '''
"""A user's package: a dataset, models (good and bad) and a method."""
from dataclasses import dataclass

import torch
from torch import nn

import fedpart
from fedpart.engine.method_state import PerClient


@fedpart.register_dataset("blobs", num_classes=4, input_shape=(6,), description="Gaussian blobs")
def blobs(root, download, n=400):
    g = torch.Generator().manual_seed(1)
    y = torch.arange(n) % 4
    x = torch.randn(n, 6, generator=g) + 2.0 * torch.nn.functional.one_hot(y, 6).float()
    return x, y


class Net(fedpart.BlockModel):
    def __init__(self, num_classes, input_shape, hidden):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(input_shape[0], hidden), nn.ReLU())
        self.head = nn.Linear(hidden, num_classes)  # no _finalize: build_model does it


@fedpart.register_model("usernet", options={"hidden": "hidden units"})
def usernet(*, num_classes, input_shape, hidden=16):
    return Net(num_classes, input_shape, hidden)


class OwnForward(Net):
    def forward(self, x):  # not classify(features(x)): refused
        return self.head(torch.tanh(self.body(x)))


@fedpart.register_model("ownforward")
def own_forward(*, num_classes, input_shape):
    return OwnForward(num_classes, input_shape, 16)


class Plain(nn.Module):
    def __init__(self, num_classes, input_shape):
        super().__init__()
        self.fc = nn.Linear(input_shape[0], num_classes)

    def forward(self, x):
        return self.fc(x)


@fedpart.register_model("plainmodule")
def plain(*, num_classes, input_shape):
    return Plain(num_classes, input_shape)


@fedpart.register_model("onelayer")
def one_layer(*, num_classes, input_shape):
    return nn.Sequential(nn.Linear(input_shape[0], num_classes))


@dataclass
class KeepOptions:
    keep: float = fedpart.option(0.5, "share of the personal model kept", ge=0, le=1)


@fedpart.register_algorithm("keepmix")
class KeepMix(fedpart.Algorithm):
    """FedAvg whose clients keep a running personal model: v_i <- keep v_i + (1 - keep) w_i."""

    summary = "FedAvg + a per-client running average of the trained models"
    Options = KeepOptions
    backends = ("sequential",)
    checkpointed = (PerClient("personal"),)

    def setup(self):
        self.personal = {}

    def local_update(self, rnd, client):
        result = self.ctx.train(rnd, client, self.ctx.store.client_state(client))
        old = self.personal.get(client, result.state)
        k = self.options.keep
        self.personal[client] = {
            n: k * old[n] + (1 - k) * t if t.is_floating_point() else t
            for n, t in result.state.items()
        }
        return result

    def eval_state(self, client):
        return self.personal.get(client, self.ctx.store.client_state(client))
'''

CONFIG = """
dataset: {name: blobs}
partition: {num_clients: 6, alpha: 1.0, min_size: 8}
model: {name: usernet}
algorithm: {name: keepmix, keep: 0.25}
federation: {rounds: 4, lr: 0.1, batch_size: 16}
engine: {backend: sequential, threads: 1}
output: {checkpoint_every: 1}
"""


@pytest.fixture(scope="module")
def user(tmp_path_factory):
    """The user's package (``userpkg``), a config naming nothing of it, and an environment
    where it is importable but not installed."""
    root = tmp_path_factory.mktemp("user")
    (root / "src" / "userpkg").mkdir(parents=True)
    (root / "src" / "userpkg" / "__init__.py").write_text(textwrap.dedent(PLUGIN))
    (root / "run.yaml").write_text(CONFIG)
    return root


def fedpart_cli(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fedpart.cli", *args],
        cwd=cwd,
        env=interpreter_env(**env),
        capture_output=True,
        text=True,
    )


def numbers(run_dir: Path) -> tuple[list[dict], dict]:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    summary = json.loads((run_dir / "summary.json").read_text())
    for row in rows:
        row.pop("wall_seconds", None)
    for key in ("wall_seconds",):
        summary.pop(key, None)
    return rows, summary


def test_plugin_by_flag_by_config_and_by_entry_point_resumed_in_a_new_process(user, tmp_path):
    src = str(user / "src")
    # --plugin: fedpart list sees all three
    listed = fedpart_cli("--plugin", "userpkg", "list", cwd=user, PYTHONPATH=src)
    assert listed.returncode == 0, listed.stderr
    for name in ("blobs", "usernet", "keepmix"):
        assert f"  {name}" in listed.stdout, name
    # the uninterrupted run, the plugin named by the flag
    straight = tmp_path / "straight"
    done = fedpart_cli(
        "run", "run.yaml", "--plugin", "userpkg", f"output.dir={straight}", "--quiet",
        cwd=user, PYTHONPATH=src,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "userpkg" in (straight / "config.yaml").read_text()
    # the same run killed at the start of round 3 (rounds 0-1 checkpointed), then resumed in a
    # new process that names no plugin: config.yaml does
    killed = tmp_path / "killed"
    crash = fedpart_cli(
        "--plugin", "userpkg", "run", "run.yaml", f"output.dir={killed}", "--quiet",
        cwd=user, PYTHONPATH=src, FEDPART_CRASH_AT="round.start@3",
    )  # fmt: skip
    assert crash.returncode != 0 and not (killed / "summary.json").exists()
    resumed = fedpart_cli("run", "--resume", str(killed), "--quiet", cwd=tmp_path, PYTHONPATH=src)
    assert resumed.returncode == 0, resumed.stderr
    assert numbers(killed) == numbers(straight)
    # the config key names it
    keyed = user / "keyed.yaml"
    keyed.write_text("plugins: [userpkg]\n" + CONFIG)
    by_key = fedpart_cli(
        "run", str(keyed), f"output.dir={tmp_path / 'keyed'}", "federation.rounds=1", "--quiet",
        cwd=tmp_path, PYTHONPATH=src,
    )  # fmt: skip
    assert by_key.returncode == 0, by_key.stderr
    # an installed package's entry point: nothing names it
    site = tmp_path / "site"
    info = site / "userpkg-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: userpkg\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[fedpart.plugins]\nuserpkg = userpkg\n")
    path = f"{site}:{src}"
    installed = fedpart_cli("list", "algorithms", cwd=tmp_path, PYTHONPATH=path)
    assert installed.returncode == 0 and "  keepmix" in installed.stdout, installed.stderr
    report = fedpart_cli("report", str(straight), str(tmp_path / "keyed"), cwd=tmp_path,
                         PYTHONPATH=path)  # fmt: skip
    assert report.returncode == 0, report.stderr
    header = next(x for x in report.stdout.splitlines() if x.startswith("| run |"))
    assert "| rounds |" in header and "‡" in report.stdout  # the runs differ in rounds
    assert report.stdout.startswith("All runs: dataset blobs, model usernet")  # the rest agrees


@pytest.mark.parametrize(
    ("overrides", "key", "words"),
    [
        (["model.name=ownforward"], "model.name", "forward(x) differs from classify(features(x))"),
        (["model.name=plainmodule"], "model.name", "not a fedpart BlockModel"),
        (["model.name=onelayer", "algorithm.name=fedper"], "model.head", "has no body"),
        (["model.name=usernet", "algorithm.name=FedPr"], "algorithm.name", "did you mean 'fedper'"),
        (["model.head=[nope]"], "model.head", "must name the last block(s)"),
        (["--plugin", "nosuchpackage"], "--plugin", "cannot import plugin 'nosuchpackage'"),
    ],
)
def test_the_model_contract_and_degenerate_setups_are_one_line(user, tmp_path, overrides, key,
                                                                words):  # fmt: skip
    proc = fedpart_cli(
        "--plugin", "userpkg", "run", "run.yaml", *overrides, f"output.dir={tmp_path}/r",
        "--quiet", cwd=user, PYTHONPATH=str(user / "src"),
    )  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    *notices, error = proc.stderr.strip().splitlines()  # notices: options dropped on a switch
    assert all(n.startswith("notice: ") for n in notices), proc.stderr
    assert error.startswith(f"error: {key}: ") and words in error, proc.stderr


def test_what_works_now(user, tmp_path):
    """A plain nn.Sequential, a model that never calls _finalize under FedRoD (a second head
    sized from feature_dim), and a method name in another case run."""
    for overrides in (
        ["model.name=onelayer", "algorithm.name=fedavg"],
        ["model.name=usernet", "algorithm.name=FedRoD"],
    ):
        proc = fedpart_cli(
            "--plugin", "userpkg", "run", "run.yaml", *overrides, "federation.rounds=1",
            f"output.dir={tmp_path}/{overrides[1]}", "--quiet", cwd=user,
            PYTHONPATH=str(user / "src"),
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr


def test_registration_errors_are_one_line():
    with pytest.raises(ConfigError, match="the name is taken"):
        fedpart.register_dataset("digits", num_classes=10, input_shape=(1, 8, 8))(lambda r, d: 0)
    with pytest.raises(ConfigError, match="lower-case"):
        fedpart.register_model("MyNet")
    with pytest.raises(ConfigError, match="input_shape"):
        fedpart.register_dataset("x2", num_classes=3, input_shape=(2, 3))
    with pytest.raises(ConfigError, match="not a subclass"):
        fedpart.register_algorithm("thing")(object)
    with pytest.raises(ConfigError, match="taken"):

        @fedpart.register_algorithm("fedavg")
        class Other(fedpart.Algorithm):
            pass
