"""The Flower apps: the ``ServerApp`` running a fedpart config over the connected nodes, and
running or resuming it from inside one's own ``ServerApp``."""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedpart.api import resume_locked
from fedpart.config import Config, load_config
from fedpart.engine.checkpoint import run_directory
from fedpart.engine.simulation import Result
from fedpart.errors import FedpartError
from fedpart.flower.progress import RoundLines, clear, completed, failed, quiet_tracebacks
from fedpart.flower.records import require_flwr
from fedpart.flower.server import FlowerSimulation

if TYPE_CHECKING:
    from flwr.app import Context
    from flwr.serverapp import Grid, ServerApp


# ----------------------------------------------------------------- server side
def _split_overrides(value: Any) -> list[str]:
    """``key=value`` overrides from a run-config string, separated by spaces as in a shell: a
    value with spaces is quoted (``'dataset.root="/data/my set"'``); a value may hold commas
    (``partition.split=[0.75,0.0,0.25]``)."""
    if not value:
        return []
    try:
        return shlex.split(str(value))
    except ValueError as exc:
        raise FedpartError(f"run config overrides: {exc} in {str(value)!r}") from None


def run_on_grid(
    grid: Grid,
    cfg: Config,
    *,
    run_dir: str | Path | None = None,
    timeout: float = 600.0,
    progress: bool = False,
) -> Result:
    """Run ``cfg`` over the Flower nodes of ``grid`` (one per client) from inside a
    ``ServerApp``'s main function; returns what :func:`fedpart.run` returns. ``run_dir`` is
    recorded as the config's ``output.dir``; ``progress``: a line per round on stdout.

    Several runs may follow one another over the same nodes: a node keeps each run's tensors
    apart (they are named by a series id drawn per run)."""
    if run_dir is not None:
        cfg = dataclasses.replace(cfg, output=dataclasses.replace(cfg.output, dir=str(run_dir)))
    sim = FlowerSimulation(cfg, grid, run_dir=run_dir, quiet=True, timeout=timeout)
    if progress:
        sim.extra_observers.append(RoundLines())
    sim.connect()
    return sim.run()


def resume_on_grid(
    grid: Grid,
    run_dir: str | Path,
    overrides: Iterable[str] = (),
    *,
    timeout: float = 600.0,
    progress: bool = False,
) -> Result:
    """Continue the Flower run in ``run_dir`` from its last checkpoint over the nodes of
    ``grid``: :func:`fedpart.resume` with the clients' work on the nodes, each node restoring
    the personal tensors of the checkpoint's round from its ``state-dir``. Ends equal to a run
    that never stopped (but for the wall-clock fields). ``progress``: a line per round."""

    def build(cfg: Config, path: Path) -> FlowerSimulation:
        sim = FlowerSimulation(cfg, grid, run_dir=path, timeout=timeout)
        if progress:
            sim.extra_observers.append(RoundLines())
        return sim

    rd = run_directory(run_dir)
    rd.acquire()
    try:
        return resume_locked(
            rd,
            list(overrides),
            True,
            build=build,
            ready=lambda sim: sim.connect(),  # type: ignore[attr-defined]
        )
    finally:
        rd.release()


def server_app(
    config: Config | str | Path | None = None,
    overrides: Iterable[str] = (),
    *,
    run_dir: str | Path | None = None,
    timeout: float = 600.0,
    base: str | Path | None = None,
) -> ServerApp:
    """The Flower ``ServerApp`` running a fedpart config over the connected nodes.

    ``config`` (a :class:`Config` or YAML path) defaults to the run config's ``config`` key
    (``[tool.flwr.app.config]`` of the Flower project, or ``flwr run --run-config``), a relative
    path there being read from ``base`` (the project's directory); the run config's
    ``overrides`` (``key=value`` separated by spaces) come before ``overrides``, its
    ``output-dir`` names the run directory (default ``run_dir``; without one nothing is written)
    and its ``timeout`` the seconds to wait for nodes. With ``resume`` true the run in the run
    directory is continued from its last checkpoint instead (``config`` is not read; the
    overrides apply as in ``fedpart run --resume DIR key=value``)."""
    require_flwr()
    from flwr.serverapp import ServerApp

    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        rc = context.run_config
        out = rc.get("output-dir") or run_dir
        quiet_tracebacks()
        clear(out)
        try:
            result = _run(grid, rc, out)
        except BaseException as exc:
            failed(exc, out)
            raise
        completed(result)

    def _run(grid: Grid, rc: Any, out: str | Path | None) -> Result:
        extra = [*_split_overrides(rc.get("overrides")), *overrides]
        wait = float(rc.get("timeout", timeout))
        if rc.get("resume"):
            if not out:
                raise FedpartError("resume: give output-dir, the run directory to continue")
            return resume_on_grid(grid, str(out), extra, timeout=wait, progress=True)
        source: Any = config if config is not None else rc.get("config")
        if source is None:
            raise FedpartError("no fedpart config: set config in the Flower run config")
        if isinstance(source, Config):
            cfg = source.with_overrides(extra) if extra else source
        else:
            path = Path(str(source))
            if not path.is_absolute() and base is not None:
                path = Path(base) / path
            cfg = load_config(path, extra)
        return run_on_grid(grid, cfg, run_dir=out or None, timeout=wait, progress=True)

    return app
