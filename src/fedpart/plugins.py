"""A user's own datasets, models and methods, named once and seen by every command.

A *plugin* is a Python module that registers things when imported (``fedpart.register_dataset``,
``fedpart.register_model``, ``fedpart.register_algorithm``; docs/extending.md). It is named
in one of three ways, and imported before a config is resolved:

- ``--plugin MODULE`` on any ``fedpart`` subcommand (a module name, or a path to a ``.py``
  file);
- the config's top-level ``plugins: [MODULE, ...]`` key — a run writes the plugins it used
  there in its ``config.yaml``, so ``fedpart run --resume``, ``report`` and ``sweep`` import
  them again in a new process;
- the ``fedpart.plugins`` entry-point group of an installed package (imported on first use of
  any registry);
- ``FEDPART_PLUGINS`` in the environment (names separated by ``os.pathsep``): what
  ``--plugin`` sets for the command's own process and the worker processes it starts; every
  config built there lists them.

A module that cannot be imported is one line naming it and where it was asked for.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

from fedpart.errors import ConfigError, FedpartError

#: the entry-point group an installed package names its plugin modules in
ENTRY_POINT_GROUP = "fedpart.plugins"
#: the environment variable ``--plugin`` sets (names separated by ``os.pathsep``)
ENV = "FEDPART_PLUGINS"

_loaded: dict[str, ModuleType] = {}
_entry_points_done = False


def is_file_plugin(name: str) -> bool:
    return name.endswith(".py")


def canonical(name: str) -> str:
    """How a plugin is recorded: a module name as given, a file as its absolute path (so a run
    resumed from another directory finds it)."""
    return str(Path(name).absolute()) if is_file_plugin(name) else name


def load_plugin(name: str, where: str) -> ModuleType:
    """Import plugin ``name`` (once per process); ``where`` says who asked (``--plugin``,
    ``plugins`` of a config) for the one-line error."""
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(where, f"a plugin is a module name or a .py file, got {name!r}")
    if name in _loaded:
        return _loaded[name]
    try:
        module = _import_file(name) if is_file_plugin(name) else _import_module(name)
    except FedpartError:
        raise
    except ModuleNotFoundError as exc:
        raise ConfigError(where, f"cannot import plugin '{name}': {exc}") from exc
    except SyntaxError as exc:
        raise ConfigError(
            where, f"plugin '{name}' has a syntax error: {exc.filename}:{exc.lineno}"
        ) from exc
    except Exception as exc:  # noqa: BLE001 - whatever the user's module raised, in one line
        raise ConfigError(
            where, f"plugin '{name}' failed while importing: {type(exc).__name__}: {exc}"
        ) from exc
    _loaded[name] = module
    return module


def load_plugins(names: Iterable[str], where: str) -> list[str]:
    """Import every plugin of ``names``; their recorded names (:func:`canonical`)."""
    out = []
    for name in names:
        load_plugin(canonical(name), where)
        out.append(canonical(name))
    return out


def _import_module(name: str) -> ModuleType:
    # as ``python -m``: a module in the working directory is found
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)
    return importlib.import_module(name)


def _import_file(name: str) -> ModuleType:
    path = Path(name)
    if not path.is_file():
        raise ModuleNotFoundError(f"no such file: {path}")
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    module_name = f"fedpart_plugin_{path.stem}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


def load_entry_points() -> None:
    """Import the plugins installed packages declare (group ``fedpart.plugins``), once."""
    global _entry_points_done
    if _entry_points_done:
        return
    _entry_points_done = True
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.value in _loaded:
            continue
        try:
            _loaded[ep.value] = ep.load()
        except FedpartError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise ConfigError(
                "plugins",
                f"plugin '{ep.value}' (entry point '{ep.name}' of {ENTRY_POINT_GROUP}) failed "
                f"while importing: {type(exc).__name__}: {exc}",
            ) from exc


def from_environment() -> list[str]:
    """The plugins ``FEDPART_PLUGINS`` names."""
    return [p for p in os.environ.get(ENV, "").split(os.pathsep) if p]


def use(names: Iterable[str], where: str = "--plugin") -> list[str]:
    """Import ``names`` now and add them to ``FEDPART_PLUGINS``, so that every config this
    process (and its workers) builds records them."""
    new = load_plugins(names, where)
    merged = list(dict.fromkeys([*from_environment(), *new]))
    if merged:
        os.environ[ENV] = os.pathsep.join(merged)
    return new


def loaded() -> list[str]:
    """The plugins imported so far in this process, in order."""
    return list(_loaded)
