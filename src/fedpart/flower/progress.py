"""What a Flower run tells its user: a line per round on the ServerApp's standard output (which
``flwr run --stream`` and the SuperLink's log show), a final line saying whether the run
completed or failed and where its directory is, and ``failed.json`` in that directory when it
failed, which ``fedpart flower status RUN_DIR`` reads."""

from __future__ import annotations

import datetime
import logging
import time
from pathlib import Path
from typing import Any

from fedpart.engine.loop import LoopRun, Observer, Row
from fedpart.errors import FedpartError
from fedpart.formatting import pct
from fedpart.tracking.run_dir import RunDir

#: the record a failed Flower run leaves in its directory (removed when the run starts again)
FAILED = "failed.json"
#: how a user continues a stopped Flower run
RESUME = "; continue it with resume=true"


def say(line: str) -> None:
    """A line of the ServerApp's own output, flushed at once (the stream shows it as it comes)."""
    print(f"fedpart: {line}", flush=True)


def _accuracy(value: float | None) -> str:
    return "not evaluated" if value is None else f"accuracy {pct(value)}%"


class RoundLines(Observer):
    """One line per round: the round, how many clients trained, how many failed (and uploads
    refused), the accuracy when the round was evaluated, the time since the ServerApp started
    the rounds."""

    def start(self, sim: LoopRun) -> None:
        self.t0 = time.perf_counter()
        cfg = sim.cfg
        where = f"resuming after round {sim.rounds_completed}" if sim.resumed else "starting"
        say(
            f"{cfg.algorithm.name} on {cfg.dataset.name}, {sim.data.num_clients} clients, "
            f"{cfg.federation.rounds} rounds: {where}"
        )

    def round_end(self, sim: LoopRun, row: Row) -> None:
        failed = row.get("failed", 0)
        trained = row.get("participants", 0) - failed
        parts = [f"{trained} trained", f"{failed} failed"]
        if row.get("rejected"):
            parts.append(f"{row['rejected']} uploads refused")
        if row.get("eval_failed"):
            parts.append(f"{row['eval_failed']} not evaluated")
        rounds = sim.cfg.federation.rounds
        say(
            f"round {row['round'] + 1}/{rounds}: {', '.join(parts)}; "
            f"{_accuracy(row.get('accuracy'))}; {time.perf_counter() - self.t0:.1f} s"
        )

    def final(self, sim: LoopRun, row: Row) -> None:
        say(f"final evaluation: {_accuracy(row.get('accuracy'))}")


def completed(result: Any) -> None:
    """The last line of a run that ended normally."""
    acc = result.summary.get("accuracy", {}).get("final")
    where = f"; wrote {result.run_dir}" if result.run_dir is not None else ""
    say(f"run completed: {result.summary.get('rounds_completed')} rounds, {_accuracy(acc)}{where}")


def failed(error: BaseException, out: str | Path | None) -> None:
    """The last line of a run the ServerApp stopped with an error; with a run directory, the
    error is recorded there as ``failed.json``."""
    message = str(error) if isinstance(error, FedpartError) else f"{type(error).__name__}: {error}"
    where = ""
    if out:
        rd = RunDir(Path(out))
        try:
            rd.acquire()  # not a directory another run holds (that run's record is its own)
        except (FedpartError, OSError):
            say(f"run failed: {message}")
            return
        try:
            done = sum("stage" not in row for row in rd.read_metrics()[0])
            now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
            rd.write_json(FAILED, {"error": message, "rounds_completed": done, "time": now})
        finally:
            rd.release()
        resumable = (rd.path / "config.yaml").is_file()
        where = f" ({out}: {done} rounds recorded{RESUME if resumable else ''})"
    say(f"run failed: {message}{where}")


def clear(out: str | Path | None) -> None:
    """Remove the failure record of an earlier attempt before a run or resume starts."""
    if out:
        (Path(out) / FAILED).unlink(missing_ok=True)


class OneLineErrors(logging.Filter):
    """Flower logs the exception that ends a ``ServerApp`` with its traceback. For fedpart's own
    errors (a configuration the run refuses), already said in one line by :func:`failed`, that
    record is dropped; any other exception keeps its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, FedpartError)


def quiet_tracebacks() -> None:
    """Install :class:`OneLineErrors` on Flower's logger (once)."""
    logger = logging.getLogger("flwr")
    if not any(isinstance(f, OneLineErrors) for f in logger.filters):
        logger.addFilter(OneLineErrors())


def status(run_dir: str | Path) -> tuple[int, str]:
    """What became of the Flower run in ``run_dir``, as ``(exit code, one line)``: completed
    (0), running (0: a process holds its lock), failed (1: its ``failed.json``), stopped (1: no
    record of an end, no process holding it: the ServerApp was killed), or not a run (2)."""
    import json

    rd = RunDir(Path(run_dir))
    record = rd.path / FAILED
    if not (rd.path / "config.yaml").is_file() and not record.is_file():
        return 2, f"{rd.path} holds no fedpart run (no config.yaml)"
    rows = [row for row in rd.read_metrics()[0] if "stage" not in row]
    rounds: int | str = "?"
    if (rd.path / "config.yaml").is_file():
        try:
            rounds = load_rounds(rd.path / "config.yaml")
        except FedpartError as exc:
            return 2, str(exc)
    done = f"{len(rows)} of {rounds} rounds"
    try:
        rd.acquire()
    except FedpartError:
        return 0, f"running: {done} done ({rd.path} is held by its ServerApp)"
    rd.release()
    if record.is_file():
        try:
            error = json.loads(record.read_text())["error"]
        except (ValueError, KeyError, TypeError):
            error = f"{record} is damaged"
        if rounds == "?":
            return 1, f"failed before its first round: {error}"
        return 1, f"failed after {done}: {error}{RESUME}"
    summary = rd.path / "summary.json"
    if summary.is_file():
        try:
            acc = json.loads(summary.read_text())["accuracy"]["final"]
        except (ValueError, KeyError, TypeError):
            return 1, f"{summary} is damaged{RESUME}"
        return 0, f"completed: {done}, {_accuracy(acc)}"
    return 1, (
        f"stopped after {done}: nothing holds it and it did not finish (the ServerApp was "
        f"killed?){RESUME}"
    )


def load_rounds(config_yaml: Path) -> int:
    """``federation.rounds`` of a run directory's config.yaml."""
    from fedpart.config import load_config
    from fedpart.errors import ConfigError

    try:
        return load_config(config_yaml).federation.rounds
    except ConfigError as exc:
        raise FedpartError(f"{config_yaml}: {exc}") from None
