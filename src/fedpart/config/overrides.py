"""Dotted ``key=value`` overrides of a config (the command line's, a sweep's grid, a resume's).

A value is parsed as YAML (``0.1``, ``true``, ``[0.8, 0.1, 0.1]``) except where the key holds a
string — a path, a name, a template — whose value is taken as written: a ``#`` is no comment
and a ``:`` no mapping, so ``output.dir=runs/x #1`` lands in ``runs/x #1``. An override that
switches ``model.name`` or ``algorithm.name`` drops the options the previous one was given that
the new one does not take, with a notice.
"""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from typing import Any

import yaml

from fedpart.errors import ConfigError

__all__ = ["apply_overrides"]


def _parse_scalar(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError, ValueError, TypeError, OverflowError):
        return text  # not a YAML value: the type check names the key


def apply_overrides(data: dict[str, Any], overrides: list[str], schema: type) -> None:
    """Apply dotted ``key=value`` overrides in place (``schema``: the config's dataclass, whose
    field types say which keys hold strings); values are parsed as YAML scalars or lists.

    An override that switches ``model.name`` (``algorithm.name``) drops the options the
    previous model (method) was given beside its name — ``model.padding`` of the quick start's
    CNN — that the new one does not take, with a notice; options given on the command line
    stay and are checked."""
    before = {s: dict(data[s]) for s in ("model", "algorithm") if isinstance(data.get(s), dict)}
    _set_overrides(data, overrides, schema)
    for section, old in before.items():
        new = data.get(section)
        if isinstance(new, dict) and new.get("name") != old.get("name"):
            section_type = typing.get_type_hints(schema)[section]
            _drop_options_of_the_previous(data, section, section_type, old, overrides)


def _drop_options_of_the_previous(
    data: dict[str, Any],
    section: str,
    section_type: type,
    before: dict[str, Any],
    overrides: list[str],
) -> None:
    from fedpart.models import MODELS  # noqa: PLC0415 - the zoo sits below the config
    from fedpart.plugins import load_plugins  # noqa: PLC0415
    from fedpart.registry import lookup, methods  # noqa: PLC0415

    plugins = data.get("plugins")
    if isinstance(plugins, list):
        load_plugins(plugins, "plugins")  # the new model or method may be a plugin's
    registry: dict[str, Any] = MODELS if section == "model" else methods()
    try:
        name = lookup(list(registry), data[section].get("name"), f"{section}.name", section)
    except ConfigError:
        return  # the validation names it
    entry = registry[name]
    takes = entry.options if section == "model" else entry.option_docs()
    given = {i.split("=", 1)[0].strip() for i in overrides}
    fixed = {f.name for f in dataclasses.fields(section_type)}
    dropped = [
        k for k in before if k not in fixed and k not in takes and f"{section}.{k}" not in given
    ]
    for k in dropped:
        data[section].pop(k, None)
    if dropped:
        keys = ", ".join(f"{section}.{k}" for k in dropped)
        print(
            f"notice: {section}.name={name}: dropped {keys} (options of '{before.get('name')}' "
            f"that '{name}' does not take)",
            file=sys.stderr,
        )


def _set_overrides(data: dict[str, Any], overrides: list[str], schema: type) -> None:
    for item in overrides:
        if "=" not in item:
            raise ConfigError(item, "overrides must look like section.key=value")
        key, text = item.split("=", 1)
        key = key.strip()
        parts = key.split(".")
        if not all(parts):
            raise ConfigError(key, "malformed key")
        node = data
        for part in parts[:-1]:
            nxt = node.get(part)
            if nxt is None:
                nxt = {}
                node[part] = nxt
            if not isinstance(nxt, dict):
                raise ConfigError(key, f"'{part}' is not a section")
            node = nxt
        kind = _string_key(schema, parts)
        if kind is None or (kind == "optional" and text.strip() in _YAML_NULLS):
            node[parts[-1]] = _parse_scalar(text)
        else:
            node[parts[-1]] = text


_YAML_NULLS = ("null", "Null", "NULL", "~")


def _string_key(schema: type, parts: list[str]) -> str | None:
    """``"str"`` (``"optional"``: or null) when the key ``parts`` names holds a string — a
    path, a name, a template — whose value is then taken as written (``#``, ``:``, quotes and
    all), not parsed as YAML; None for every other key (YAML, checked later)."""
    cls: Any = schema
    for part in parts:
        if not (
            dataclasses.is_dataclass(cls) and part in {f.name for f in dataclasses.fields(cls)}
        ):
            return None  # an open section's option, or an unknown key
        cls = typing.get_type_hints(cls)[part]
    if cls is str:
        return "str"
    if typing.get_origin(cls) in (typing.Union, types.UnionType) and set(typing.get_args(cls)) == {
        str,
        type(None),
    }:
        return "optional"
    return None
