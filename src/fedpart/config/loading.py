"""A :class:`Config` built from a nested dict, from dotted ``key=value`` overrides or from a YAML
file, and validated; and written back as YAML."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from fedpart.config.coercion import build, show
from fedpart.config.overrides import apply_overrides
from fedpart.config.schema import OPEN_SECTIONS, ConfigData
from fedpart.config.validation import validate
from fedpart.errors import ConfigError


class Config(ConfigData):
    """A whole experiment. ``Config.from_dict`` / ``load_config`` build and validate one."""

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Config:
        """Build and validate a config from a nested dict (e.g. parsed YAML)."""
        cfg = build(cls, data or {}, "", OPEN_SECTIONS)
        from fedpart.plugins import from_environment, load_plugins  # noqa: PLC0415

        # before any name is resolved; with those --plugin named (FEDPART_PLUGINS)
        cfg.plugins = list(dict.fromkeys(load_plugins(cfg.plugins, "plugins")))
        cfg.plugins += [
            p for p in load_plugins(from_environment(), "--plugin") if p not in cfg.plugins
        ]
        validate(cfg)
        return cfg

    def with_overrides(self, overrides: list[str]) -> Config:
        """A new validated config with dotted ``key=value`` overrides applied."""
        data = self.to_dict()
        apply_overrides(data, overrides, Config)
        return Config.from_dict(data)


def load_config(
    path: str | os.PathLike | None = None, overrides: list[str] | None = None
) -> Config:
    """Read a YAML config (or start from the defaults), apply overrides and validate."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            what = "is a directory, not a config file" if p.is_dir() else "config file not found"
            raise ConfigError("", f"{what}: {p}")
        loaded = _parse_yaml(p, _read_text(p))
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError("", f"{p}: the top level must be a mapping of sections")
        data = loaded
    apply_overrides(data, overrides or [], Config)
    return Config.from_dict(data)


def _read_text(p: Path) -> str:
    """A config file's text: UTF-8 (a byte-order mark is dropped); binary files refused."""
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise ConfigError("", f"{p}: cannot read ({exc.strerror})") from exc
    if b"\0" in data:
        raise ConfigError("", f"{p}: not a text file (it contains NUL bytes); expected YAML")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            "", f"{p}: not UTF-8 text (byte {exc.start} is invalid); expected a YAML file"
        ) from exc


def _parse_yaml(p: Path, text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        where = f" (line {line + 1})" if line is not None else ""
        raise ConfigError("", f"{p}: not valid YAML{where}") from exc
    except RecursionError as exc:
        raise ConfigError("", f"{p}: nested too deeply to be a config") from exc
    except (ValueError, TypeError, OverflowError) as exc:
        # a scalar YAML cannot build: a 5,000-digit integer, a date like 2024-13-45
        raise ConfigError("", f"{p}: not valid YAML ({show(str(exc), 80)})") from exc


def dump_config(cfg: Config) -> str:
    """The resolved config as YAML text."""
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False)
