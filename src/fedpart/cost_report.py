"""``fedpart cost``: one client's forward FLOPs, model size and peak training memory by method,
width and batch size, next to Pa3dFL's Tables 2 and 8 where they print the same cell.

The numbers come from :mod:`fedpart.engine.width_cost` (``docs/capacity.md``): forward
multiply-adds of one batch, the body's float32 parameters in MiB, and the peak of live tensor
memory during one SGD step on this machine's device (the paper's memory is GPU memory).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from fedpart.engine.width_cost import (
    PAPER_TABLE2,
    PAPER_TABLE2_PFEDGATE,
    PAPER_TABLE8,
    TABLE2_RATIOS,
    ClientCost,
    client_cost,
    pfedgate_cost,
)
from fedpart.errors import FedpartError
from fedpart.formatting import markdown_table

__all__ = ["COST_KINDS", "CostRequest", "cost_lines", "request_from"]

#: method name → the kind of client model it trains (Table 2's rows; "p-width" = a width slice)
COST_KINDS: dict[str, str] = {
    "fedavg": "fedavg",
    "p-width": "p-width",
    "heterofl": "p-width",
    "fedrolex": "p-width",
    "fjord": "p-width",
    "tailorfl": "p-width",
    "flanc": "flanc",
    "pa3dfl": "pa3dfl",
    "pfedgate": "pfedgate",
}

#: the rows of the full table, in Table 2's order
TABLE_ROWS = ("fedavg", "p-width", "flanc", "pfedgate", "pa3dfl")
_VARIANTS = ("cifar100", "fmnist")
_STEP = 16  # widths are multiples of 1/16 (Pa3dFL's p_min), as the factorized models need


@dataclass(frozen=True)
class CostRequest:
    """What to cost: methods (model kinds), widths, batch size, model variant, memory or not."""

    methods: tuple[str, ...]
    widths: tuple[float, ...]
    batch_size: int
    variant: str
    memory: bool


def _method(name: str) -> str:
    if name not in COST_KINDS:
        raise FedpartError(
            f"cost: unknown method '{name}'; valid: {', '.join(COST_KINDS)} (or all)"
        )
    return name


def _width(value: float, what: str) -> float:
    if not (0.0 < value <= 1.0) or not math.isfinite(value):
        raise FedpartError(f"cost: {what} must be in (0, 1], got {value}")
    if abs(value * _STEP - round(value * _STEP)) > 1e-9:
        raise FedpartError(f"cost: {what} must be a multiple of 1/16, got {value}")
    return round(value * _STEP) / _STEP


def request_from(
    *,
    config: Any = None,
    method: str | None = None,
    width: float | None = None,
    ratio: float | None = None,
    batch: int | None = None,
    variant: str | None = None,
    memory: bool = True,
) -> CostRequest:
    """A :class:`CostRequest` from a loaded config and/or explicit flags (flags win).

    A config gives the method (``algorithm.name``), the batch size, the model variant (it must
    be ``pa3dfl_cnn``) and the distinct widths of its capacity profile. Without a width or ratio
    the widths are Table 2's ``p = 1/16, 1/8, 1/2, 1``; without a method, every row of Table 2.
    """
    widths: tuple[float, ...] = tuple(math.sqrt(r) for r in TABLE2_RATIOS)
    methods: tuple[str, ...] = TABLE_ROWS
    size, model_variant = 128, "cifar100"
    if config is not None:
        if config.model.name != "pa3dfl_cnn":
            raise FedpartError(
                f"cost: the cost tables are for the Pa3dFL CNNs (model.name=pa3dfl_cnn), "
                f"not {config.model.name}"
            )
        # pa3dfl_cnn's own default: the Fashion-MNIST CNN for one-channel images
        one_channel = config.dataset.name in {"fmnist", "mnist", "emnist"}
        model_variant = config.model.options.get("variant") or (
            "fmnist" if one_channel else "cifar100"
        )
        methods = (_method(config.algorithm.name),)
        size = config.federation.batch_size
        from fedpart.engine.capacity import capacity_profile

        f = config.federation
        profile = capacity_profile(
            f.capacity, config.partition.num_clients, config.seed, f.capacity_values, f.p_min
        )
        widths = tuple(sorted({_width(float(p), "a client's width") for p in profile.width}))
    if method is not None and method != "all":
        methods = (_method(method),)
    if width is not None and ratio is not None:
        raise FedpartError("cost: give --width or --ratio, not both")
    if width is not None:
        widths = (_width(width, "--width"),)
    if ratio is not None:
        if not 0.0 < ratio <= 1.0:
            raise FedpartError(f"cost: --ratio must be in (0, 1], got {ratio}")
        from fedpart.engine.capacity import width_of

        widths = (_width(width_of(ratio), "the width of --ratio"),)
    if batch is not None:
        size = batch
    if size < 1:
        raise FedpartError(f"cost: the batch size must be >= 1, got {size}")
    if variant is not None:
        model_variant = variant
    if model_variant not in _VARIANTS:
        raise FedpartError(
            f"cost: unknown variant '{model_variant}'; valid: {', '.join(_VARIANTS)}"
        )
    return CostRequest(methods, widths, size, model_variant, memory)


def _cost(kind: str, p: float, req: CostRequest) -> ClientCost | None:
    if kind == "fedavg" and p < 1.0:
        return None  # FedAvg trains the full model (Table 2 prints it at r = 1 only)
    if kind == "pfedgate":
        return pfedgate_cost(p, req.batch_size, variant=req.variant, memory=req.memory)
    return client_cost(kind, p, req.batch_size, variant=req.variant, memory=req.memory)


def _paper(kind: str, p: float, batch: int, variant: str) -> str:
    """The paper's (FLOPs, size, memory) for this cell, or ``-``."""
    if variant != "cifar100":
        return "-"
    r = min(TABLE2_RATIOS, key=lambda x: abs(x - p * p))
    if abs(r - p * p) > 1e-12:
        return "-"
    table2 = PAPER_TABLE2_PFEDGATE if kind == "pfedgate" else PAPER_TABLE2.get(kind, {})
    flops = mem = size = "-"
    if batch == 128 and r in table2:
        flops, mem, size = table2[r]
    rows = PAPER_TABLE8.get("p-width" if kind == "fedavg" and p == 1.0 else kind, {})
    if batch in rows and batch != 128:
        flops, mem = rows[batch][TABLE2_RATIOS.index(r)]
        size = table2[r][2] if r in table2 else "-"
    if flops == mem == size == "-":
        return "-"
    return f"{flops} / {size} / {mem}"


def cost_lines(req: CostRequest) -> list[str]:
    """The report: one markdown row per (method, width)."""
    rows = []
    for name in req.methods:
        kind = COST_KINDS[name]
        for p in req.widths:
            c = _cost(kind, p, req)
            if c is None:
                continue
            mem = f"{c.peak_mib:.1f}" if c.peak_mib is not None else "-"
            r = p * p
            rows.append(
                [
                    name,
                    _ratio(r),
                    _ratio(p),
                    f"{c.forward_macs / 1e7:.2f}",
                    f"{c.size_mib * 10:.3g}",
                    mem,
                    _paper(kind, p, req.batch_size, req.variant),
                ]
            )
    header = ["method", "r", "p", "FLOPs ×10⁷", "size ×10⁻¹ MiB", "peak memory MiB", "paper"]
    return [
        f"Pa3dFL CNN ({req.variant}), batch {req.batch_size}: one client's forward FLOPs "
        f"(multiply-adds ×10⁷), model size (body, ×10⁻¹ MiB) and peak training memory (MiB, "
        f"measured on this CPU); paper: Tables 2 and 8 (FLOPs / size / GPU memory)",
        "",
        *markdown_table(header, rows),
    ]


def _ratio(x: float) -> str:
    for d in (1, 2, 4, 8, 16, 64, 256):
        if abs(x * d - round(x * d)) < 1e-12:
            n = round(x * d)
            return str(n) if d == 1 else f"{n}/{d}"
    return f"{x:.4g}"
