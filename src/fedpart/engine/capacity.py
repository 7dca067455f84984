"""Capacity profiles: how much of the full model each client can afford, and the width it trains.

A client's *capacity* ``r_i`` is the fraction of the full model's cost it can afford (Pa3dFL
Eq. 2: ``|M_θi| ≤ r_i · s_max``). Width-reduction methods (HeteroFL, FedRolex, Fjord, FLANC,
Pa3dFL) turn it into a width ratio ``p_i`` with ``p_i² ≤ r_i``, since a model of width ``p`` costs
about ``p²`` of the full one. Widths are multiples of a smallest width ``p_min`` so that every
layer's kept channel count ``p·C`` is a whole number (Pa3dFL needs ``p / p_min`` whole blocks).

Everything here is a pure function of its arguments; the only randomness is the assignment of
capacities to clients, drawn from the generator the caller passes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from torch import nn

from fedpart.config import CAPACITY_KINDS
from fedpart.errors import FedpartError

__all__ = [
    "CAPACITY_KINDS",
    "DEFAULT_P_MIN",
    "CapacityProfile",
    "capacities",
    "capacity_profile",
    "capacity_groups",
    "group_labels",
    "narrow_for_capacity",
    "width_of",
    "widths",
]

#: Pa3dFL's systemic constraint σ (App. A, Fig. 4): the smallest width is 1/16
DEFAULT_P_MIN = 1.0 / 16.0

# Widths are computed in floating point; without this slack √(1/4) / (1/16) could floor to 7.
_EPS = 1e-9


def capacities(
    kind: str,
    num_clients: int,
    rng: np.random.Generator | int | None = None,
    values: Sequence[float] | None = None,
    *,
    low: float = 0.01,
    high: float = 1.0,
    shuffle: bool = True,
) -> np.ndarray:
    """The capacity ratio ``r_i`` of every client, a float64 array of length ``num_clients``.

    - ``ideal``: every ``r_i = 1`` (Pa3dFL's *Ideal* setting, unlimited resources).
    - ``uniform``: an evenly spaced grid ``linspace(low, high, N)`` (Pa3dFL's *Hetero.*: "uniformly
      distributed from 1% to 100% across clients"; the paper does not say grid or i.i.d., and the
      grid gives every run the same set of capacities, §2.11.2), assigned to clients in a random
      order drawn from ``rng`` (``shuffle=False`` keeps client ``i`` at the ``i``-th grid point).
    - ``uniform_random``: i.i.d. ``U(low, high)`` draws from ``rng``.
    - ``list``: the explicit ``values``, one per client, each in ``(0, 1]``.

    ``rng`` is a numpy generator or an integer seed, required by the random kinds (``uniform``
    with ``shuffle``, ``uniform_random``).
    """
    if num_clients < 1:
        raise ValueError(f"num_clients must be >= 1, got {num_clients}")
    if kind not in CAPACITY_KINDS:
        raise ValueError(f"unknown capacity kind {kind!r}; valid: {', '.join(CAPACITY_KINDS)}")
    if kind == "list":
        if values is None:
            raise ValueError("capacity kind 'list' needs values (one ratio per client)")
        r = np.asarray([float(v) for v in values], dtype=np.float64)
        if r.shape != (num_clients,):
            raise ValueError(f"expected {num_clients} capacity values, got {r.size}")
        _check_ratios(r)
        return r
    if values is not None:
        raise ValueError(f"capacity kind {kind!r} takes no values")
    if kind == "ideal":
        return np.ones(num_clients, dtype=np.float64)
    if not 0.0 < low <= high <= 1.0:
        raise ValueError(f"need 0 < low <= high <= 1, got low={low}, high={high}")
    if kind == "uniform" and not shuffle:
        return np.linspace(low, high, num_clients, dtype=np.float64)
    if rng is None:
        # an unseeded draw would give every run a different assignment
        raise ValueError(f"capacity kind {kind!r} needs rng (a numpy Generator or a seed)")
    gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    if kind == "uniform_random":
        return gen.uniform(low, high, size=num_clients)
    grid = np.linspace(low, high, num_clients, dtype=np.float64)
    return grid[gen.permutation(num_clients)]


def width_of(r: float, p_min: float = DEFAULT_P_MIN) -> float:
    """The width ratio a client of capacity ``r`` trains: ``max(p_min, ⌊√r / p_min⌋ · p_min)``.

    Pa3dFL §2.11.1: the largest multiple of ``p_min`` with ``p² ≤ r``, and never below
    ``p_min`` (a client below ``p_min²`` still trains the smallest model). With the default
    ``p_min = 1/16``, ``r ∈ {1/256, 1/64, 1/4, 1}`` give ``p ∈ {1/16, 1/8, 1/2, 1}``.
    """
    if not 0.0 < p_min <= 1.0:
        raise ValueError(f"p_min must be in (0, 1], got {p_min}")
    _check_ratios(np.asarray([r], dtype=np.float64))
    steps = math.floor(math.sqrt(r) / p_min + _EPS)
    return max(p_min, steps * p_min)


def widths(rs: Sequence[float] | np.ndarray, p_min: float = DEFAULT_P_MIN) -> np.ndarray:
    """:func:`width_of` for every client; the federation's smallest width is ``widths(...).min()``
    (Pa3dFL Alg. 2 line 2: ``p_min = min_i p_i``, which sets ``R1 = T · p_min``)."""
    return np.asarray([width_of(float(r), p_min) for r in rs], dtype=np.float64)


def capacity_groups(
    rs: Sequence[float] | np.ndarray, num_groups: int = 5, *, low: float = 0.0, high: float = 1.0
) -> np.ndarray:
    """The capacity group of each client (``0`` = lowest), for per-group accuracy reports.

    Pa3dFL's Fig. 2 plots mean test accuracy over "five capacity clusters" without saying where
    the cluster edges are. The groups here are equal-width intervals of ``r`` over
    ``(low, high]``: ``(0, 0.2], (0.2, 0.4], …, (0.8, 1]`` by default. With the ``uniform``
    profile over 100 clients that is 20 clients per group; in the ``ideal`` profile every client
    is in the top group.
    """
    if num_groups < 1:
        raise ValueError(f"num_groups must be >= 1, got {num_groups}")
    r = np.asarray(rs, dtype=np.float64)
    _check_ratios(r)
    # a grid point such as 0.2 may be stored as 0.2000000000000001: round before binning, so that
    # right-closed intervals see the value the grid meant
    scaled = np.round((r - low) / (high - low) * num_groups, 9)
    return np.clip(np.ceil(scaled).astype(np.int64) - 1, 0, num_groups - 1)


def group_labels(num_groups: int = 5, *, low: float = 0.0, high: float = 1.0) -> list[str]:
    """Human-readable interval of each group of :func:`capacity_groups`, e.g. ``"(0.2, 0.4]"``."""
    edges = np.linspace(low, high, num_groups + 1)
    return [f"({edges[g]:.3g}, {edges[g + 1]:.3g}]" for g in range(num_groups)]


def _check_ratios(r: np.ndarray) -> None:
    if not np.all(np.isfinite(r)) or np.any(r <= 0.0) or np.any(r > 1.0):
        raise ValueError(f"capacity ratios must be in (0, 1], got {r.tolist()}")


@dataclass(frozen=True)
class CapacityProfile:
    """A run's capacities ``r_i``, widths ``p_i`` and capacity groups, fixed for the whole run."""

    capacity: np.ndarray
    width: np.ndarray
    groups: np.ndarray

    @property
    def p_min(self) -> float:
        """The federation's smallest width ``min_i p_i``: what capacity-unaware methods train."""
        return float(self.width.min())

    def client_json(self) -> dict[str, list]:
        """The per-client entries of ``clients.json``."""
        return {
            "capacity": [float(r) for r in self.capacity],
            "width": [float(p) for p in self.width],
            "capacity_groups": [int(g) for g in self.groups],
            "capacity_group_labels": group_labels(),
        }


def capacity_profile(
    kind: str,
    num_clients: int,
    seed: int,
    values: Sequence[float] = (),
    p_min: float = DEFAULT_P_MIN,
) -> CapacityProfile:
    """The profile of ``federation.capacity``: capacities drawn from the run's ``capacity``
    stream (the same for every method of a seed), widths by :func:`width_of`."""
    from fedpart.seeding import numpy_rng  # noqa: PLC0415 - keeps this module standalone

    rng = numpy_rng(seed, "capacity") if kind in ("uniform", "uniform_random") else None
    r = capacities(kind, num_clients, rng, values=list(values) if kind == "list" else None)
    return CapacityProfile(r, widths(r, p_min), capacity_groups(r))


def narrow_for_capacity(model: nn.Module, p: float) -> nn.Module:
    """``model`` cut to width ``p`` (``model`` itself at ``p = 1``), for the clients of a
    capacity-unaware method; a one-line :class:`FedpartError` when the model cannot be cut."""
    from fedpart.models.width import narrow_model  # noqa: PLC0415 - models import torch layers

    if p >= 1.0:
        return model
    try:
        narrow = narrow_model(model, p)
    except (ValueError, KeyError, TypeError) as exc:
        raise FedpartError(
            f"federation.capacity: the model {type(model).__name__} cannot be cut to width "
            f"{p:g}: {exc}"
        ) from exc
    # The p-width model is trained from scratch, so it is initialised for its own fan-in (from
    # torch's global RNG, seeded by the caller): slices of the full model's initialisation are
    # scaled for the full fan-in, about √p too small per layer, and the signal vanishes through
    # the layers (measured: FedAvg at p = 1/16 on Fashion-MNIST kept its loss at ln 10).
    for module in narrow.modules():
        reset = getattr(module, "reset_parameters", None)
        if callable(reset) and module is not narrow:
            reset()
    return narrow
