"""Crash points: named instants at which the fault-injection tests kill a run with SIGKILL.

A run passes through these points while it writes its directory (``metrics.append``,
``checkpoint.state`` ...; :data:`POINTS`). With the environment variable
``FEDPART_CRASH_AT=point@n`` the process kills itself (SIGKILL, no cleanup, exactly like a
scheduler or the OOM killer) the n-th time it reaches ``point``; points named ``*.torn`` first
write part of the bytes they were about to write, as a power cut mid-write would leave them.
With ``FEDPART_CRASH_TRACE=FILE`` every pass is appended to FILE, so a test can list the instants
of an uninterrupted run and choose among them. Unset (the normal case) a point costs one
environment lookup.
"""

from __future__ import annotations

import os
import signal
from typing import NoReturn

CRASH_ENV = "FEDPART_CRASH_AT"
TRACE_ENV = "FEDPART_CRASH_TRACE"

#: every crash point, in the order a run meets them
POINTS = (
    "run.start",  # the directory is locked, nothing written yet
    "run.config",  # config.yaml written
    "round.start",  # before a round's training
    "metrics.torn",  # half of a metrics.jsonl row appended
    "metrics.append",  # a whole row appended
    "checkpoint.state",  # state.safetensors of the new checkpoint written, meta.json not yet
    "checkpoint.written",  # the new checkpoint complete under its temporary name
    "checkpoint.rotated",  # the old checkpoint renamed to checkpoint.prev, the new one not yet in place
    "checkpoint.done",  # the new checkpoint in place
    "file.torn",  # half of a file written atomically (summary.json, config.yaml ...)
    "resume.loaded",  # a resume has read its checkpoint, nothing rewritten yet
    "resume.metrics",  # a resume has rewritten metrics.jsonl
    "run.end",  # summary.json and clients.json written
)

_passes: dict[str, int] = {}


def crash_point(name: str) -> bool:
    """Whether this pass of ``name`` is the one ``FEDPART_CRASH_AT`` names (then call
    :func:`crash`, after writing the partial bytes of a ``*.torn`` point)."""
    spec = os.environ.get(CRASH_ENV)
    trace = os.environ.get(TRACE_ENV)
    if not spec and not trace:
        return False
    count = _passes[name] = _passes.get(name, 0) + 1
    if trace:
        with open(trace, "a") as fh:
            fh.write(f"{name}@{count}\n")
    if not spec:
        return False
    point, _, nth = spec.partition("@")
    return point == name and count == int(nth or 1)


def crash() -> NoReturn:
    """Kill this process at once with SIGKILL (no ``finally`` blocks, no flushing)."""
    os.kill(os.getpid(), getattr(signal, "SIGKILL", signal.SIGTERM))
    raise SystemExit(137)  # pragma: no cover - only where SIGKILL does not exist
