"""What a new user ran into (issue: nothing lost, whatever happens), one test each: torn metrics,
damaged or edited checkpoints, hostile config files and values, zero rounds, impossible
partitions; and every subcommand answering a bad input with one line and exit code 2."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from safetensors.torch import load_file

from fedpart.cli import main
from fedpart.config import load_config
from fedpart.data.partition import partition
from fedpart.engine.simulation import Simulation
from fedpart.errors import DataError


@pytest.fixture
def cfg(tiny_cfg, tmp_path):
    """The tiny config as a YAML file; ``out(name)`` is a run directory under tmp_path."""
    path = tmp_path / "tiny.yaml"
    data = {k: v for k, v in tiny_cfg.items() if k != "output"}
    path.write_text(yaml.safe_dump({**data, "output": {"checkpoint_every": 2}}))
    return path


def run(*args: str) -> int:
    return main([*map(str, args), "--quiet"] if args[0] == "run" else list(map(str, args)))


def one_error_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ")
    return lines[0]


def outputs(run_dir: Path) -> tuple:
    summary = json.loads((run_dir / "summary.json").read_text())
    summary.pop("wall_seconds")
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        row.pop("wall_seconds")
    params = load_file(str(run_dir / "checkpoint" / "state.safetensors"))
    return summary, rows, {k: v.tolist() for k, v in params.items()}


def snapshot(run_dir: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(run_dir)): p.read_bytes()
        for p in sorted(run_dir.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


def interrupted(tmp_path: Path, cfg: Path, name: str, at: int, monkeypatch, *extra) -> Path:
    """A run stopped at the start of round ``at`` (as a kill would leave it)."""
    original = Simulation.run_round

    def stop(self, rnd):
        if rnd == at:
            raise KeyboardInterrupt
        return original(self, rnd)

    monkeypatch.setattr(Simulation, "run_round", stop)
    assert run("run", cfg, f"output.dir={tmp_path / name}", *extra) == 130
    monkeypatch.setattr(Simulation, "run_round", original)
    return tmp_path / name


def test_a_torn_metrics_line_is_dropped_and_later_rows_rewritten(cfg, tmp_path, monkeypatch):
    assert run("run", cfg, f"output.dir={tmp_path / 'straight'}", "federation.rounds=5") == 0
    stopped = interrupted(tmp_path, cfg, "stopped", 3, monkeypatch, "federation.rounds=5")
    metrics = stopped / "metrics.jsonl"
    lines = metrics.read_text().splitlines(keepends=True)
    assert len(lines) == 3  # rounds 0-2 logged; the checkpoint holds rounds 0-1
    # round 2's row edited after the checkpoint, and half a row appended as a power cut leaves it
    metrics.write_text("".join(lines[:2]) + lines[2].replace('"round": 2', '"round": 2, "x": 1'))
    with open(metrics, "a") as fh:
        fh.write('{"round": 3, "participants": 3, "train_lo')
    assert run("run", "--resume", stopped) == 0
    assert outputs(stopped) == outputs(tmp_path / "straight")


def test_a_damaged_checkpoint_is_named_and_the_previous_one_used(cfg, tmp_path, capsys):
    assert run("run", cfg, f"output.dir={tmp_path / 'straight'}", "federation.rounds=6") == 0
    assert run("run", cfg, f"output.dir={tmp_path / 'damaged'}") == 0  # 4 rounds
    state = tmp_path / "damaged" / "checkpoint" / "state.safetensors"
    data = bytearray(state.read_bytes())
    for i in (-40, -400, -4000):
        data[i] ^= 0x55  # a few flipped bytes in the tensors, not the header
    state.write_bytes(bytes(data))
    capsys.readouterr()
    assert run("run", "--resume", tmp_path / "damaged", "federation.rounds=6") == 0
    err = capsys.readouterr().err
    assert f"notice: {state} is damaged" in err and "checkpoint.prev/" in err
    assert outputs(tmp_path / "damaged") == outputs(tmp_path / "straight")


def test_an_edited_round_counter_is_refused_in_one_line(cfg, tmp_path, capsys):
    out = tmp_path / "run"
    assert run("run", cfg, f"output.dir={out}") == 0
    for generation in ("checkpoint", "checkpoint.prev"):
        meta = out / generation / "meta.json"
        meta.write_text(meta.read_text().replace('"rounds_completed": ', '"rounds_completed": -'))
    before = snapshot(out)
    capsys.readouterr()
    assert run("run", "--resume", out) == 2
    line = one_error_line(capsys)
    assert "checkpoint/meta.json is damaged or was edited" in line
    assert snapshot(out) == before
    # a checkpoint without digests (an older version) is checked value by value
    meta = out / "checkpoint" / "meta.json"
    values = json.loads(meta.read_text())
    values.pop("digest")
    meta.write_text(json.dumps(values))
    assert run("run", "--resume", out) == 2
    assert "rounds_completed must be an integer >= 0, got -4" in one_error_line(capsys)


@pytest.mark.parametrize(
    "seed, needle",
    [
        ("-1", "must be >= 0"),
        ("1e30", "at most 2**63-1"),
        ("1e999999999", "at most 2**63-1"),
        ("2.5", "expected an integer"),
    ],
)
def test_bad_seeds_are_one_line(cfg, tmp_path, capsys, seed, needle):
    assert run("run", cfg, f"seed={seed}", f"output.dir={tmp_path / 'o'}") == 2
    line = one_error_line(capsys)
    assert line.startswith("error: seed: ") and needle in line
    assert not (tmp_path / "o").exists()


def test_zero_rounds_finish_cleanly(cfg, tmp_path, capsys):
    out = tmp_path / "zero"
    assert run("run", cfg, "federation.rounds=0", f"output.dir={out}") == 0
    printed = capsys.readouterr().out
    assert "best - (round -)" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rounds_completed"] == 0 and summary["accuracy"]["final"] is not None
    assert run("run", "--resume", out) == 0
    assert run("report", out, "--out", tmp_path) == 0


@pytest.mark.parametrize(
    "content, needle",
    [
        (bytes(range(256)) * 4, "not a text file"),
        (b"seed: 1\x00\n", "contains NUL bytes"),
        (b"seed: \xff\xfe\n", "not UTF-8 text"),
        (b"- a\n- b\n", "the top level must be a mapping"),
        (b"federation: {rounds: [\n", "not valid YAML (line 2)"),
        (b"[" * 5000, "nested too deeply"),
        (b"seed: 1\n" + b"federation:\n  rounds: 1\n  roundz: 2\n", "federation.roundz"),
        (b"seed: " + b"1" * 5000 + b"\n", "not valid YAML"),
        (b"seed: 2024-13-45\n", "not valid YAML"),
    ],
    ids=[
        "binary",
        "nul",
        "invalid-utf8",
        "list",
        "broken-yaml",
        "deep-nesting",
        "unknown-key",
        "5000-digits",
        "bad-date",
    ],
)
def test_hostile_config_files_are_one_line(tmp_path, capsys, content, needle):
    path = tmp_path / "c.yaml"
    path.write_bytes(content)
    for command in (["run", path], ["partition", path], ["compare", path]):
        assert run(*command) == 2
        assert needle in one_error_line(capsys)


def test_empty_and_bom_config_files_are_read(tmp_path):
    (tmp_path / "empty.yaml").write_bytes(b"")
    assert load_config(tmp_path / "empty.yaml").seed == 0
    (tmp_path / "bom.yaml").write_bytes(b"\xef\xbb\xbfseed: 4\n")
    assert load_config(tmp_path / "bom.yaml").seed == 4


def test_exponent_notation_is_a_float(tmp_path):
    path = tmp_path / "lr.yaml"
    path.write_text("federation:\n  lr: 1e-3\n  weight_decay: 5E-4\n")
    cfg = load_config(path, ["federation.momentum=9e-1"])
    assert (cfg.federation.lr, cfg.federation.weight_decay) == (0.001, 0.0005)
    assert cfg.federation.momentum == 0.9
    assert isinstance(cfg.federation.lr, float)


def test_a_thread_count_that_would_stall_is_refused(cfg, capsys):
    assert run("run", cfg, "engine.threads=100000") == 2
    assert "engine.threads: must be <= 1024" in one_error_line(capsys)


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf", "1e400"])
def test_non_finite_numbers_are_refused(cfg, capsys, value):
    assert run("run", cfg, f"federation.lr={value}") == 2
    assert "federation.lr: expected a finite number" in one_error_line(capsys)


def test_an_impossible_dirichlet_partition_fails_fast():
    # 10,000 clients, alpha 0.5, min 5 on an MNIST-sized pool: hopeless after five draws
    labels = np.random.default_rng(0).integers(0, 10, 70_000)
    t0 = time.perf_counter()
    with pytest.raises(DataError) as err:
        partition(labels, 10_000, "dirichlet", np.random.default_rng(0), alpha=0.5, min_size=5)
    assert time.perf_counter() - t0 < 30  # was minutes of redraws
    assert "redrawing is hopeless" in str(err.value)
    assert "lower partition.min_size or raise partition.alpha" in str(err.value)


def test_an_edited_config_yaml_is_refused_unless_restated(cfg, tmp_path, capsys):
    out = tmp_path / "run"
    assert run("run", cfg, f"output.dir={out}", "federation.rounds=2") == 0
    config = out / "config.yaml"
    config.write_text(config.read_text().replace("lr: 0.1", "lr: 0.7"))
    before = snapshot(out)
    capsys.readouterr()
    assert run("run", "--resume", out, "federation.rounds=3") == 2
    assert "differs from the config of its checkpoint at federation.lr" in one_error_line(capsys)
    assert snapshot(out) == before
    assert run("run", "--resume", out, "federation.rounds=3", "federation.lr=0.7") == 0


def test_a_damaged_metrics_line_is_named_and_rebuilt(cfg, tmp_path, capsys):
    out = tmp_path / "run"
    assert run("run", cfg, f"output.dir={out}") == 0
    want = outputs(out)
    metrics = out / "metrics.jsonl"
    lines = metrics.read_bytes().split(b"\n")
    lines[1] = b"\xff\xfe garbage"
    metrics.write_bytes(b"\n".join(lines))
    capsys.readouterr()
    assert run("run", "--resume", out) == 0
    assert "metrics.jsonl did not match its checkpoint's record" in capsys.readouterr().err
    assert outputs(out) == want


def test_a_checkpoint_of_another_model_is_one_line(cfg, tmp_path, capsys):
    out = tmp_path / "run"
    assert run("run", cfg, f"output.dir={out}", "federation.rounds=2") == 0
    capsys.readouterr()
    assert run("run", "--resume", out, "model.hidden=[8]", "federation.rounds=3") == 2
    assert "the checkpoint does not fit this config" in one_error_line(capsys)


def test_killed_before_the_first_checkpoint_starts_again(cfg, tmp_path, monkeypatch, capsys):
    assert run("run", cfg, f"output.dir={tmp_path / 'straight'}") == 0
    stopped = interrupted(tmp_path, cfg, "stopped", 1, monkeypatch)
    assert not (stopped / "checkpoint").exists()
    assert run("run", "--resume", stopped) == 0
    assert "no checkpoint yet; starting again from round 0" in capsys.readouterr().err
    assert outputs(stopped) == outputs(tmp_path / "straight")


@pytest.mark.parametrize(
    "args, needle",
    [
        (["list", "everything"], "invalid choice"),
        (["report", "/nonexistent/run"], "not a fedpart run directory"),
        (["run", "--resume", "/nonexistent/run"], "no such run directory"),
        (["run", "--resume", "."], "not a fedpart run directory"),
        (["bench", "--repeats", "-1"], "--repeats"),
        (["bench", "--seed", "-1"], "--seed"),
        (["compare", "configs/quickstart.yaml", "--algorithms", "nope"], "unknown algorithm"),
        (["run"], "missing CONFIG"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_every_subcommand_answers_bad_input_in_one_line(capsys, args, needle):
    assert main(args) == 2
    assert needle in one_error_line(capsys)


def test_an_unwritable_output_directory_is_one_line(cfg, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert run("run", cfg, f"output.dir={blocker / 'run'}") == 2
    assert "cannot write to" in one_error_line(capsys)


def test_the_last_two_checkpoints_are_kept(cfg, tmp_path):
    out = tmp_path / "run"
    assert run("run", cfg, f"output.dir={out}", "output.checkpoint_every=1") == 0
    rounds = [
        json.loads((out / d / "meta.json").read_text())["rounds_completed"]
        for d in ("checkpoint", "checkpoint.prev")
    ]
    assert rounds == [4, 4]  # the final save after the last round's checkpoint
    tensors = load_file(str(out / "checkpoint" / "state.safetensors"))
    assert all(torch.isfinite(v).all() for v in tensors.values() if v.is_floating_point())


def test_every_algorithm_option_round_trips_through_the_run_config():
    from fedpart.algorithms import ALGORITHMS
    from fedpart.engine.build import resolved_options

    for name, cls in ALGORITHMS.items():
        options = cls.parse_options({})
        text = yaml.safe_dump(resolved_options(options))
        assert cls.parse_options(yaml.safe_load(text)) == options, name


def test_config_yaml_records_every_option_so_a_changed_default_cannot_change_a_resume(
    tiny_cfg, tmp_path, monkeypatch
):
    from fedpart.algorithms import ALGORITHMS
    from fedpart.algorithms.fedprox import FedProxOptions
    from fedpart.api import resume
    from fedpart.config import Config

    cfg = {**tiny_cfg, "algorithm": {"name": "fedprox"}}
    cfg["federation"] = {**cfg["federation"], "rounds": 2}
    Simulation(Config.from_dict(cfg), run_dir=tmp_path / "run").run()
    written = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["algorithm"]
    assert written["mu"] == FedProxOptions().mu == 0.01  # the default, written out
    # a later version with another default resumes the run with the value it started with
    monkeypatch.setattr(FedProxOptions.__init__, "__defaults__", (123.0,))
    assert FedProxOptions().mu == 123.0
    cls = ALGORITHMS["fedprox"]
    parse, used = cls.parse_options, []
    monkeypatch.setattr(cls, "parse_options", lambda raw: used.append(parse(raw)) or used[-1])
    resume(tmp_path / "run", ["federation.rounds=3"])
    assert used and all(o.mu == 0.01 for o in used)
