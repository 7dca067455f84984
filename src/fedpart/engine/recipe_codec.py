"""A client job as data: a recipe, optimiser settings and frozen blocks to and from a JSON text
plus named tensors, with no pickle.

A function in the recipe travels as its registered name (:func:`~fedpart.engine.recipe.
recipe_function`) and its bound arguments; a tensor argument travels as the name of a tensor
beside the text. The receiver looks every name up among the functions registered in its own
process (fedpart's methods, or a plugin it loaded itself) and refuses any other, and checks
every field of the text against the recipe's types: what arrives can only select code that the
receiver already trusts.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping
from typing import Any

import torch

from fedpart.engine.recipe import (
    Bound,
    LossTerm,
    Observer,
    Phase,
    Recipe,
    function_name,
    recipe_functions,
)
from fedpart.engine.training import TrainSettings
from fedpart.errors import FedpartError

__all__ = ["decode_job", "encode_job"]

State = dict[str, torch.Tensor]


# ------------------------------------------------------------------------------ encoding
class _Encoder:
    def __init__(self) -> None:
        self.tensors: State = {}

    def value(self, v: Any) -> Any:
        if v is None or isinstance(v, (bool, int, str)):
            return v
        if isinstance(v, float):
            return v if math.isfinite(v) else {"float": repr(v)}
        if isinstance(v, torch.Tensor):
            key = f"t{len(self.tensors)}"
            self.tensors[key] = v.detach().cpu().contiguous()
            return {"tensor": key}
        if isinstance(v, (tuple, list)):
            return {type(v).__name__: [self.value(x) for x in v]}
        if isinstance(v, dict):
            return {"dict": [[str(k), self.value(x)] for k, x in v.items()]}
        raise TypeError(f"a recipe argument {v!r} is not plain data")

    def function(self, fn: Callable[..., Any] | None) -> Any:
        if fn is None:
            return None
        if isinstance(fn, Bound):
            return {
                "fn": function_name(fn.fn),
                "args": [self.value(a) for a in fn.args],
                "kwargs": [[k, self.value(v)] for k, v in fn.kwargs],
            }
        return {"fn": function_name(fn)}

    def recipe(self, r: Recipe) -> dict[str, Any]:
        return {
            "phases": [
                {
                    "blocks": None if p.blocks is None else list(p.blocks),
                    "epochs": p.epochs,
                    "lr_scale": self.value(float(p.lr_scale)),
                    "name": p.name,
                    "loss_terms": [
                        {
                            "name": t.name,
                            "weight": self.value(float(t.weight)),
                            "fn": self.function(t.fn),
                        }
                        for t in p.loss_terms
                    ],
                }
                for p in r.phases
            ],
            "criterion": self.function(r.criterion),
            "objective": self.function(r.objective),
            "observe": None
            if r.observe is None
            else {"blocks": list(r.observe.blocks), "fn": self.function(r.observe.fn)},
        }


def encode_job(recipe: Recipe, settings: TrainSettings, frozen: set[str]) -> tuple[str, State]:
    """``(text, tensors)`` of a client job; ``TypeError`` when the recipe holds a function that
    is not registered (a closure, a lambda) or an argument that is not plain data."""
    enc = _Encoder()
    text = json.dumps(
        {
            "recipe": enc.recipe(recipe),
            "settings": {k: enc.value(v) for k, v in dataclasses.asdict(settings).items()},
            "frozen": sorted(frozen),
        },
        allow_nan=False,
    )
    return text, enc.tensors


# ------------------------------------------------------------------------------ decoding
class _Decoder:
    def __init__(self, tensors: Mapping[str, torch.Tensor]) -> None:
        self.tensors = tensors
        self.functions = recipe_functions()

    def fail(self, what: str) -> FedpartError:
        return FedpartError(f"refused a client job: {what}")

    def value(self, v: Any) -> Any:
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if isinstance(v, dict) and len(v) == 1:
            ((kind, body),) = v.items()
            if kind == "tensor" and isinstance(body, str) and body in self.tensors:
                return self.tensors[body]
            if kind == "float" and body in ("inf", "-inf", "nan"):
                return float(body)
            if kind in ("list", "tuple") and isinstance(body, list):
                items = [self.value(x) for x in body]
                return items if kind == "list" else tuple(items)
            if kind == "dict" and isinstance(body, list):
                pairs = [self.pair(p) for p in body]
                return {k: self.value(x) for k, x in pairs}
        raise self.fail(f"an argument of unknown form {str(v)[:60]!r}")

    def pair(self, p: Any) -> tuple[str, Any]:
        if not (isinstance(p, list) and len(p) == 2 and isinstance(p[0], str)):
            raise self.fail(f"a malformed keyword argument {str(p)[:60]!r}")
        return p[0], p[1]

    def function(self, spec: Any, *, optional: bool = False) -> Any:
        if spec is None and optional:
            return None
        if not isinstance(spec, dict) or not isinstance(spec.get("fn"), str):
            raise self.fail(f"a function given as {str(spec)[:60]!r}")
        if set(spec) - {"fn", "args", "kwargs"}:
            raise self.fail(f"unknown fields {sorted(set(spec) - {'fn', 'args', 'kwargs'})}")
        name = spec["fn"]
        fn = self.functions.get(name)
        if fn is None:
            raise self.fail(
                f"function {name!r} is not registered on this node (only fedpart's recipe "
                "functions and those of plugins the node loads itself run)"
            )
        if "args" not in spec and "kwargs" not in spec:
            return fn
        args = spec.get("args", [])
        kwargs = spec.get("kwargs", [])
        if not isinstance(args, list) or not isinstance(kwargs, list):
            raise self.fail(f"malformed arguments of {name!r}")
        return Bound(
            fn,
            tuple(self.value(a) for a in args),
            tuple((k, self.value(v)) for k, v in map(self.pair, kwargs)),
        )

    def names(self, v: Any, what: str) -> tuple[str, ...]:
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise self.fail(f"{what} is not a list of block names")
        return tuple(v)

    def number(self, v: Any, what: str) -> float:
        v = self.value(v)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.fail(f"{what} is not a number")
        return float(v)

    def phase(self, p: Any) -> Phase:
        if not isinstance(p, dict) or set(p) != {
            "blocks",
            "epochs",
            "lr_scale",
            "name",
            "loss_terms",
        }:
            raise self.fail("a malformed phase")
        epochs = p["epochs"]
        if epochs is not None and (isinstance(epochs, bool) or not isinstance(epochs, int)):
            raise self.fail("a phase's epochs are not a whole number")
        if not isinstance(p["name"], str) or not isinstance(p["loss_terms"], list):
            raise self.fail("a malformed phase")
        terms = []
        for t in p["loss_terms"]:
            if (
                not isinstance(t, dict)
                or set(t) != {"name", "weight", "fn"}
                or not isinstance(t["name"], str)
            ):
                raise self.fail("a malformed loss term")
            terms.append(
                LossTerm(
                    t["name"], self.function(t["fn"]), self.number(t["weight"], "a loss weight")
                )
            )
        return Phase(
            blocks=None if p["blocks"] is None else self.names(p["blocks"], "a phase's blocks"),
            epochs=epochs,
            lr_scale=self.number(p["lr_scale"], "a phase's lr_scale"),
            loss_terms=tuple(terms),
            name=p["name"],
        )

    def recipe(self, r: Any) -> Recipe:
        if not isinstance(r, dict) or set(r) != {"phases", "criterion", "objective", "observe"}:
            raise self.fail("a malformed recipe")
        if not isinstance(r["phases"], list):
            raise self.fail("a recipe's phases are not a list")
        observe = r["observe"]
        if observe is not None:
            if not isinstance(observe, dict) or set(observe) != {"blocks", "fn"}:
                raise self.fail("a malformed observer")
            observe = Observer(
                self.names(observe["blocks"], "observed blocks"), self.function(observe["fn"])
            )
        return Recipe(
            phases=tuple(self.phase(p) for p in r["phases"]),
            criterion=self.function(r["criterion"]),
            objective=self.function(r["objective"], optional=True),
            observe=observe,
        )

    def settings(self, s: Any) -> TrainSettings:
        fields = {f.name: f for f in dataclasses.fields(TrainSettings)}
        if not isinstance(s, dict) or set(s) != set(fields):
            raise self.fail("malformed optimiser settings")
        out: dict[str, Any] = {}
        for k, v in s.items():
            v = self.value(v)
            kind = type(getattr(_DEFAULT_SETTINGS, k))
            if kind is float and isinstance(v, int) and not isinstance(v, bool):
                v = float(v)
            if type(v) is not kind:
                raise self.fail(f"optimiser setting {k} is not a {kind.__name__}")
            out[k] = v
        return TrainSettings(**out)


_DEFAULT_SETTINGS = TrainSettings(
    lr=0.0, momentum=0.0, weight_decay=0.0, batch_size=1, local_epochs=1, drop_last=False, seed=0
)


def decode_job(
    text: str, tensors: Mapping[str, torch.Tensor]
) -> tuple[Recipe, TrainSettings, set[str]]:
    """The client job :func:`encode_job` wrote; a one-line :class:`FedpartError` for anything
    else (a function not registered here, a field of the wrong type, an unknown field)."""
    try:
        job = json.loads(text)
    except (ValueError, TypeError) as exc:
        raise FedpartError(f"refused a client job: not JSON ({exc})") from None
    dec = _Decoder(tensors)
    if not isinstance(job, dict) or set(job) != {"recipe", "settings", "frozen"}:
        raise dec.fail("a malformed job")
    return (
        dec.recipe(job["recipe"]),
        dec.settings(job["settings"]),
        set(dec.names(job["frozen"], "frozen")),
    )
