"""Comparison tables and plots across finished runs (``fedpart report``)."""

from fedpart.report.compare import (
    CAPACITY_TABLE_TITLE,
    FINAL_STAGE_NOTE,
    GroupAccuracy,
    RunRecord,
    capacity_group_accuracy,
    capacity_group_table,
    compare_table,
    find_runs,
    has_final_stage,
    load_run,
    plot_accuracy,
    plot_capacity_groups,
    plot_client_accuracy,
    report,
    write_report,
)

__all__ = [
    "CAPACITY_TABLE_TITLE",
    "FINAL_STAGE_NOTE",
    "GroupAccuracy",
    "RunRecord",
    "capacity_group_accuracy",
    "capacity_group_table",
    "compare_table",
    "find_runs",
    "has_final_stage",
    "load_run",
    "plot_accuracy",
    "plot_capacity_groups",
    "plot_client_accuracy",
    "report",
    "write_report",
]
