"""Errors a user can cause. Each carries one line that names the cause and the fix."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn


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


def one_line(text: str) -> str:
    """``text`` with line breaks escaped, so an error stays one line whatever it quotes."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


class OneLineParser(argparse.ArgumentParser):
    """argparse with its usage errors as one line and exit code 2, like every other error."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {self.prog}: {one_line(message)} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)
