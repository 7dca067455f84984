"""``docs/extending.md`` works as written: every block of the page is written or run, in order,
in an empty directory, with the interpreter that runs the tests (its ``fedpart`` script first
on ``PATH``)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from interpreter import interpreter_env

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "extending.md"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def blocks() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(PAGE.read_text())]


def test_every_block_of_extending_md_runs_as_written(tmp_path):
    env = interpreter_env()
    env.pop("FEDPART_PLUGINS", None)
    outputs = []
    for lang, code in blocks():
        first = code.splitlines()[0] if code.strip() else ""
        if first.startswith("# file: "):
            (tmp_path / first.removeprefix("# file: ").strip()).write_text(code)
            continue
        if lang == "bash":
            for line in code.strip().splitlines():
                proc = subprocess.run(
                    ["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True
                )
                assert proc.returncode == 0, f"{line}\n{proc.stderr[-3000:]}"
                outputs.append(proc.stdout)
        elif lang == "python":
            proc = subprocess.run(
                [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
            )
            assert proc.returncode == 0, f"{code}\n{proc.stderr[-3000:]}"
            outputs.append(proc.stdout)
    text = "\n".join(outputs)
    # what the page promises
    assert "tinycnn" in text and "seqmlp" in text  # fedpart list sees the plugins' models
    mix = json.loads((tmp_path / "runs" / "mix" / "summary.json").read_text())
    assert mix["algorithm"] == "mix" and mix["rounds_completed"] == 4
    wine = json.loads((tmp_path / "runs" / "wine-fedper" / "summary.json").read_text())
    assert wine["dataset"] == "wine" and wine["rounds_completed"] == 8
    assert "wine_data.py" in (tmp_path / "runs" / "wine-fedper" / "config.yaml").read_text()
    head = json.loads((tmp_path / "runs" / "digits-fc2-head" / "summary.json").read_text())
    assert head["model_options"]["head"] == ["fc2"]


def test_the_method_example_is_short():
    """A new user's method beside FedPer in under 50 lines of their own code (the page's
    method file, blank lines and the docstring included)."""
    (code,) = [c for _, c in blocks() if c.startswith("# file: mix_method.py")]
    assert len(code.strip().splitlines()) < 50
