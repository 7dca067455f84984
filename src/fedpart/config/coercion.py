"""Generic coercion: a value checked against a field's type, a dict built into a dataclass.

Every error is a one-line :class:`fedpart.errors.ConfigError` naming the dotted key: ``expected
an integer, got 'abc'``; an unknown key names the valid keys (and the closest one).
"""

from __future__ import annotations

import dataclasses
import decimal
import difflib
import math
import re
import types
import typing
from typing import Any

from fedpart.errors import ConfigError


def _type_name(tp: Any) -> str:
    if tp is type(None):
        return "null"
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is list:
        return "list"
    if origin is dict:
        return "mapping"
    return getattr(tp, "__name__", str(tp))


#: one past the largest integer a config holds (int64)
INT_LIMIT = 2**63


def show(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters: an error message stays one short line."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_FLOAT_TEXT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


def coerce(value: Any, tp: Any, key: str) -> Any:
    """``value`` checked against the type ``tp`` (the value, converted where the config allows it:
    an int where a float is expected, ``1e3`` read as a string by YAML 1.1 where an int is); a
    one-line :class:`ConfigError` naming ``key`` otherwise."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            try:
                return coerce(value, arg, key)
            except ConfigError:
                continue
        raise ConfigError(key, f"expected {_type_name(tp)}, got {show(value)}")
    if tp is type(None):
        if value is None:
            return None
        raise ConfigError(key, f"expected null, got {show(value)}")
    if tp is Any:
        return value
    if origin is list:
        if not isinstance(value, list | tuple):
            raise ConfigError(key, f"expected a list, got {show(value)}")
        (item_tp,) = typing.get_args(tp) or (Any,)
        return [coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(key, f"expected a mapping, got {show(value)}")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(key, f"expected true or false, got {show(value)}")
    if tp is int:
        if isinstance(value, str) and _FLOAT_TEXT.match(value.strip()):
            # 1e3 (YAML 1.1 reads it as a string): exact through Decimal, so 1e30 stays 10**30
            number = decimal.Decimal(value.strip())
            if number.adjusted() > 18:  # beyond int64, and int() of 1e999999999 would not end
                raise ConfigError(key, f"expected an integer of at most 2**63-1, got {show(value)}")
            if number == number.to_integral_value():
                value = int(number)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool):
            if not -INT_LIMIT <= value < INT_LIMIT:
                raise ConfigError(key, f"expected an integer of at most 2**63-1, got {show(value)}")
            return value
        raise ConfigError(key, f"expected an integer, got {show(value)}")
    if tp is float:
        if isinstance(value, str) and _FLOAT_TEXT.match(value.strip()):
            # YAML 1.1 reads 1e-3 (an exponent without a dot) as a string
            value = float(value.strip())
        if isinstance(value, int | float) and not isinstance(value, bool):
            try:
                number = float(value)
            except OverflowError:
                number = math.inf
            if not math.isfinite(number):
                raise ConfigError(key, f"expected a finite number, got {show(value)}")
            return number
        raise ConfigError(key, f"expected a number, got {show(value)}")
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(key, f"expected a string, got {show(value)}")
    raise ConfigError(key, f"unsupported type {tp!r}")  # pragma: no cover


def unknown_key(key: str, name: str, valid: list[str]) -> ConfigError:
    close = difflib.get_close_matches(name, valid, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return ConfigError(key, f"unknown key{hint}; valid keys: {', '.join(valid)}")


def build(cls: type, data: Any, prefix: str, open_sections: tuple[str, ...] = ()) -> Any:
    """The dataclass ``cls`` from the mapping ``data`` (keys under ``prefix``), each value coerced to
    its field's type and nested dataclasses built in turn; in an ``open_sections`` section the keys
    that are no field go into its ``options``."""
    if not isinstance(data, dict):
        raise ConfigError(prefix or "config", f"expected a mapping, got {show(data)}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    section_name = prefix.rstrip(".")
    is_open = section_name in open_sections
    kwargs: dict[str, Any] = {}
    options: dict[str, Any] = {}
    for name, value in data.items():
        key = f"{prefix}{name}"
        if not isinstance(name, str):
            raise ConfigError(key, "keys must be strings")
        if name not in fields or (is_open and name == "options"):
            if is_open:
                options[name] = value
                continue
            raise unknown_key(key, name, [n for n in fields if n != "options"])
        tp = hints[name]
        if dataclasses.is_dataclass(tp):
            kwargs[name] = build(tp, value, f"{key}.", open_sections)
        else:
            kwargs[name] = coerce(value, tp, key)
    if is_open:
        kwargs["options"] = options
    return cls(**kwargs)
