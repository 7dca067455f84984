"""The files of one run.

``config.yaml`` (resolved config), ``metrics.jsonl`` (one object per evaluated round),
``summary.json``, ``clients.json`` (final per-client accuracies) and ``checkpoint/``
(``state.safetensors`` + ``meta.json``; no pickle).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from fedpart.errors import FedpartError

RUN_FILES = ("metrics.jsonl", "summary.json", "checkpoint")
#: per-round metrics of ``evaluation.participants`` (FL-bench's protocol)
PARTICIPANT_METRICS = ("participants_accuracy_before", "participants_accuracy_after")


class RunDir:
    """A run's output directory."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    # ----------------------------------------------------------------- basics
    def holds_run(self) -> bool:
        return any((self.path / name).exists() for name in RUN_FILES)

    def prepare(self, overwrite: bool) -> None:
        """Create the directory; refuse to clobber an earlier run unless ``overwrite``."""
        if self.holds_run() and not overwrite:
            raise FedpartError(
                f"output.dir: {self.path} already holds a run; continue it with "
                f"'fedpart run --resume {self.path}', choose another output.dir, "
                "or set output.overwrite=true"
            )
        self.path.mkdir(parents=True, exist_ok=True)
        if overwrite:
            for name in ("metrics.jsonl", "summary.json", "clients.json"):
                (self.path / name).unlink(missing_ok=True)

    def write_text(self, name: str, text: str) -> None:
        tmp = self.path / f".{name}.tmp"
        tmp.write_text(text)
        os.replace(tmp, self.path / name)

    def write_json(self, name: str, obj: Any) -> None:
        self.write_text(name, json.dumps(obj, indent=2, sort_keys=False) + "\n")

    # ---------------------------------------------------------------- metrics
    def write_metrics(self, rows: list[dict[str, Any]]) -> None:
        self.write_text("metrics.jsonl", "".join(json.dumps(r) + "\n" for r in rows))

    def append_metrics(self, row: dict[str, Any]) -> None:
        with open(self.path / "metrics.jsonl", "a") as fh:
            fh.write(json.dumps(row) + "\n")

    # ------------------------------------------------------------ checkpoints
    def save_checkpoint(self, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        """Write ``checkpoint/`` atomically (a crash mid-write keeps the previous one)."""
        final = self.path / "checkpoint"
        tmp = self.path / ".checkpoint.tmp"
        tmp.mkdir(exist_ok=True)
        save_file(
            # a copy each: tensors may be views of one storage (rows of a mixed stack), which
            # safetensors refuses to write
            {
                k: v.detach().cpu().clone(memory_format=torch.contiguous_format)
                for k, v in tensors.items()
            },
            str(tmp / "state.safetensors"),
        )
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        old = self.path / ".checkpoint.old"
        if final.exists():
            os.replace(final, old)
        os.replace(tmp, final)
        if old.exists():
            for f in old.iterdir():
                f.unlink()
            old.rmdir()

    def load_checkpoint(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        ckpt = self.path / "checkpoint"
        if not (ckpt / "meta.json").is_file() or not (ckpt / "state.safetensors").is_file():
            raise FedpartError(
                f"{self.path}: no checkpoint to resume from (expected {ckpt}/meta.json)"
            )
        try:
            meta = json.loads((ckpt / "meta.json").read_text())
            tensors = load_file(str(ckpt / "state.safetensors"))
        except Exception as exc:  # noqa: BLE001 - any decoding failure means a corrupted file
            raise FedpartError(f"{ckpt}: checkpoint is corrupted ({exc})") from exc
        return tensors, meta


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
