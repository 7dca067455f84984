"""Comparison tables and plots across finished runs (``fedpart report``): runs read back
(:mod:`~fedpart.report.loading`), tables (:mod:`~fedpart.report.tables`), plots
(:mod:`~fedpart.report.plots`) and the report of both (:mod:`~fedpart.report.compare`)."""

from fedpart.report.compare import report, write_report
from fedpart.report.loading import RunRecord, find_runs, load_run
from fedpart.report.plots import plot_accuracy, plot_capacity_groups, plot_client_accuracy
from fedpart.report.tables import (
    CAPACITY_TABLE_TITLE,
    FINAL_STAGE_NOTE,
    GroupAccuracy,
    capacity_group_accuracy,
    capacity_group_table,
    compare_table,
    has_final_stage,
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
