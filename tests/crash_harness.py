"""Child processes for the fault-injection tests: runs that can be killed with SIGKILL.

Children are forked from a multiprocessing fork server that has imported torch, fedpart and the
dataset reader once, so each run costs a fraction of a second instead of a fresh interpreter.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from pathlib import Path
from typing import Any

import torch

import fedpart
from fedpart.tracking.faults import CRASH_ENV, TRACE_ENV
from fedpart.tracking.run_dir import RunDir

#: the small run every kill interrupts: 7 rounds, a checkpoint every 2 (so the last rounds are
#: rewritten from a checkpoint that is not the final one), a tiny MLP on the bundled digits
CONFIG: dict[str, Any] = {
    "seed": 5,
    "dataset": {"name": "digits"},
    "partition": {"kind": "dirichlet", "num_clients": 6, "alpha": 0.5, "min_size": 20},
    "model": {"name": "mlp", "hidden": [16]},
    "algorithm": {"name": "fedavg"},
    "federation": {"rounds": 7, "join_ratio": 0.5, "batch_size": 32, "lr": 0.1},
    "output": {"checkpoint_every": 2},
}


#: what the fork server imports once (by name: it does not see the tests' directory)
PRELOAD = ["fedpart.api", "sklearn.datasets", "torch._dynamo", "torch.utils.flop_counter"]


def context() -> Any:
    """The fork-server context, with torch, fedpart and the readers preloaded."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def child(
    mode: str, run_dir: str, crash_at: str | None, trace: str | None, config: dict | None
) -> None:
    """Start (``run``) or resume (``resume``) the run in ``run_dir``; crash at ``crash_at``."""
    os.environ.pop(CRASH_ENV, None)
    os.environ.pop(TRACE_ENV, None)
    if crash_at:
        os.environ[CRASH_ENV] = crash_at
    if trace:
        os.environ[TRACE_ENV] = trace
    torch.set_num_threads(1)
    sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - notices of the resumes are expected
    cfg = dict(config or CONFIG)
    if mode == "run":
        fedpart.run({**cfg, "output": {**cfg["output"], "dir": run_dir}})
    else:
        fedpart.resume(run_dir)


def hold_lock(run_dir: str, held: Any, release: Any) -> None:
    """Hold the lock of ``run_dir`` until ``release`` is set (a second process for the tests)."""
    rd = RunDir(Path(run_dir))
    rd.acquire()
    held.set()
    release.wait(30)
    rd.release()
