"""Run directories: resolved config, metrics, summary, per-client results, checkpoints."""

from fedpart.tracking.run_dir import RunDir, summarize

__all__ = ["RunDir", "summarize"]
