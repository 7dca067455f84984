"""Errors a user can cause. Each carries one line that names the cause and the fix."""

from __future__ import annotations


class FedpartError(Exception):
    """Base class of every error fedpart reports to a user as one line (CLI exit code 2)."""

    exit_code = 2


class ConfigError(FedpartError):
    """A config key, type or value is wrong. ``key`` is the dotted key at fault."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(f"{key}: {message}" if key else message)


class DataError(FedpartError):
    """A data file is missing, truncated or corrupted, or a partition is impossible."""


class TrainingError(FedpartError):
    """Training diverged (a NaN or infinite loss); the last checkpoint is kept."""

    exit_code = 1
