"""Comparison tables and plots across finished runs (``fedpart report``)."""

from fedpart.report.compare import (
    FINAL_STAGE_NOTE,
    RunRecord,
    compare_table,
    find_runs,
    has_final_stage,
    load_run,
    plot_accuracy,
    plot_client_accuracy,
    report,
    write_report,
)

__all__ = [
    "FINAL_STAGE_NOTE",
    "RunRecord",
    "compare_table",
    "find_runs",
    "has_final_stage",
    "load_run",
    "plot_accuracy",
    "plot_client_accuracy",
    "report",
    "write_report",
]
