"""The files of one run.

``config.yaml`` (resolved config), ``metrics.jsonl`` (one object per evaluated round),
``summary.json``, ``clients.json`` (final per-client accuracies) and ``checkpoint/``
(``state.safetensors`` + ``meta.json``; no pickle).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from fedpart.errors import FedpartError
from fedpart.tracking.faults import crash, crash_point
from fedpart.tracking.metrics import MetricsLineError, parse_metrics

RUN_FILES = ("metrics.jsonl", "summary.json", "checkpoint")


class DamagedCheckpointError(Exception):
    """One checkpoint directory failed verification (internal: resume then tries the next)."""


class RunDir:
    """A run's output directory.

    Every file is written atomically (a temporary file, fsync, rename) except ``metrics.jsonl``,
    which is append-only: a row is one ``write`` followed by fsync, and a torn last line left by a
    power cut is dropped on resume. Checkpoints keep two generations (``checkpoint/`` and
    ``checkpoint.prev/``), each with a SHA-256 digest of its files in ``meta.json``. While a run
    writes, it holds an exclusive lock on ``.lock`` in the directory.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._lock: Any = None

    # ----------------------------------------------------------------- basics
    def holds_run(self) -> bool:
        return any((self.path / name).exists() for name in RUN_FILES)

    def prepare(self, overwrite: bool) -> None:
        """Create the directory; refuse to clobber an earlier run unless ``overwrite``."""
        if self.holds_run() and not overwrite:
            raise FedpartError(
                f"output.dir: {self.path} already holds a run; continue it with "
                f"'fedpart run --resume {self.path}', choose another output.dir, "
                "or set output.overwrite=true"
            )
        self.path.mkdir(parents=True, exist_ok=True)
        if overwrite:
            for name in ("metrics.jsonl", "summary.json", "clients.json"):
                (self.path / name).unlink(missing_ok=True)
            # an earlier run's checkpoints must not be mistaken for this run's by a resume
            for name in CHECKPOINT_DIRS:
                if (self.path / name).is_dir():
                    shutil.rmtree(self.path / name)

    # ------------------------------------------------------------------- lock
    def acquire(self) -> None:
        """Take the exclusive lock on the directory (created if missing) for this process.

        A second process that tries while the first holds it gets a one-line
        :class:`FedpartError`; the lock goes with the process, however it ends.
        """
        if self._lock is not None:
            return
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            fh = open(self.path / LOCK_FILE, "a+")  # noqa: SIM115 - held until release()
        except OSError as exc:
            raise FedpartError(f"output.dir: cannot write to {self.path} ({exc.strerror})") from exc
        try:
            _lock_file(fh)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip()
            fh.close()
            pid = f" (pid {holder})" if holder.isdigit() else ""
            raise FedpartError(
                f"{self.path} is in use by another fedpart process{pid}; wait until it ends "
                "or choose another output.dir"
            ) from None
        except OSError:
            # a file system without locks (some network mounts): run unguarded rather than not
            print(f"notice: {self.path} cannot be locked on this file system", file=sys.stderr)
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        self._lock = fh

    @property
    def locked(self) -> bool:
        """Whether this handle holds the directory's lock."""
        return self._lock is not None

    def release(self) -> None:
        """Give the lock back (closing the file releases it)."""
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    # ----------------------------------------------------------------- writing
    def write_text(self, name: str, text: str) -> None:
        """Replace ``name`` atomically: a reader (or a resume after a crash) sees the old or the
        new content, never a mixture."""
        tmp = self.path / f".{name}.tmp"
        _write_synced(tmp, "wb", text.encode("utf-8"), "file.torn")
        os.replace(tmp, self.path / name)
        _fsync_dir(self.path)

    def write_json(self, name: str, obj: Any) -> None:
        self.write_text(name, json.dumps(obj, indent=2, sort_keys=False) + "\n")

    # ---------------------------------------------------------------- metrics
    def write_metrics(self, rows: list[dict[str, Any]]) -> None:
        self.write_text("metrics.jsonl", "".join(json.dumps(r) + "\n" for r in rows))

    def append_metrics(self, row: dict[str, Any]) -> None:
        """Append one row as one ``write`` and fsync it before the run goes on."""
        data = (json.dumps(row) + "\n").encode("utf-8")
        _write_synced(self.path / "metrics.jsonl", "ab", data, "metrics.torn")
        if crash_point("metrics.append"):
            crash()

    def read_metrics(self) -> tuple[list[dict[str, Any]], int | None]:
        """The rows of ``metrics.jsonl`` before its first damaged line, and that line's number
        (``None`` when every line is sound). A last line without its newline is a torn append:
        it is dropped and not reported."""
        path = self.path / "metrics.jsonl"
        if not path.is_file():
            return [], None
        rows: list[dict[str, Any]] = []
        try:
            for lineno, row in parse_metrics(path.read_bytes()):
                if not isinstance(row, dict) or not _is_count(row.get("round")):
                    return rows, lineno
                rows.append(row)
        except MetricsLineError as exc:
            return rows, exc.line
        return rows, None

    # ------------------------------------------------------------ checkpoints
    def has_checkpoint(self) -> bool:
        """Whether any checkpoint generation is present (sound or not)."""
        return any((self.path / name / "meta.json").exists() for name in CHECKPOINT_ORDER)

    def save_checkpoint(self, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        """Write a new ``checkpoint/`` and keep the one it replaces as ``checkpoint.prev/``.

        The new checkpoint is written completely under ``.checkpoint.tmp`` (files fsynced, their
        digests in its ``meta.json``) before two renames put it in place, so a crash at any
        instant leaves at least one complete, verifiable checkpoint.
        """
        final = self.path / "checkpoint"
        prev = self.path / "checkpoint.prev"
        tmp = self.path / ".checkpoint.tmp"
        trash = self.path / ".checkpoint.del"
        for stale in (tmp, trash, self.path / ".checkpoint.old"):
            if stale.is_dir():
                shutil.rmtree(stale)
        tmp.mkdir()
        state = tmp / "state.safetensors"
        save_file(
            # a copy each: tensors may be views of one storage (rows of a mixed stack), which
            # safetensors refuses to write
            {
                k: v.detach().cpu().clone(memory_format=torch.contiguous_format)
                for k, v in tensors.items()
            },
            str(state),
        )
        with open(state, "rb+") as fh:
            os.fsync(fh.fileno())
        if crash_point("checkpoint.state"):
            crash()
        meta = {**meta, "files": {"state.safetensors": _file_digest(state)}}
        meta["digest"] = _meta_digest(meta)
        with open(tmp / "meta.json", "wb") as fh:
            fh.write((json.dumps(meta, indent=2) + "\n").encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())
        _fsync_dir(tmp)
        if crash_point("checkpoint.written"):
            crash()
        if final.is_dir():
            if prev.is_dir():
                os.replace(prev, trash)
            os.replace(final, prev)
            if crash_point("checkpoint.rotated"):
                crash()
        os.replace(tmp, final)
        _fsync_dir(self.path)
        if trash.is_dir():
            shutil.rmtree(trash)
        if crash_point("checkpoint.done"):
            crash()

    def load_checkpoint(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """The newest checkpoint that passes verification, as (tensors, meta).

        ``checkpoint/`` is tried first, then a complete ``.checkpoint.tmp/`` (a crash between
        writing a checkpoint and putting it in place), then ``checkpoint.prev/``. A generation
        that fails is named in a notice on stderr when another one is used, and in the error
        when none is left.
        """
        damaged: list[str] = []
        for name in CHECKPOINT_ORDER:
            where = self.path / name
            if not (where / "meta.json").exists() and not (where / "state.safetensors").exists():
                continue
            try:
                tensors, meta = verify_checkpoint(where)
            except DamagedCheckpointError as exc:
                if name != ".checkpoint.tmp":  # an unfinished write is not damage
                    damaged.append(str(exc))
                continue
            for problem in damaged:
                print(
                    f"notice: {problem}; resuming from {where.name}/ instead "
                    f"(round {meta['rounds_completed']})",
                    file=sys.stderr,
                )
            return tensors, meta
        if damaged:
            raise FedpartError(
                "; ".join(damaged) + "; no sound checkpoint is left to resume from: start the "
                "run again (output.overwrite=true) or restore the files"
            )
        raise FedpartError(
            f"{self.path}: no checkpoint to resume from (expected {self.path / 'checkpoint'}/meta.json)"
        )


#: where a resume looks for a checkpoint, in order: the current one, one written completely
#: but not yet put in place, the previous one
CHECKPOINT_ORDER = ("checkpoint", ".checkpoint.tmp", "checkpoint.prev")
#: every checkpoint directory a run may leave, including one being deleted
CHECKPOINT_DIRS = (*CHECKPOINT_ORDER, ".checkpoint.del")
LOCK_FILE = ".lock"


def _lock_file(fh: Any) -> None:
    """Take a non-blocking exclusive lock on an open file; BlockingIOError when it is held."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        import msvcrt

        try:
            msvcrt.locking(fh.fileno(), msvcrt.LK_NBLCK, 1)
        except OSError as exc:
            raise BlockingIOError(str(exc)) from exc
        return
    fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)


def _fsync_dir(path: Path) -> None:
    """Make a rename in ``path`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - Windows
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - file systems without directory fsync
        pass
    finally:
        os.close(fd)


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def _meta_digest(meta: dict[str, Any]) -> str:
    """The digest of ``meta`` without its own ``digest`` entry, over a canonical JSON text (so
    it survives re-indentation but not a changed value)."""
    body = {k: v for k, v in meta.items() if k != "digest"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def verify_checkpoint(where: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Read one checkpoint directory, checking its digests and the types of ``meta.json``.

    Raises:
        DamagedCheckpointError: with one line naming the file and what is wrong with it.
    """
    meta_path = where / "meta.json"
    state_path = where / "state.safetensors"
    try:
        meta = json.loads(meta_path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise DamagedCheckpointError(f"{meta_path} is missing") from None
    except (OSError, ValueError) as exc:
        raise DamagedCheckpointError(f"{meta_path} is damaged (not readable JSON)") from exc
    if not isinstance(meta, dict):
        raise DamagedCheckpointError(f"{meta_path} is damaged (not a JSON object)")
    if "digest" in meta and meta["digest"] != _meta_digest(meta):
        raise DamagedCheckpointError(
            f"{meta_path} is damaged or was edited (its digest does not match)"
        )
    problem = _meta_problem(meta)
    if problem:
        raise DamagedCheckpointError(f"{meta_path} is damaged or was edited ({problem})")
    if not state_path.is_file():
        raise DamagedCheckpointError(f"{state_path} is missing")
    expected = meta.get("files", {}).get("state.safetensors")
    if expected is not None and _file_digest(state_path) != expected:
        raise DamagedCheckpointError(
            f"{state_path} is damaged (its digest does not match meta.json)"
        )
    try:
        tensors = load_file(str(state_path))
    except Exception as exc:  # noqa: BLE001 - any decoding failure means a damaged file
        raise DamagedCheckpointError(
            f"{state_path} is damaged (not a readable safetensors file)"
        ) from exc
    return tensors, meta


def _meta_problem(meta: dict[str, Any]) -> str | None:
    """What is wrong with the values of a checkpoint's ``meta.json`` (None: nothing)."""
    if not _is_count(meta.get("rounds_completed")):
        return f"rounds_completed must be an integer >= 0, got {meta.get('rounds_completed')!r}"
    checks = (
        ("finished", lambda v: isinstance(v, bool), "true or false"),
        ("elapsed", lambda v: isinstance(v, int | float) and not isinstance(v, bool), "a number"),
        ("client_accuracy", lambda v: isinstance(v, list), "a list"),
        ("final_row", lambda v: v is None or isinstance(v, dict), "an object or null"),
        ("algorithm_state", lambda v: isinstance(v, dict), "an object"),
        ("config", lambda v: isinstance(v, dict), "an object"),
        ("files", lambda v: isinstance(v, dict), "an object"),
        ("late", lambda v: isinstance(v, dict), "an object"),
    )
    for key, ok, what in checks:
        if key in meta and not ok(meta[key]):
            return f"{key} must be {what}, got {meta[key]!r}"
    rows = meta.get("rows")
    if rows is not None:
        if not isinstance(rows, list) or not all(
            isinstance(r, dict) and _is_count(r.get("round")) for r in rows
        ):
            return "rows must be a list of metrics rows"
    return None


def _write_synced(path: Path, mode: str, data: bytes, torn_point: str) -> None:
    """One ``write`` of ``data`` and an fsync before returning; the fault-injection point
    ``torn_point`` writes half of it and dies (a torn write)."""
    with open(path, mode) as fh:
        if crash_point(torn_point):
            fh.write(data[: len(data) // 2])
            fh.flush()
            crash()
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
