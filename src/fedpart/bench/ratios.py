"""Comparisons between measured variants: speed ratios, the notes on the batched and process
backends, and the GPU targets."""

from __future__ import annotations

import math
from collections.abc import Sequence

from fedpart.bench.measure import VariantResult, WorkloadResult


def speed_ratio(a: VariantResult | None, b: VariantResult | None, what: str) -> float | None:
    """How much faster variant ``a`` is than ``b`` (above 1: ``a`` is faster), by training
    throughput (``what="train"``: samples/s) or by end-to-end time per round (``"end-to-end"``);
    ``None`` where either was not measured."""
    if a is None or b is None or a.na is not None or b.na is not None:
        return None
    if what == "train":
        x, y = a.samples_per_s, b.samples_per_s
    else:
        if not a.eval_s or not b.eval_s:
            return None
        x, y = b.end_to_end_s, a.end_to_end_s
    if not (x > 0 and y > 0) or math.isnan(x) or math.isnan(y):
        return None
    return x / y


def batched_ratios(variants: Sequence[VariantResult]) -> list[str]:
    """One note with batched / sequential (training throughput and end-to-end time) and batched /
    ceiling (training throughput), where those variants ran."""
    by = {v.variant: v for v in variants if v.na is None}
    batched = by.get("batched")
    if batched is None:
        return []
    parts = []
    seq = by.get("sequential")
    train, e2e = speed_ratio(batched, seq, "train"), speed_ratio(batched, seq, "end-to-end")
    if train is not None and seq is not None:
        part = f"batched / sequential: training throughput {train:.2f}x"
        if e2e is not None:
            part += (
                f", end-to-end {e2e:.2f}x ({seq.end_to_end_s:.3f} s -> "
                f"{batched.end_to_end_s:.3f} s per round)"
            )
        parts.append(part)
    ceil = speed_ratio(batched, by.get("ceiling"), "train")
    if ceil is not None:
        parts.append(f"batched / ceiling: training throughput {ceil:.2f}x")
    return ["; ".join(parts)] if parts else []


def gpu_targets(results: Sequence[WorkloadResult], device: str) -> list[tuple[str, str, str]]:
    """The GPU targets of the bench, as (target, measured, met) rows:

    * FedPer: one batched round (10 clients trained, every client evaluated) at most 60 ms;
    * FedPer: the batched backend's training throughput at least 0.7x the central ceiling's;
    * DFedPGP with 100 clients: one batched round (``run_round``: local training of every client
      and the push-sum mixing; evaluation excluded, shown alongside) at most 0.25 s.

    ``met`` is ``yes`` / ``no`` on a GPU, ``not a GPU`` on the CPU (the targets are the GPU's) and
    ``not measured`` where the workload or variant did not run."""
    by = {r.workload.name: r for r in results}
    gpu = device.startswith("cuda")
    rows: list[tuple[str, str, str]] = []

    def met(ok: bool) -> str:
        return ("yes" if ok else "no") if gpu else "not a GPU"

    def variants(name: str) -> dict[str, VariantResult]:
        r = by.get(name)
        if r is None or r.skipped:
            return {}
        return {v.variant: v for v in r.variants if v.na is None}

    v = variants("fedper")
    bat = v.get("batched")
    target = "FedPer: one round (training + evaluation of every client) <= 60 ms, batched"
    if bat is None or not bat.eval_s:
        rows.append((target, "—", "not measured"))
    else:
        measured = f"{bat.end_to_end_s * 1e3:.0f} ms (training {bat.train_s * 1e3:.0f} ms)"
        rows.append((target, measured, met(bat.end_to_end_s <= 0.06)))
    ratio = speed_ratio(bat, v.get("ceiling"), "train")
    target = "FedPer: batched training throughput >= 0.7x the central ceiling"
    if ratio is None:
        rows.append((target, "—", "not measured"))
    else:
        ceil = v["ceiling"]
        measured = f"{ratio:.2f}x ({bat.samples_per_s:,.0f} vs {ceil.samples_per_s:,.0f} samples/s)"
        rows.append((target, measured, met(ratio >= 0.7)))

    v = variants("dfedpgp")
    r = by.get("dfedpgp")
    clients = r.clients if r is not None else 0
    target = "DFedPGP, 100 clients: one round (training + mixing) <= 0.25 s, batched"
    bat = v.get("batched")
    if bat is None or clients != 100:
        why = "not measured" if clients in (0, 100) else f"not measured ({clients} clients)"
        rows.append((target, "—", why))
    else:
        measured = (
            f"{bat.train_s:.3f} s (with the evaluation of all clients: {bat.end_to_end_s:.3f} s)"
        )
        rows.append((target, measured, met(bat.train_s <= 0.25)))
    return rows


def parallel_efficiency(variants: Sequence[VariantResult]) -> list[str]:
    """One note per process-backend variant: its end-to-end speed-up over the sequential variant
    (one thread) and the parallel efficiency (speed-up / workers), then its speed-up over the best
    single-process variant (sequential at any thread count, or batched). Worker processes' memory
    is not in the memory columns, which measure this (the driver) process."""
    by = {v.variant: v for v in variants if v.na is None}
    seq = by.get("sequential")
    single = [
        v
        for name, v in by.items()
        if (name.startswith("sequential") or name == "batched") and v.end_to_end_s
    ]
    best = min(single, key=lambda v: v.end_to_end_s) if single else None
    notes = []
    for name, v in by.items():
        if not name.startswith("processes x") or seq is None or not v.end_to_end_s:
            continue
        n = int(name.rsplit("x", 1)[1])
        speedup = seq.end_to_end_s / v.end_to_end_s
        note = (
            f"{name}: end-to-end {speedup:.2f}x the sequential variant, parallel efficiency "
            f"{speedup / n:.0%}"
        )
        if best is not None:
            note += (
                f"; {best.end_to_end_s / v.end_to_end_s:.2f}x the best single-process variant "
                f"({best.variant})"
            )
        notes.append(note + " (memory columns: the driver process only)")
    return notes
