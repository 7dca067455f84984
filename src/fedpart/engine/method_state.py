"""A method's checkpointed state, declared once instead of a hand-written save/load pair.

A method lists the attributes that evolve over rounds and must survive a resume, each with the
form it has::

    checkpointed = (saved.Tensor("phi"), saved.PerClient("latest"), saved.Value("layer"))

and :func:`save_state` / :func:`load_state` write and read them (``Algorithm.extra_state`` and
``load_extra_state``). Tensors become the checkpoint's ``extra/<name>…`` entries, values keys of
``meta.json``'s ``algorithm_state``; ``name`` defaults to the attribute's name without its
leading underscores, so ``_round`` is saved as ``round``; an attribute of an attribute is a
dotted path (``saved.Tensor("mixer.matrix", key="phi")``). The checkpoint has already moved the
tensors to the run's device when they arrive here. An entry the checkpoint lacks leaves the
attribute as the freshly built method set it. What follows from the restored values (a layer
made personal again) is the method's ``state_restored`` hook.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

Tensors = dict[str, torch.Tensor]


@dataclasses.dataclass(frozen=True)
class Field:
    """One checkpointed attribute ``attr`` of a method, saved under ``key`` (default: ``attr``
    without leading underscores)."""

    attr: str
    key: str | None = None

    @property
    def name(self) -> str:
        return self.attr.lstrip("_") if self.key is None else self.key

    def get(self, method: Any) -> Any:
        """The attribute's value (``attr`` may be a dotted path: ``mixer.matrix``)."""
        for part in self.attr.split("."):
            method = getattr(method, part)
        return method

    def set(self, method: Any, value: Any) -> None:
        *path, last = self.attr.split(".")
        for part in path:
            method = getattr(method, part)
        setattr(method, last, value)

    def save(self, method: Any) -> tuple[Tensors, dict[str, Any]]:  # pragma: no cover
        raise NotImplementedError

    def load(self, method: Any, tensors: Tensors, values: dict[str, Any]) -> None:
        raise NotImplementedError  # pragma: no cover


def _entries(tensors: Tensors, prefix: str) -> Tensors:
    return {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}


def _in_order(loaded: dict[str, Any], current: Any) -> dict[str, Any]:
    """``loaded`` in the key order of the attribute it replaces, then any new keys."""
    first = [k for k in current if k in loaded] if isinstance(current, dict) else []
    return {k: loaded[k] for k in [*first, *(k for k in loaded if k not in first)]}


def _model_keys(method: Any) -> dict[str, None]:
    """The run model's state keys in order (empty when the method has no model in view)."""
    model = getattr(getattr(method, "ctx", None), "model", None)
    return dict.fromkeys(model.state_dict()) if model is not None else {}


@dataclasses.dataclass(frozen=True)
class Tensor(Field):
    """One tensor (``None``: nothing saved), restored as ``dtype`` when given."""

    dtype: torch.dtype | None = None

    def save(self, method: Any) -> tuple[Tensors, dict[str, Any]]:
        value = self.get(method)
        return ({} if value is None else {self.name: value}), {}

    def load(self, method: Any, tensors: Tensors, values: dict[str, Any]) -> None:
        if self.name in tensors:
            value = tensors[self.name]
            self.set(method, value if self.dtype is None else value.to(self.dtype))


@dataclasses.dataclass(frozen=True)
class Named(Field):
    """A ``{key: tensor}`` mapping, as ``<name>/<key>`` entries; saved as ``stored`` and
    restored as ``dtype`` when given (TailorFL's 0/1 matrices travel as bytes)."""

    dtype: torch.dtype | None = None
    stored: torch.dtype | None = None

    def save(self, method: Any) -> tuple[Tensors, dict[str, Any]]:
        items = self.get(method).items()
        return {
            f"{self.name}/{k}": v if self.stored is None else v.to(self.stored) for k, v in items
        }, {}

    def load(self, method: Any, tensors: Tensors, values: dict[str, Any]) -> None:
        loaded = _entries(tensors, f"{self.name}/")
        if self.dtype is not None:
            loaded = {k: v.to(self.dtype) for k, v in loaded.items()}
        self.set(method, _in_order(loaded, self.get(method)))


@dataclasses.dataclass(frozen=True)
class PerClient(Field):
    """A ``{client: state}`` mapping, as ``<name>/<client>/<key>`` entries (``key=""``:
    ``<client>/<key>``, the method's only tensors)."""

    def _prefix(self) -> str:
        return f"{self.name}/" if self.name else ""

    def save(self, method: Any) -> tuple[Tensors, dict[str, Any]]:
        per_client = self.get(method)
        prefix = self._prefix()
        return {
            f"{prefix}{c}/{k}": v for c, state in per_client.items() for k, v in state.items()
        }, {}

    def load(self, method: Any, tensors: Tensors, values: dict[str, Any]) -> None:
        out: dict[int, Tensors] = {}
        for name, value in _entries(tensors, self._prefix()).items():
            client, _, key = name.partition("/")
            out.setdefault(int(client), {})[key] = value
        # a checkpoint file lists its keys sorted: each client's state goes back in the model's
        # key order (what the method built it in, and what stacking clients together needs)
        order = _model_keys(method)
        self.set(method, {client: _in_order(state, order) for client, state in out.items()})


@dataclasses.dataclass(frozen=True)
class Stacked(Field):
    """A list over clients of ``{key: tensor}`` with the same keys and shapes, as one
    ``<name>/<key>`` entry per key stacked over the clients (Dis-PFL's masks)."""

    dtype: torch.dtype | None = None

    def save(self, method: Any) -> tuple[Tensors, dict[str, Any]]:
        per_client = self.get(method)
        keys = list(per_client[0]) if per_client else []
        return {f"{self.name}/{k}": torch.stack([s[k] for s in per_client]) for k in keys}, {}

    def load(self, method: Any, tensors: Tensors, values: dict[str, Any]) -> None:
        loaded = _entries(tensors, f"{self.name}/")
        if not loaded:
            return
        current = self.get(method)
        loaded = _in_order(loaded, current[0] if current else {})
        clients = len(next(iter(loaded.values())))
        cast = (lambda t: t) if self.dtype is None else (lambda t: t.to(self.dtype))
        self.set(method, [{k: cast(t[c]) for k, t in loaded.items()} for c in range(clients)])


@dataclasses.dataclass(frozen=True)
class Module(Field):
    """An ``nn.Module``'s state dict, as ``<name>/<key>`` entries, loaded into the module
    (``None``: nothing saved or loaded)."""

    def save(self, method: Any) -> tuple[Tensors, dict[str, Any]]:
        module = self.get(method)
        if module is None:
            return {}, {}
        return {f"{self.name}/{k}": v.detach() for k, v in module.state_dict().items()}, {}

    def load(self, method: Any, tensors: Tensors, values: dict[str, Any]) -> None:
        module = self.get(method)
        if module is not None:
            module.load_state_dict(_entries(tensors, f"{self.name}/"))


@dataclasses.dataclass(frozen=True)
class Value(Field):
    """A JSON value in ``meta.json``; ``encode`` / ``decode`` convert what JSON cannot hold
    as it is (integer mapping keys)."""

    encode: Callable[[Any], Any] | None = None
    decode: Callable[[Any], Any] | None = None

    def save(self, method: Any) -> tuple[Tensors, dict[str, Any]]:
        value = self.get(method)
        return {}, {self.name: value if self.encode is None else self.encode(value)}

    def load(self, method: Any, tensors: Tensors, values: dict[str, Any]) -> None:
        if self.name in values:
            value = values[self.name]
            self.set(method, value if self.decode is None else self.decode(value))


def int_keys(mapping: dict[str, Any]) -> dict[int, int]:
    """A JSON mapping of client → integer back to integer keys and values."""
    return {int(k): int(v) for k, v in mapping.items()}


def str_keys(mapping: dict[int, Any]) -> dict[str, Any]:
    """A mapping keyed by client as JSON keys."""
    return {str(k): v for k, v in mapping.items()}


def save_state(method: Any, fields: tuple[Field, ...]) -> tuple[Tensors, dict[str, Any]]:
    """The declared ``fields`` of ``method`` as (checkpoint tensors, JSON values)."""
    tensors: Tensors = {}
    values: dict[str, Any] = {}
    for f in fields:
        t, v = f.save(method)
        tensors.update(t)
        values.update(v)
    return tensors, values


def load_state(
    method: Any, fields: tuple[Field, ...], tensors: Tensors, values: dict[str, Any]
) -> None:
    """Restore what :func:`save_state` returned into ``method``'s attributes."""
    for f in fields:
        f.load(method, tensors, values)
