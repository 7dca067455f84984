"""Comparison tables and plots across finished runs (``fedpart report``)."""

from fedpart.report.compare import (
    RunRecord,
    compare_table,
    load_run,
    plot_accuracy,
    plot_client_accuracy,
    report,
)

__all__ = [
    "RunRecord",
    "compare_table",
    "load_run",
    "plot_accuracy",
    "plot_client_accuracy",
    "report",
]
