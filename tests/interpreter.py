"""The environment of a command a test starts: the interpreter running the tests runs it.

A test that shells out to a console script (``fedpart``, ``flwr``, ``flower-superlink``) or to a
shell script that starts Python (``benchmarks/gpu_checks.sh``: ``$PYTHON``) passes this
environment, so the command finds the running interpreter's scripts first on ``PATH`` even when
the tests run as ``/path/to/venv/bin/python -m pytest`` without the venv activated.
``tests/test_subprocesses.py`` checks every test that starts a process.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def interpreter_env(**extra: str) -> dict[str, str]:
    bindir = str(Path(sys.executable).parent)
    return {
        **os.environ,
        "PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
        "PYTHON": sys.executable,
        **extra,
    }
