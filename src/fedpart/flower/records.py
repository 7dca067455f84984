"""What crosses the wire between a fedpart server and its Flower nodes: tensors as
``ArrayRecord``s, their byte count, and the server's checks of what a node sends back."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from fedpart.errors import FedpartError

if TYPE_CHECKING:
    from flwr.app import Message, RecordDict

State = dict[str, torch.Tensor]

#: the flwr release this module is written and tested against (the ``flower`` extra pins it)
FLWR_VERSION = "1.41.0"

#: what a Flower run adds to each round's ``metrics.jsonl`` row: the bytes of the tensors in the
#: round's training messages (server → nodes, nodes → server) and evaluation messages; evaluated
#: rows also carry ``eval_failed`` and every row ``failed``
TRAFFIC_KEYS = (
    "train_msg_down_bytes",
    "train_msg_up_bytes",
    "eval_msg_down_bytes",
    "eval_msg_up_bytes",
)


def check_upload(
    got: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor]
) -> str | None:
    """Why a node's tensors cannot be taken as ``expected``'s (other keys, shapes, dtypes, a
    value that is not finite), or ``None``."""
    if set(got) != set(expected):
        extra, missing = sorted(set(got) - set(expected)), sorted(set(expected) - set(got))
        return f"keys differ (extra {extra[:3]}, missing {missing[:3]})"
    for k, v in got.items():
        ref = expected[k]
        if v.shape != ref.shape or v.dtype != ref.dtype:
            return f"{k} is {v.dtype} {tuple(v.shape)}, expected {ref.dtype} {tuple(ref.shape)}"
        if v.is_floating_point() and not bool(torch.isfinite(v).all()):
            return f"{k} has values that are not finite"
    return None


def train_info(info: Any, client: int) -> dict[str, Any] | str:
    """A training reply's statistics, checked (a one-line reason when they are malformed)."""
    try:
        out = {
            "client": int(info["client"]),
            "loss": float(info["loss"]),
            "samples": int(info["samples"]),
            "steps": int(info["steps"]),
            "phases": [
                (tuple(map(str, k)), int(s), int(n)) for k, s, n in json.loads(str(info["phases"]))
            ],
            "observations": json.loads(str(info["observations"])),
        }
    except (KeyError, TypeError, ValueError) as exc:
        return f"malformed statistics ({type(exc).__name__}: {exc})"
    if out["client"] != client:
        return f"it answers for client {out['client']}"
    if not math.isfinite(out["loss"]) or out["samples"] < 0 or out["steps"] < 0:
        return "its loss is not finite or its counts are negative"
    if not isinstance(out["observations"], list):
        return "its observations are not a list"
    return out


def require_flwr() -> None:
    """Raise a one-line error when Flower is not installed."""
    try:
        import flwr  # noqa: F401
    except ImportError as exc:
        raise FedpartError(
            f"the Flower integration needs flwr: pip install 'fedpart[flower]' "
            f"(or flwr=={FLWR_VERSION})"
        ) from exc


def to_record(state: Mapping[str, torch.Tensor]) -> Any:
    from flwr.app import ArrayRecord

    return ArrayRecord({k: v.detach().cpu().contiguous() for k, v in state.items()})


def from_record(record: Any) -> State:
    # a copy: the arrays Flower deserialises are read-only buffers
    return {k: v.clone() for k, v in record.to_torch_state_dict().items()}


def array_bytes(content: RecordDict) -> int:
    """The raw bytes of the tensors in a message's ``ArrayRecord``s (numel × item size, the unit
    of ``up_bytes``; Flower adds a 128-byte ``.npy`` header per tensor and the message framing)."""
    import numpy as np

    return sum(
        int(np.prod(a.shape, dtype=np.int64)) * np.dtype(a.dtype).itemsize
        for record in content.array_records.values()
        for a in record.values()
    )


#: the codes of a Flower error reply that says the message or its node is gone (the node is
#: dropped, the run goes on), as Flower 1.41 numbers them: MESSAGE_UNAVAILABLE,
#: REPLY_MESSAGE_UNAVAILABLE, NODE_UNAVAILABLE. Flower's public API has the codes only as
#: numbers on ``Error.code``; ``tests/test_flower.py`` checks these against its constants.
UNAVAILABLE = (3, 4, 5)


def check_reply(reply: Message) -> None:
    if reply.has_error():
        # the node's reason may carry a traceback; its last line names the error, written by
        # Flower as "<class 'module.Error'>:<'message'>"
        lines = str(reply.error.reason).strip().splitlines() or ["no reason given"]
        last = lines[-1]
        match = re.fullmatch(r"<class '(?:[\w.]*\.)?(\w+)'>:<'(.*)'>", last)
        if match:
            last = match[2] if match[1] == "FedpartError" else f"{match[1]}: {match[2]}"
        raise FedpartError(f"Flower node {reply.metadata.src_node_id} failed: {last}")
