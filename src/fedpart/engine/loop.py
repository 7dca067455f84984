"""The run loop: rounds until ``federation.rounds``, the method's finishing step, the result —
and observers that do everything else at fixed points of it (run files, TensorBoard,
checkpoint timing, the progress bar), as pfl-research's ``TrainingProcessCallback`` does.

An observer's hooks, in the order the loop calls them (observers in list order):
``start`` once before the first round; ``round_start`` before each round; ``round_end`` with
each round's row; ``final`` with the row of the final evaluation, if there is one; ``close``
in any case when the rounds end (also on an error); ``end`` with the result of a run that
ended normally. All of them run in the driver process.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from fedpart.config import Config, dump_config
from fedpart.engine.build import model_options, plain
from fedpart.tracking.faults import crash, crash_point
from fedpart.tracking.metrics import summarize
from fedpart.tracking.run_dir import RunDir

Row = dict[str, Any]


class LoopRun(Protocol):
    """What the loop and its observers use of a run (``engine.simulation.Simulation`` is the
    one there is): typed against this, the loop does not import the class that calls it."""

    cfg: Config
    algorithm: Any
    capacity: Any
    data: Any
    store: Any
    determinism: Any
    run_dir: RunDir | None
    quiet: bool
    resumed: bool
    finished: bool
    elapsed: float
    rounds_completed: int
    rows: list[Row]
    final_row: Row | None
    client_accuracy: list[float]
    client_test_samples: list[int]
    #: observers a kind of run adds after the built-in ones (a Flower run's round lines)
    extra_observers: list[Any]

    def run_round(self, rnd: int) -> Row: ...
    def evaluate(self) -> Row: ...
    def result(self) -> Result: ...
    def save_checkpoint(self) -> None: ...
    def close_workers(self) -> None: ...
    def backend_description(self) -> str: ...


#: what produced each accuracy of ``summary.json`` (its ``protocols`` entry)
PROTOCOL_DOCS = {
    "accuracy": "every client's personalised model on its own evaluation split, mean over clients",
    "accuracy_weighted": "as accuracy, weighted by the clients' evaluation samples",
    "global_accuracy": "the server model on the official test split",
    "participants_accuracy_before": (
        "FL-bench 'test before': each round's sampled clients, the model each receives before "
        "local training, sample-weighted over their evaluation splits"
    ),
    "participants_accuracy_after": (
        "FL-bench 'test after': each round's sampled clients after local training, "
        "sample-weighted over their evaluation splits"
    ),
}


@dataclass
class Result:
    """What a run returns: its summary, per-round metrics, per-client accuracies and directory."""

    summary: dict[str, Any]
    metrics: list[dict[str, Any]]
    client_accuracy: list[float]
    run_dir: Path | None
    simulation: LoopRun | None = field(default=None, repr=False)


class Observer:
    """Does something at fixed points of the run loop; every hook does nothing by default."""

    def start(self, sim: LoopRun) -> None: ...
    def round_start(self, sim: LoopRun, rnd: int) -> None: ...
    def round_end(self, sim: LoopRun, row: Row) -> None: ...
    def final(self, sim: LoopRun, row: Row) -> None: ...
    def close(self, sim: LoopRun) -> None: ...
    def end(self, sim: LoopRun, result: Result) -> None: ...


def run_loop(sim: LoopRun, observers: list[Observer]) -> Result:
    """Run ``sim``'s remaining rounds, then its finishing step and final evaluation."""
    rounds = sim.cfg.federation.rounds
    for o in observers:
        o.start(sim)
    try:
        while sim.rounds_completed < rounds:
            rnd = sim.rounds_completed
            for o in observers:
                o.round_start(sim, rnd)
            row = timed_round(sim, rnd)
            sim.rows.append(row)
            sim.rounds_completed += 1
            for o in observers:
                o.round_end(sim, row)
        if not sim.finished:
            t0 = time.perf_counter()
            row = final_row(sim)
            if row is not None:
                sim.final_row = row
                for o in observers:
                    o.final(sim, row)
            sim.elapsed += time.perf_counter() - t0
            sim.finished = True
    finally:
        for o in observers:
            o.close(sim)
    result = sim.result()
    for o in observers:
        o.end(sim, result)
    return result


def timed_round(sim: LoopRun, rnd: int) -> Row:
    """Round ``rnd``'s row: the round, the method's round metrics, the evaluation when due."""
    cfg = sim.cfg
    t0 = time.perf_counter()
    row: Row = {"round": rnd}
    row.update(sim.run_round(rnd))
    row.update(sim.algorithm.round_metrics())
    last = rnd == cfg.federation.rounds - 1
    if last or (rnd + 1) % cfg.evaluation.every == 0:
        row.update(sim.evaluate())
    else:
        row.update(accuracy=None, accuracy_weighted=None, loss=None)
    sim.elapsed += time.perf_counter() - t0
    row["lr"] = cfg.federation.lr * cfg.federation.lr_decay**rnd
    row["wall_seconds"] = round(sim.elapsed, 4)
    return row


def final_row(sim: LoopRun) -> Row | None:
    """The method's finishing step (fine-tuning, …); the final evaluation's row when it changed
    the models or when the last round was not evaluated, else ``None``."""
    changed = sim.algorithm.finish()
    if changed or not sim.rows or sim.rows[-1].get("accuracy") is None:
        return {"round": sim.cfg.federation.rounds, "stage": "final", **sim.evaluate()}
    return None


def run_result(sim: LoopRun) -> Result:
    """The run's :class:`Result` with its ``summary.json`` content."""
    cfg = sim.cfg
    summary = summarize(
        sim.rows,
        sim.final_row,
        algorithm=cfg.algorithm.name,
        dataset=cfg.dataset.name,
        num_clients=sim.data.num_clients,
        rounds_completed=sim.rounds_completed,
        wall_seconds=round(sim.elapsed, 3),
        last_k=cfg.evaluation.last_k,
        protocols=PROTOCOL_DOCS,
        extra={
            "seed": cfg.seed,
            "backend": sim.backend_description(),
            "model": cfg.model.name,
            # the options the model was built with, the method's model_defaults included
            # (FedBN's BatchNorm): a comparison table marks runs whose model differs
            "model_options": plain(model_options(cfg, type(sim.algorithm))),
            "determinism": sim.determinism,
            "personal_state_bytes": sim.store.personal_bytes(),
            **({cfg.algorithm.name: values} if (values := sim.algorithm.summary_values()) else {}),
        },
    )
    run_dir = sim.run_dir.path if sim.run_dir else None
    return Result(summary, list(sim.rows), list(sim.client_accuracy), run_dir, sim)


# ------------------------------------------------------------------ observers
class RunFiles(Observer):
    """The run directory's files: config.yaml and an empty metrics.jsonl for a new run, a row
    per round and the final one, and at the end the last checkpoint, summary.json and
    clients.json; with the crash points the fault-injection tests stop at."""

    def start(self, sim: LoopRun) -> None:
        rd = sim.run_dir
        if sim.rounds_completed or sim.finished or sim.resumed:
            return
        rd.prepare(sim.cfg.output.overwrite)
        if crash_point("run.start"):
            crash()
        rd.write_text("config.yaml", dump_config(sim.cfg))
        if crash_point("run.config"):
            crash()
        rd.write_metrics([])

    def round_start(self, sim: LoopRun, rnd: int) -> None:
        if crash_point("round.start"):
            crash()

    def round_end(self, sim: LoopRun, row: Row) -> None:
        sim.run_dir.append_metrics(row)

    def final(self, sim: LoopRun, row: Row) -> None:
        # logged also when only evaluated, so metrics.jsonl is what a resume rebuilds
        sim.run_dir.append_metrics(row)

    def end(self, sim: LoopRun, result: Result) -> None:
        rd = sim.run_dir
        sim.save_checkpoint()
        rd.write_json("summary.json", result.summary)
        rd.write_json(
            "clients.json",
            {
                "client_accuracy": result.client_accuracy,
                "client_test_samples": sim.client_test_samples,
                "client_train_samples": [c.num_train for c in sim.data.clients],
                **sim.capacity.client_json(),
            },
        )
        if crash_point("run.end"):
            crash()


class TensorBoard(Observer):
    """Each row in the run's TensorBoard events (``output.tensorboard``); a resumed run purges
    the events at and after its checkpoint's round, which it writes again."""

    def __init__(self) -> None:
        self.log: Any = None

    def start(self, sim: LoopRun) -> None:
        from fedpart.tracking.tensorboard import TensorBoardLog

        path = sim.run_dir.path
        if sim.resumed and sim.rounds_completed:
            self.log = TensorBoardLog(path, purge_step=sim.rounds_completed)
        else:
            self.log = TensorBoardLog(path)  # from round 0: the folder starts empty
            self.log.config(dump_config(sim.cfg))

    def round_end(self, sim: LoopRun, row: Row) -> None:
        evaluated = row.get("accuracy") is not None
        self.log.row(row, sim.client_accuracy if evaluated else None)

    def final(self, sim: LoopRun, row: Row) -> None:
        self.log.row(row, sim.client_accuracy)

    def close(self, sim: LoopRun) -> None:
        if self.log is not None:
            self.log.close()


class Checkpoints(Observer):
    """A checkpoint every ``output.checkpoint_every`` rounds (the last one: :class:`RunFiles`)."""

    def round_end(self, sim: LoopRun, row: Row) -> None:
        every = sim.cfg.output.checkpoint_every
        if every and sim.rounds_completed % every == 0:
            sim.save_checkpoint()


class Progress(Observer):
    """A progress bar on stderr, with the last evaluated accuracy."""

    def __init__(self) -> None:
        self.bar: Any = None

    def start(self, sim: LoopRun) -> None:
        from tqdm import tqdm

        self.bar = tqdm(
            total=sim.cfg.federation.rounds,
            initial=sim.rounds_completed,
            file=sys.stderr,
            desc=f"{sim.cfg.algorithm.name}",
            unit="round",
            dynamic_ncols=True,
        )

    def round_end(self, sim: LoopRun, row: Row) -> None:
        self.bar.update(1)
        if row.get("accuracy") is not None:
            self.bar.set_postfix(acc=f"{row['accuracy']:.4f}")

    def close(self, sim: LoopRun) -> None:
        if self.bar is not None:
            self.bar.close()


class Workers(Observer):
    """Stops the backend's worker processes when the rounds end."""

    def close(self, sim: LoopRun) -> None:
        sim.close_workers()


def observers_for(sim: LoopRun) -> list[Observer]:
    """The observers of ``sim``'s run: run files, TensorBoard and checkpoints with a run
    directory, the progress bar unless quiet, the run's own extra ones; the workers' stop in
    every case."""
    out: list[Observer] = []
    if sim.run_dir is not None:
        out.append(RunFiles())
        if sim.cfg.output.tensorboard:
            out.append(TensorBoard())
        out.append(Checkpoints())
    if not sim.quiet:
        out.append(Progress())
    out.extend(sim.extra_observers)
    out.append(Workers())
    return out


def run(sim: LoopRun) -> Result:
    """Run ``sim`` with its observers; a run directory is locked for this process while the run
    writes it (a second process gets a one-line error)."""
    rd = sim.run_dir
    if rd is None or rd.locked:
        return run_loop(sim, observers_for(sim))
    rd.acquire()
    try:
        return run_loop(sim, observers_for(sim))
    finally:
        rd.release()
