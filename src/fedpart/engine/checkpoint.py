"""The checkpoint format: what of a run goes into its checkpoint directory, and back.

A checkpoint is one safetensors file of named tensors plus ``meta.json``
(:meth:`~fedpart.tracking.run_dir.RunDir.save_checkpoint` writes both atomically, with digests).
The tensor names say where each tensor lives:

- ``global/<key>``: the server's tensors (``store.global_state``);
- ``personal/<client>/<key>`` and ``tailored/<client>/<key>``: the store's per-client layers;
- ``late/<client>/<key>``: a straggler's upload, applied in the next round;
- ``extra/<name>``: the method's own tensors (``Algorithm.extra_state``).

``meta.json`` holds the counters, the metric rows so far, the config, the method's own values
and the stragglers' weights. The format is versioned by :data:`CHECKPOINT_FORMAT`; a run
resumes only from a checkpoint of that format.
"""

from __future__ import annotations

import json
from typing import Any

import torch

from fedpart.errors import FedpartError

CHECKPOINT_FORMAT = 1


def state_tensors(sim: Any) -> dict[str, torch.Tensor]:
    """Everything of ``sim`` that evolves over rounds, as flat named tensors."""
    out = {f"global/{k}": v for k, v in sim.store.global_state.items()}
    for c, state in sim.store.personal.items():
        out.update({f"personal/{c}/{k}": v for k, v in state.items()})
    for c, state in sim.store.tailored.items():
        out.update({f"tailored/{c}/{k}": v for k, v in state.items()})
    for c, (sent, _) in sim.late.items():
        out.update({f"late/{c}/{k}": v for k, v in sent.items()})
    extra_tensors, _ = sim.algorithm.extra_state()
    out.update({f"extra/{k}": v for k, v in extra_tensors.items()})
    return out


def checkpoint_meta(sim: Any) -> dict[str, Any]:
    """The checkpoint's ``meta.json``: counters, rows, config, method values, late weights."""
    _, extra_values = sim.algorithm.extra_state()
    return {
        "format": CHECKPOINT_FORMAT,
        "rounds_completed": sim.rounds_completed,
        "finished": sim.finished,
        "elapsed": sim.elapsed,
        "client_accuracy": sim.client_accuracy,
        "final_row": sim.final_row,
        "algorithm_state": extra_values,
        # the rows logged so far and the config: a resume rebuilds metrics.jsonl from the
        # checkpoint and notices a config.yaml edited since
        "rows": sim.rows,
        "config": json.loads(json.dumps(sim.cfg.to_dict(), default=str)),
        "late": {str(c): w for c, (_, w) in sim.late.items()},
    }


def save_checkpoint(sim: Any) -> None:
    """Write ``sim``'s checkpoint into its run directory (none: nothing to do). The tensors are
    ``sim.state_tensors()``, which a subclass may extend (Flower's node bookkeeping)."""
    if sim.run_dir is None:
        return
    meta = checkpoint_meta(sim)
    sim.run_dir.save_checkpoint(sim.state_tensors(), meta)


def check_fits(tensors: dict[str, torch.Tensor], ref: dict[str, torch.Tensor], n: int) -> None:
    """Refuse a checkpoint written for another model or method, naming the first misfit
    (``ref``: the model's tensors; ``n``: the number of clients)."""
    seen = set()
    for name, value in tensors.items():
        kind, _, rest = name.partition("/")
        if kind == "global":
            want = ref.get(rest)
            if want is None or want.shape != value.shape or want.dtype != value.dtype:
                got = f"{tuple(value.shape)} {value.dtype}"
                has = "no such tensor" if want is None else f"{tuple(want.shape)} {want.dtype}"
                raise FedpartError(
                    f"the checkpoint does not fit this config: {name} is {got}, the model "
                    f"has {has}; resume with the config the run was started with"
                )
            seen.add(rest)
        elif kind in ("personal", "tailored", "late"):
            client, _, key = rest.partition("/")
            # a late upload may carry what the method sends beside model tensors
            if not client.isdigit() or int(client) >= n or (key not in ref and kind != "late"):
                raise FedpartError(
                    f"the checkpoint does not fit this config: {name} names no client "
                    f"(0..{n - 1}) and model tensor; resume with the config the run was "
                    "started with"
                )
        elif kind != "extra":
            raise FedpartError(f"the checkpoint holds an unknown entry {name!r}")
    missing = sorted(set(ref) - seen)
    if missing:
        raise FedpartError(
            f"the checkpoint does not fit this config: it has no global/{missing[0]}; "
            "resume with the config the run was started with"
        )


def load_state(sim: Any, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    """Restore a checkpoint's tensors and counters into ``sim`` (on its device)."""
    if meta.get("format") != CHECKPOINT_FORMAT:
        raise FedpartError(f"checkpoint format {meta.get('format')} is not supported")
    store = sim.store
    check_fits(tensors, store.global_state, sim.data.num_clients)
    device = sim.device
    extra: dict[str, torch.Tensor] = {}
    late: dict[int, dict[str, torch.Tensor]] = {}
    for name, value in tensors.items():
        kind, rest = name.split("/", 1)
        if kind == "global":
            store.global_state[rest] = value.to(device)
        elif kind in ("personal", "tailored"):
            client, key = rest.split("/", 1)
            per_client = store.personal if kind == "personal" else store.tailored
            per_client.setdefault(int(client), {})[key] = value.to(device)
        elif kind == "late":
            client, key = rest.split("/", 1)
            late.setdefault(int(client), {})[key] = value.to(device)
        else:
            extra[rest] = value.to(device)
    late_weights = meta.get("late", {})
    sim.late = {c: (sent, float(late_weights[str(c)])) for c, sent in sorted(late.items())}
    sim.algorithm.load_extra_state(extra, meta.get("algorithm_state", {}))
    sim.rounds_completed = int(meta["rounds_completed"])
    sim.finished = bool(meta.get("finished", False))
    sim.elapsed = float(meta.get("elapsed", 0.0))
    sim.client_accuracy = list(meta.get("client_accuracy", []))
    sim.final_row = meta.get("final_row")
