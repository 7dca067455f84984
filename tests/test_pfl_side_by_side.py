"""The pfl-research side-by-side runner (``benchmarks/pfl_side_by_side.py``, issue 41) runs both
tools on a tiny workload and prints its table. Skipped where pfl-research is not installed (it
is not a test dependency)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "pfl_side_by_side.py"


def test_quick_run_prints_both_tools_in_both_settings():
    pytest.importorskip("pfl", reason="pfl-research (pip install pfl) is not installed")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT / "src"), env.get("PYTHONPATH", "")) if p
    )
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    for setting in ("one thread", "defaults"):
        for tool in ("pfl", "fedpart"):
            assert f"| {setting} | {tool} | " in out, out
        assert f"{setting}: pfl / fedpart = " in out, out
