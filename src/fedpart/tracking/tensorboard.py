"""TensorBoard event files of a run (``output.tensorboard=true``), in ``<run dir>/tensorboard/``.

Every number of a ``metrics.jsonl`` row becomes a scalar at step = round (nested dicts of a
method's own round metrics flattened to ``a/b`` tags); the per-client accuracies of every
evaluated round a histogram ``clients/accuracy``; the resolved config the text ``config``. The
row of a final fine-tuning stage is logged under ``final/`` at step = ``federation.rounds``.

Resume rule: a resumed run opens its writer with ``purge_step`` = the checkpoint's round, so
TensorBoard hides the events of rounds at or after it that the interrupted process had written,
and the resumed process writes those rounds again: no point is duplicated, none is lost (the
writer is flushed after every round, so everything before the checkpoint is on disk). A run
started afresh (or overwritten) deletes the folder first.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

from fedpart.errors import FedpartError

FOLDER = "tensorboard"
#: row entries that are not metrics
_SKIP = {"round", "stage"}


def flatten(row: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """The finite numbers of ``row`` (nested dicts as ``a/b``); booleans, text and None dropped."""
    out: dict[str, float] = {}
    for key, value in row.items():
        if not prefix and key in _SKIP:
            continue
        tag = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{tag}/"))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            if math.isfinite(float(value)):
                out[tag] = float(value)
    return out


class TensorBoardLog:
    """The writer of one run's event files (see the module docstring for the resume rule)."""

    def __init__(self, run_dir: str | Path, *, purge_step: int | None = None) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:
            raise FedpartError(
                "output.tensorboard=true needs TensorBoard: pip install 'fedpart[tensorboard]' "
                "(or tensorboard)"
            ) from exc
        folder = Path(run_dir) / FOLDER
        if purge_step is None and folder.is_dir():
            shutil.rmtree(folder)  # a fresh run: no events of an earlier one
        self.writer = SummaryWriter(str(folder), purge_step=purge_step)
        self.path = folder

    def config(self, text: str) -> None:
        """The resolved config, as text (shown in TensorBoard's Text tab)."""
        self.writer.add_text("config", "```yaml\n" + text + "\n```", 0)

    def row(self, row: dict[str, Any], client_accuracy: list[float | None] | None = None) -> None:
        """One ``metrics.jsonl`` row; with ``client_accuracy`` (an evaluated round) a histogram."""
        final = row.get("stage") == "final"
        step = int(row["round"])
        prefix = "final/" if final else ""
        for tag, value in flatten(row).items():
            self.writer.add_scalar(prefix + tag, value, step)
        values = [a for a in client_accuracy or [] if a is not None and math.isfinite(a)]
        if values:
            import numpy as np

            self.writer.add_histogram(
                prefix + "clients/accuracy", np.asarray(values), step, bins=np.linspace(0, 1, 21)
            )
        self.writer.flush()

    def close(self) -> None:
        """Flush and close the event file."""
        self.writer.close()
