"""Property-based fuzzing: hostile config values, types and YAML texts, and byte-level damage to
every file of a run directory. Whatever the input, ``fedpart`` answers without a traceback: it
runs (and a resumed run ends equal to the undamaged one), or it stops with one ``error:`` line
and exit code 2 and leaves the run directory as it found it.

``FEDPART_FUZZ_EXAMPLES`` (default 40) sets the examples per property; set, the examples are
drawn at random instead of the fixed, reproducible CI set. See docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file

import fedpart
from fedpart.algorithms import ALGORITHMS
from fedpart.cli import main
from fedpart.config import Config, load_config
from fedpart.engine.simulation import Simulation
from fedpart.errors import FedpartError

EXAMPLES = int(os.environ.get("FEDPART_FUZZ_EXAMPLES", "40"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize="FEDPART_FUZZ_EXAMPLES" not in os.environ,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

BASE: dict[str, Any] = {
    "seed": 1,
    "dataset": {"name": "digits"},
    "partition": {"kind": "dirichlet", "num_clients": 4, "alpha": 0.5, "min_size": 10},
    "model": {"name": "mlp", "hidden": [8]},
    "algorithm": {"name": "fedavg"},
    "federation": {"rounds": 1, "join_ratio": 1.0, "batch_size": 64, "lr": 0.05},
    "output": {"checkpoint_every": 1},
}

# every key of every section, a few options of models and methods, and keys that do not exist
KEYS = ["seed", "nosection.key", "federation.roundz", "model.hidden", "model.padding"]
KEYS += ["algorithm.mu", "algorithm.head_epochs", "algorithm.lam", "dataset.num_samples"]
for section in dataclasses.fields(Config):
    if dataclasses.is_dataclass(section.type) or isinstance(section.type, str):
        sub = getattr(Config(), section.name)
        if dataclasses.is_dataclass(sub):
            KEYS += [f"{section.name}.{f.name}" for f in dataclasses.fields(sub)]

WORDS = ["1e-3", "1E3", "-1e-3", ".5", "0x10", "nan", ".inf", "auto", "", "a\nb", "~", "null"]
WORDS += ["fedavg", "mlp", "digits", "synthetic", "dirichlet", "iid", "shards", "classes"]
WORDS += ["sequential", "batched", "cuda", "test", "val", "both", "straggle", "skip_client"]
WORDS += sorted(ALGORITHMS)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 12),
    st.sampled_from([2**31, 2**63, -(2**63) - 1, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(WORDS),
    st.text(max_size=12),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


def cheap(cfg: Config) -> bool:
    """Whether an accepted config runs in about a second (the fuzz is about inputs, not load)."""
    f, m = cfg.federation, cfg.model
    ints = [v for v in cfg.algorithm.options.values() if isinstance(v, int)]
    hidden = m.options.get("hidden", [8])
    return (
        f.rounds <= 3
        and f.local_epochs <= 2
        and all(g <= 2 for g in f.local_epochs_groups)
        and cfg.partition.num_clients <= 40
        and cfg.dataset.name in ("digits", "synthetic")
        and not cfg.dataset.options
        and m.name in ("mlp", "fedavgcnn", "lenet5")
        and (not isinstance(hidden, list) or all(isinstance(h, int) and h <= 64 for h in hidden))
        and all(v <= 5 for v in ints)
        and cfg.engine.backend not in ("ray", "processes")
        and cfg.engine.threads <= 2
        and cfg.algorithm.name not in ("pa3dfl", "pfedhn")  # hypernetworks: slow to fuzz
    )


def run_main(args: list[str]) -> tuple[int, list[str]]:
    """``fedpart ARGS`` in this process: exit code and stderr lines (progress bars off)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(args)
    return code, err.getvalue().splitlines()


def assert_one_line(code: int, lines: list[str]) -> None:
    errors = [x for x in lines if not x.startswith("notice: ")]
    assert len(errors) == 1 and errors[0].startswith("error: "), lines
    assert code == 2 or (code == 1 and "training diverged" in errors[0]), (code, lines)


def set_key(data: dict, key: str, value: Any) -> None:
    *sections, last = key.split(".")
    node = data
    for s in sections:
        node = node.setdefault(s, {}) if isinstance(node.get(s, {}), dict) else {}
    node[last] = value


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


def test_fuzz_config_values_types_and_yaml_texts(scratch):
    stats: Counter[str] = Counter()

    @FUZZ
    @given(
        how=st.sampled_from(["yaml", "overrides", "text", "bytes"]),
        changes=st.lists(st.tuples(st.sampled_from(KEYS), VALUES), min_size=1, max_size=3),
        raw=st.one_of(st.text(max_size=200), st.binary(max_size=200)),
    )
    def example(how, changes, raw):
        work = Path(tempfile.mkdtemp(dir=scratch))
        path = work / "c.yaml"
        overrides: list[str] = []
        data = json.loads(json.dumps(BASE))
        if how == "yaml":
            for key, value in changes:
                set_key(data, key, value)
            try:
                path.write_text(yaml.safe_dump(data, allow_unicode=True))
            except yaml.YAMLError:
                return
        elif how == "overrides":
            path.write_text(yaml.safe_dump(data))
            for key, value in changes:
                text = value if isinstance(value, str) else yaml.safe_dump(value).strip()
                overrides.append(f"{key}={text.removesuffix('...').strip()}")
        else:
            content = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
            path.write_bytes(yaml.safe_dump(data).encode() + content if how == "text" else content)
        stats["inputs"] += 1
        try:
            cfg = load_config(path, overrides)
        except FedpartError as exc:
            assert "\n" not in str(exc) or True  # the CLI escapes line breaks; checked below
            code, lines = run_main(["run", str(path), *overrides, "--quiet"])
            assert_one_line(code, lines)
            stats["refused in one line"] += 1
            return
        if not cheap(cfg):
            stats["accepted, too costly to run here"] += 1
            return
        out = work / "run"
        code, lines = run_main(["run", str(path), *overrides, f"output.dir={out}", "--quiet"])
        if code == 0:
            stats["accepted and run"] += 1
            assert (out / "summary.json").is_file()
        else:
            assert_one_line(code, lines)
            stats["accepted, stopped in one line"] += 1
        shutil.rmtree(work, ignore_errors=True)

    example()
    print(f"config fuzz: {dict(stats)}")
    assert stats["inputs"] >= EXAMPLES // 2


def _outputs(run_dir: Path) -> tuple:
    summary = json.loads((run_dir / "summary.json").read_text())
    summary.pop("wall_seconds")
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        row.pop("wall_seconds")
    params = load_file(str(run_dir / "checkpoint" / "state.safetensors"))
    clients = json.loads((run_dir / "clients.json").read_text())
    return summary, rows, clients, {k: v.tolist() for k, v in params.items()}


def _snapshot(run_dir: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(run_dir)): p.read_bytes()
        for p in sorted(run_dir.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


@pytest.fixture(scope="module")
def finished_run(scratch):
    """A finished run, and the same run interrupted in round 3 (its checkpoint after round 2,
    three metrics rows): the directories the damage is done to."""
    cfg = {**BASE, "federation": {**BASE["federation"], "rounds": 4}}
    torch.set_num_threads(1)
    finished = scratch / "finished"
    fedpart.run({**cfg, "output": {"dir": str(finished), "checkpoint_every": 2}})
    stopped = scratch / "interrupted"
    run_round = Simulation.run_round

    def interrupted(self, rnd):
        if rnd == 3:
            raise KeyboardInterrupt
        return run_round(self, rnd)

    Simulation.run_round = interrupted
    try:
        with pytest.raises(KeyboardInterrupt):
            fedpart.run({**cfg, "output": {"dir": str(stopped), "checkpoint_every": 2}})
    finally:
        Simulation.run_round = run_round
    return {"finished": finished, "interrupted": stopped}, _outputs(finished)


def damage(data: bytes, kind: str, where: float, noise: bytes) -> bytes:
    at = int(where * len(data))
    if kind == "flip" and data:
        at = min(at, len(data) - 1)
        return data[:at] + bytes([data[at] ^ (noise[0] if noise else 0xFF) or 1]) + data[at + 1 :]
    if kind == "truncate":
        return data[:at]
    if kind == "insert":
        return data[:at] + noise + data[at:]
    if kind == "overwrite":
        return data[:at] + noise + data[at + len(noise) :]
    if kind == "replace":
        return noise
    return data + noise  # append


def test_fuzz_byte_damage_to_every_run_directory_file(finished_run, scratch):
    dirs, reference = finished_run
    stats: Counter[str] = Counter()

    @FUZZ
    @given(
        state=st.sampled_from(sorted(dirs)),
        pick=st.integers(0, 1000),
        kind=st.sampled_from(["flip", "truncate", "insert", "overwrite", "replace", "append"]),
        where=st.floats(0.0, 1.0),
        noise=st.binary(min_size=1, max_size=16),
        command=st.sampled_from(["resume", "resume", "report"]),  # report: finished runs
        delete=st.booleans(),
    )
    def example(state, pick, kind, where, noise, command, delete):
        run_dir = Path(tempfile.mkdtemp(dir=scratch)) / "run"
        shutil.copytree(dirs[state], run_dir)
        files = sorted(_snapshot(run_dir))
        target = files[pick % len(files)]
        path = run_dir / target
        if delete and kind == "replace":
            path.unlink()
        else:
            path.write_bytes(damage(path.read_bytes(), kind, where, noise))
        before = _snapshot(run_dir)
        stats["inputs"] += 1
        if command == "report" and state == "finished":
            code, lines = run_main(["report", str(run_dir), "--out", str(run_dir.parent)])
            if code != 0:
                assert_one_line(code, lines)
            assert _snapshot(run_dir) == before
            stats[f"report {'read' if code == 0 else 'refused in one line'}"] += 1
            return
        code, lines = run_main(["run", "--resume", str(run_dir), "--quiet"])
        if code == 0:
            assert _outputs(run_dir) == reference, (target, kind, lines)
            stats["resume recovered the same run"] += 1
        else:
            assert_one_line(code, lines)
            assert _snapshot(run_dir) == before, "a refused resume changed the directory"
            stats["resume refused in one line, nothing changed"] += 1
        shutil.rmtree(run_dir.parent, ignore_errors=True)

    example()
    print(f"run-directory fuzz: {dict(stats)}")
    assert stats["inputs"] >= EXAMPLES // 2
