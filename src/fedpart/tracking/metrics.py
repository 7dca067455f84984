"""``metrics.jsonl`` and ``summary.json``: reading the per-round rows back (one parser, used by
the run directory and by ``fedpart report``) and the summary made from them."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

#: per-round metrics of ``evaluation.participants`` (FL-bench's protocol)
PARTICIPANT_METRICS = ("participants_accuracy_before", "participants_accuracy_after")


class MetricsLineError(ValueError):
    """A line of ``metrics.jsonl`` that is not JSON: its number (``line``, from 1) and the
    decoder's error (``error``)."""

    def __init__(self, line: int, error: ValueError) -> None:
        super().__init__(f"line {line}: {error}")
        self.line = line
        self.error = error


def parse_metrics(data: bytes) -> Iterator[tuple[int, Any]]:
    """The lines of a ``metrics.jsonl`` file's bytes as ``(line number, JSON value)``, blank
    lines skipped. A last line without its newline is an append that did not finish (a run
    killed mid-write): it is dropped. A line that is not JSON raises :class:`MetricsLineError`
    when it is reached; what the values must be (objects, with a round) is the caller's to say.
    """
    lines = data.split(b"\n")
    if lines and lines[-1] != b"":
        lines = lines[:-1]  # no newline after it: a write that did not finish
    for lineno, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            value = json.loads(raw.decode("utf-8"))
        except ValueError as exc:
            raise MetricsLineError(lineno, exc) from exc
        yield lineno, value


def _stats(rows: list[dict[str, Any]], key: str, last_k: int) -> dict[str, Any]:
    values = [(r["round"], r[key]) for r in rows if r.get(key) is not None]
    if not values:
        return {"final": None, "best": None, "best_round": None, f"last{last_k}_mean": None}
    best_round, best = max(values, key=lambda rv: (rv[1], -rv[0]))
    tail = [v for _, v in values[-last_k:]]
    return {
        "final": values[-1][1],
        "best": best,
        "best_round": best_round,
        f"last{last_k}_mean": sum(tail) / len(tail),
    }


def summarize(
    rows: list[dict[str, Any]],
    final_row: dict[str, Any] | None,
    *,
    algorithm: str,
    dataset: str,
    num_clients: int,
    rounds_completed: int,
    wall_seconds: float,
    last_k: int = 10,
    protocols: dict[str, str] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``summary.json`` object from the per-round rows.

    ``final`` is the accuracy after the run ends (after fine-tuning for methods that fine-tune);
    ``best``/``best_round``/``last10_mean`` are over the evaluated rounds.
    """
    summary: dict[str, Any] = {
        "algorithm": algorithm,
        "dataset": dataset,
        "num_clients": num_clients,
        "rounds_completed": rounds_completed,
    }
    optional = ("global_accuracy", *PARTICIPANT_METRICS)
    for key in ("accuracy", "accuracy_weighted", *optional):
        stats = _stats(rows, key, last_k)
        if stats["final"] is None and key in optional:
            continue
        if final_row is not None and final_row.get(key) is not None:
            stats["final"] = final_row[key]
        stats.setdefault("last10_mean", stats[f"last{last_k}_mean"])
        summary[key] = stats
    loss = final_row.get("loss") if final_row else (rows[-1]["loss"] if rows else None)
    summary["loss"] = {"final": loss if loss is None or math.isfinite(loss) else None}
    summary["communication"] = {
        "up_bytes": int(sum(r.get("up_bytes", 0) for r in rows)),
        "down_bytes": int(sum(r.get("down_bytes", 0) for r in rows)),
    }
    summary["compute"] = {
        "proxy": int(sum(r.get("compute_proxy") or 0 for r in rows)),
        "train_macs": int(sum(r.get("train_macs") or 0 for r in rows)),
    }
    summary["wall_seconds"] = wall_seconds
    if protocols:
        summary["protocols"] = {k: v for k, v in protocols.items() if k in summary}
    if extra:
        summary.update(extra)
    return summary
