"""Run directories: resolved config, metrics, summary, per-client results, checkpoints."""

from fedpart.tracking.metrics import summarize
from fedpart.tracking.run_dir import RunDir

__all__ = ["RunDir", "summarize"]
