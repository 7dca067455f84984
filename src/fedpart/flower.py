"""Run a fedpart method on Flower's Message API (``pip install 'fedpart[flower]'``).

The server app drives a fedpart :class:`~fedpart.engine.simulation.Simulation`: the round loop,
client sampling, the method's ``start_state``/``upload``/``aggregate`` hooks, accounting,
``metrics.jsonl``, ``summary.json`` and checkpoints are the engine's own, so a Flower run writes
the same run directory as ``fedpart run``. What changes is where a client's work happens. Each
Flower node is one fedpart client (its ``partition-id``):

- the server sends a participant the non-personal tensors of its start state as an
  ``ArrayRecord``, with the method's recipe, optimiser settings and frozen blocks;
- the node overlays its personal tensors, kept between rounds in ``context.state`` (and, with
  node config ``state-dir``, on the node's disk), runs ``engine.training.train_client`` on its
  own partition and sends back the tensors the method's ``upload`` reads (the shared ones, plus
  any personal tensor the method itself uploads, such as a personal classifier sent up for a
  similarity),
  never the rest of its personal ones;
- evaluation is federated: every node evaluates its personalised model on its own split and
  returns per-sample outcomes, from which the engine computes the same accuracies.

Faults. A node that does not answer (its SuperNode killed, its network cut) fails the round as
a failed client does in the engine (``federation.client_failure``): the round aggregates the
updates that arrived, ``failed`` (``eval_failed`` for an evaluation) counts it, and the run goes
on; a SuperNode started again for the same partition rejoins with the personal tensors it kept
under ``state-dir``. The server's checkpoints name, per client, the round whose personal tensors
its node keeps, so a run with a run directory is resumed from its checkpoint (run config
``resume``) as ``fedpart run --resume`` does, each node restoring those tensors from its
``state-dir``.

Methods with their own ``local_update`` (Ditto, FedFomo, FedAP, …), decentralized methods and
capacity-aware methods are refused with a one-line error.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import sys
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from fedpart.config import Config, dump_config, load_config
from fedpart.engine.backends import Delivered
from fedpart.engine.checkpoint import read_checkpoint, restore, run_directory
from fedpart.engine.evaluation import evaluate_clients
from fedpart.engine.recipe import Phase, Recipe
from fedpart.engine.recipe_codec import decode_job, encode_job
from fedpart.engine.simulation import Result, Simulation
from fedpart.engine.training import ClientJob, TrainResult, train_client
from fedpart.errors import FedpartError
from fedpart.tracking.run_dir import RunDir

if TYPE_CHECKING:
    from flwr.app import Context, Message, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp

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


def _check_upload(
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


def _train_info(info: Any, client: int) -> dict[str, Any] | str:
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


def check_supported(sim: Simulation) -> None:
    """Refuse, in one line, a method or config the Flower path cannot run exactly."""
    algo = sim.algorithm
    name = sim.cfg.algorithm.name
    if algo.setting not in ("centralized", "cloud-edge"):
        raise FedpartError(
            f"{name} is {algo.setting}: Flower runs only methods whose aggregation is on a server"
        )
    if type(algo).capacity_aware:
        raise FedpartError(f"{name} trains clients at different widths; not on Flower yet")
    if "flower" not in type(algo).backends:
        raise FedpartError(
            f"{name} has its own local update (several trainings per round on client state the "
            "server holds); it runs with fedpart run only"
        )
    reason = algo.remote_limitation()
    if reason is not None:
        raise FedpartError(f"{name} is not on Flower with this config: {reason}")
    if sim.cfg.federation.on_nonfinite == "skip_client":
        raise FedpartError(
            "federation.on_nonfinite=skip_client retrains on the server; use another value on Flower"
        )


class _Recorder(Mapping[str, torch.Tensor]):
    """A read-only state that remembers which keys were read (to learn what ``upload`` needs)."""

    def __init__(self, state: State) -> None:
        self.state = state
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> torch.Tensor:
        self.read.add(key)
        return self.state[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.state)

    def __len__(self) -> int:
        return len(self.state)


def _to_record(state: Mapping[str, torch.Tensor]) -> Any:
    from flwr.app import ArrayRecord

    return ArrayRecord({k: v.detach().cpu().contiguous() for k, v in state.items()})


def _from_record(record: Any) -> State:
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


def _check_reply(reply: Message) -> None:
    if reply.has_error():
        # the node's reason may carry a traceback; its last line names the error, written by
        # Flower as "<class 'module.Error'>:<'message'>"
        lines = str(reply.error.reason).strip().splitlines() or ["no reason given"]
        last = lines[-1]
        match = re.fullmatch(r"<class '(?:[\w.]*\.)?(\w+)'>:<'(.*)'>", last)
        if match:
            last = match[2] if match[1] == "FedpartError" else f"{match[1]}: {match[2]}"
        raise FedpartError(f"Flower node {reply.metadata.src_node_id} failed: {last}")


class FlowerSimulation(Simulation):
    """A :class:`Simulation` whose clients are Flower nodes reached through ``grid``.

    ``run()`` works as for any simulation; local training, fine-tuning and evaluation of client
    models happen on the nodes.
    """

    def __init__(
        self,
        cfg: Config,
        grid: Grid,
        *,
        run_dir: str | Path | None = None,
        quiet: bool = True,
        timeout: float = 600.0,
    ) -> None:
        super().__init__(cfg, run_dir=run_dir, quiet=quiet)
        check_supported(self)
        #: local training, fine-tuning and evaluation run on the nodes (the methods below)
        self.executor = Delivered("flower")
        self.grid = grid
        self.timeout = timeout
        self.config_text = dump_config(cfg)
        n = self.data.num_clients
        #: client → Flower node id, for the nodes connected now
        self.nodes: dict[int, int] = {}
        #: node ids that stopped answering: never asked again (a SuperNode started again
        #: registers with a new id)
        self.gone: set[int] = set()
        #: names this run's tensors on the nodes; kept in the checkpoint, so a resumed run finds
        #: the tensors its nodes kept
        self.series = uuid.uuid4().hex
        #: per client, the round of the last training whose update the server accepted: the
        #: node's personal tensors are those it kept after that training (-1: the initial ones)
        self.personal_round = [-1] * n
        #: per client, the personal keys of that training (a block may turn personal later)
        self.held: list[set[str]] = [set() for _ in range(n)]
        #: ``personal_round`` at the last two checkpoints: the nodes keep those tensors too, for
        #: a resume from either checkpoint generation
        self.checkpointed: list[list[int]] = []
        #: whether every client had a node once (later, a node taking over a client replaces
        #: the one before it, which is taken for dead)
        self.connected = False
        self.round_failed: set[int] = set()
        self.eval_failed: set[int] = set()
        #: uploads refused this round (training, evaluation): counted apart from ``failed``
        self.rejected = {"train": 0, "eval": 0}
        #: nodes that claimed a client another live node holds: node → client
        self.claims: dict[int, int] = {}
        self.traffic = dict.fromkeys(TRAFFIC_KEYS, 0)

    # --------------------------------------------------------------- messages
    def _content(self, records: dict[str, Any], **job: Any) -> RecordDict:
        from flwr.app import ConfigRecord, RecordDict

        return RecordDict({**records, "job": ConfigRecord({"config": self.config_text, **job})})

    def _send(self, messages: dict[int, Message], traffic: str | None = None) -> dict[int, Message]:
        """Send ``messages`` (key → message) and wait up to ``timeout`` for the replies; returns
        those that arrived, by key. A node that does not reply in time, or that Flower reports
        unavailable, is dropped; a ClientApp's error ends the run with one line."""
        from flwr.common.constant import ErrorCode

        if not messages:
            return {}
        sent = list(messages.items())
        replies = list(self.grid.send_and_receive([m for _, m in sent], timeout=self.timeout))
        key_of = {m.metadata.message_id: key for key, m in sent}
        unavailable = (
            ErrorCode.MESSAGE_UNAVAILABLE,
            ErrorCode.REPLY_MESSAGE_UNAVAILABLE,
            ErrorCode.NODE_UNAVAILABLE,
        )
        out: dict[int, Message] = {}
        for reply in replies:
            key = key_of.get(reply.metadata.reply_to_message_id)
            if key is None:
                continue
            if reply.has_error():
                if reply.error.code in unavailable:
                    continue
                _check_reply(reply)
            out[key] = reply
        for key, m in sent:
            if key not in out:
                self._drop(m.metadata.dst_node_id)
        if traffic is not None:
            self.traffic[f"{traffic}_msg_down_bytes"] += sum(
                array_bytes(m.content) for _, m in sent
            )
            self.traffic[f"{traffic}_msg_up_bytes"] += sum(
                array_bytes(r.content) for r in out.values()
            )
        return out

    def _drop(self, node: int) -> None:
        self.gone.add(node)
        for client, held_by in list(self.nodes.items()):
            if held_by == node:
                del self.nodes[client]
                self._notice(
                    f"Flower node {node} (client {client}) did not reply; the client "
                    "fails until a SuperNode with its partition-id connects"
                )

    def _refresh(self) -> None:
        """Follow the federation: forget the nodes the SuperLink no longer lists (stopped, or
        silent for longer than Flower's heartbeat patience) and ask nodes that joined which
        client they hold."""
        from flwr.app import Message

        listed = set(self.grid.get_node_ids())
        for node in set(self.nodes.values()) - listed:
            self._drop(node)
        new = sorted(listed - set(self.nodes.values()) - self.gone - set(self.claims))
        n = self.data.num_clients
        replies = self._send({node: Message(self._content({}), node, "query") for node in new})
        for node, reply in replies.items():
            try:
                client = int(reply.content["info"]["client"])
            except (KeyError, TypeError, ValueError):
                self._notice(f"Flower node {node} did not say which client it holds; ignored")
                self.gone.add(node)
                continue
            if not 0 <= client < n:
                message = (
                    f"Flower node {node} has partition-id {client}: the config has {n} clients "
                    f"(partition-id 0..{n - 1})"
                )
                if not self.connected:
                    raise FedpartError(message)
                self._notice(message + "; ignored")
                self.gone.add(node)
                continue
            before = self.nodes.get(client)
            if before is not None and not self.connected:
                raise FedpartError(
                    f"Flower nodes {before} and {node} both have partition-id {client}: each "
                    f"of 0..{n - 1} must be held by exactly one node"
                )
            if before is not None:
                self.claims[node] = client
                self._notice(
                    f"Flower node {node} claims client {client}, which node {before} holds; "
                    "refused while that node answers"
                )
                continue
            self.nodes[client] = node
        # a claim is granted once the node holding the client is gone
        for node, client in list(self.claims.items()):
            if node not in listed:
                del self.claims[node]
            elif client not in self.nodes:
                del self.claims[node]
                self._notice(f"Flower node {node} takes over client {client}")
                self.nodes[client] = node

    def _notice(self, text: str) -> None:
        print(f"notice: {text}", file=sys.stderr)

    def connect(self) -> None:
        """Wait for one node per client and learn which client each node is."""
        n = self.data.num_clients
        deadline = time.monotonic() + self.timeout
        self._refresh()
        while len(self.nodes) < n:
            if time.monotonic() > deadline:
                missing = sorted(set(range(n)) - set(self.nodes))
                raise FedpartError(
                    f"{len(self.nodes)} of the config's {n} clients have a Flower node, none "
                    f"holds partition-id {missing[0]}; start one SuperNode per client (node "
                    f"config partition-id=0..{n - 1})"
                )
            time.sleep(1.0)
            self._refresh()
        self.connected = True

    def _job(self, client: int) -> dict[str, Any]:
        """What every message for ``client`` says about its personal tensors: the keys, the
        round of those its node is to use (-1: the initial ones, sent along), and the rounds
        whose tensors it is to keep."""
        held = self.personal_round[client] if self.held[client] else -1
        keep = {self.personal_round[client], *(c[client] for c in self.checkpointed)} - {-1}
        return {
            "client": client,
            "series": self.series,
            "personal": list(self.store.personal_keys),
            "personal_round": held,
            "keep": sorted(keep),
        }

    def _down(self, client: int, state: State) -> dict[str, Any]:
        """The records a node needs to rebuild ``state``: its non-personal tensors, and the
        initial values of personal keys the node does not hold yet."""
        store = self.store
        personal = set(store.personal_keys)
        return {
            "model": _to_record({k: v for k, v in state.items() if k not in personal}),
            "init": _to_record({k: store.init_personal[k] for k in personal - self.held[client]}),
        }

    # ------------------------------------------------------- training on nodes
    def run_round(self, rnd: int) -> dict[str, Any]:
        """The engine's round; its row also counts the participants whose node did not reply
        (``failed``) and the bytes of the round's training messages."""
        self.round_failed = set()
        self.rejected["train"] = 0
        self.traffic = dict.fromkeys(TRAFFIC_KEYS, 0)
        row = super().run_round(rnd)
        row["failed"] = row.get("failed", 0) + len(self.round_failed)
        row["rejected"] = self.rejected["train"]
        row["train_msg_down_bytes"] = self.traffic["train_msg_down_bytes"]
        row["train_msg_up_bytes"] = self.traffic["train_msg_up_bytes"]
        return row

    def train_clients(
        self, rnd: int, clients: list[int]
    ) -> tuple[dict[int, TrainResult], dict[str, Any]]:
        """The engine's ``train_clients`` for the clients whose node replied; the others failed
        this round (no update, no personal change: ``federation.client_failure``'s drop)."""
        trained = self._train_on_nodes(rnd, clients)
        arrived = [c for c in clients if c in trained]
        self.round_failed.update(c for c in clients if c not in trained)
        # the nodes' results, handed to the engine's accounting as a backend's
        return super().train_clients(rnd, arrived, backend=Delivered("flower", trained))

    def _train_on_nodes(self, rnd: int, clients: list[int]) -> dict[int, TrainResult]:
        from flwr.app import Message

        self._refresh()
        algo = self.algorithm
        personal = list(self.store.personal_keys)
        frozen = algo.frozen_blocks(rnd)
        jobs: dict[int, ClientJob] = {}
        messages = {}
        for c in clients:
            if c not in self.nodes:
                continue
            jobs[c] = job = algo.job(rnd, c)
            start = job.start
            probe = _Recorder(start)
            algo.upload(rnd, c, probe, job)  # a pure function of what it is given
            returned = [k for k in start if k not in personal or k in probe.read]
            text, tensors = encode_job(job.recipe, self.train_settings(rnd, c), frozen)
            content = self._content(
                {**self._down(c, start), "recipe": _to_record(tensors)},
                **self._job(c),
                round=rnd,
                returned=returned,
                job=text,
            )
            messages[c] = Message(content, self.nodes[c], "train", group_id=str(rnd))
        out: dict[int, TrainResult] = {}
        for c, reply in self._send(messages, "train").items():
            start = jobs[c].start
            expected = {k: start[k] for k in messages[c].content["job"]["returned"]}
            info = _train_info(reply.content.get("info", {}), c)
            try:
                got = _from_record(reply.content["model"])
            except (KeyError, TypeError, ValueError) as exc:
                got, info = {}, f"no readable model ({type(exc).__name__})"
            problem = info if isinstance(info, str) else _check_upload(got, expected)
            if problem is not None:
                self.rejected["train"] += 1
                self._notice(f"round {rnd}: refused the upload of client {c}: {problem}")
                continue
            assert isinstance(info, dict)
            self.personal_round[c] = rnd
            self.held[c] = set(personal)
            # personal tensors the node did not send stay the server's placeholders: the server
            # never uses them (start states and evaluation overlay the node's own)
            out[c] = TrainResult(
                state={**start, **got},
                loss=info["loss"],
                samples=info["samples"],
                steps=info["steps"],
                phases=info["phases"],
                observations=info["observations"],
                job=jobs[c],
            )
        return out

    def finetune_all(self, epochs: int, start: Any = None) -> dict[int, State]:
        """Every node fine-tunes its whole model ``epochs`` epochs and keeps it for evaluation.

        Returns no states: the fine-tuned models stay on the nodes, which evaluate them in place
        of the model the server sends."""
        from flwr.app import Message

        if start is not None:
            raise FedpartError(
                "this method's fine-tuning from its own start states is not on Flower"
            )
        self._refresh()
        rnd = self.cfg.federation.rounds
        recipe = Recipe(phases=(Phase(blocks=None, epochs=epochs, name="finetune"),))
        messages = {}
        for c in range(self.data.num_clients):
            if c not in self.nodes:
                continue
            text, tensors = encode_job(recipe, self.train_settings(rnd, c), set())
            content = self._content(
                {**self._down(c, self.store.client_state(c)), "recipe": _to_record(tensors)},
                **self._job(c),
                round=rnd,
                returned=[],
                job=text,
            )
            messages[c] = Message(content, self.nodes[c], "train.finetune", group_id=str(rnd))
        self._send(messages)
        return {}

    # ----------------------------------------------------- evaluation on nodes
    def evaluate(self) -> dict[str, Any]:
        """The engine's evaluation; a client whose node did not reply has no accuracy this time
        (``eval_failed`` counts them) and the others' make the means."""
        self.eval_failed = set()
        self.rejected["eval"] = 0
        row = super().evaluate()
        row["eval_failed"] = len(self.eval_failed)
        row["eval_rejected"] = self.rejected["eval"]
        for key in ("eval_msg_down_bytes", "eval_msg_up_bytes"):
            row[key] = self.traffic[key]
            self.traffic[key] = 0
        return row

    def evaluate_states(
        self, clients: list[int], states: list[State], index: list[torch.Tensor]
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per-sample (correct, loss) of each client's model, computed by its node on its
        ``evaluation.split`` with its personal tensors overlaid on ``states[i]`` (none for a
        client whose node did not reply)."""
        from flwr.app import Message

        self._refresh()
        split = self.cfg.evaluation.split
        rnd = str(self.rounds_completed)
        messages = {
            c: Message(
                self._content(self._down(c, s), **self._job(c), split=split),
                self.nodes[c],
                "evaluate",
                group_id=rnd,
            )
            for c, s in zip(clients, states, strict=True)
            if c in self.nodes
        }
        replies = self._send(messages, "eval")
        out = []
        for c, idx in zip(clients, index, strict=True):
            reply = replies.get(c)
            if reply is None:
                self.eval_failed.add(c)
                out.append((torch.zeros(0, dtype=torch.bool), torch.zeros(0)))
                continue
            n = idx.numel()
            expected = {"correct": torch.zeros(n, dtype=torch.uint8), "loss": torch.zeros(n)}
            try:
                got = _from_record(reply.content["outcome"])
            except (KeyError, TypeError, ValueError):
                got = {"unreadable": torch.zeros(0)}
            problem = _check_upload(got, expected)
            if problem is None and bool((got["correct"] > 1).any()):
                problem = "correct holds values other than 0 and 1"
            if problem is not None:
                self.eval_failed.add(c)
                self.rejected["eval"] += 1
                self._notice(
                    f"refused the evaluation of client {c}: {problem} (a node that partitions "
                    "the data otherwise than the server evaluates other samples)"
                )
                out.append((torch.zeros(0, dtype=torch.bool), torch.zeros(0)))
                continue
            out.append((got["correct"].bool(), got["loss"]))
        return out

    # ---------------------------------------------------------- checkpoints
    def save_checkpoint(self) -> None:
        if self.run_dir is None:
            return
        self.checkpointed = [list(self.personal_round), *self.checkpointed[:1]]
        super().save_checkpoint()

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """The engine's tensors and the nodes' side of the run: the series name, each client's
        ``personal_round`` (now and at the checkpoint before) and the keys it covers. (Their
        ``flower/`` names make ``fedpart run --resume`` refuse the directory: the personal
        tensors in it are the server's placeholders, the real ones are on the nodes.)"""
        out = super().state_tensors()
        before = self.checkpointed[1] if len(self.checkpointed) > 1 else self.personal_round
        out["flower/series"] = torch.tensor(list(self.series.encode()), dtype=torch.uint8)
        out["flower/personal_round"] = torch.tensor(self.personal_round, dtype=torch.int64)
        out["flower/personal_round_before"] = torch.tensor(before, dtype=torch.int64)
        keys = self.store.keys
        out["flower/held"] = torch.tensor(
            [[k in held for k in keys] for held in self.held], dtype=torch.uint8
        ).reshape(len(self.held), len(keys))
        return out

    def load_state(self, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        flower = {k: v for k, v in tensors.items() if k.startswith("flower/")}
        if "flower/series" not in flower:
            raise FedpartError(
                "the checkpoint was not written by a Flower run (its clients' personal tensors "
                "are in it, not on nodes); continue it with fedpart run --resume"
            )
        super().load_state({k: v for k, v in tensors.items() if k not in flower}, meta)
        n = self.data.num_clients
        rounds = flower["flower/personal_round"].tolist()
        held = flower["flower/held"].tolist()
        if len(rounds) != n or len(held) != n:
            raise FedpartError(
                f"the checkpoint does not fit this config: it has {len(rounds)} Flower clients, "
                f"the config {n}; resume with the config the run was started with"
            )
        self.series = bytes(flower["flower/series"].tolist()).decode()
        self.personal_round = [int(r) for r in rounds]
        self.held = [{k for k, h in zip(self.store.keys, row, strict=True) if h} for row in held]
        self.checkpointed = [
            list(self.personal_round),
            [int(r) for r in flower["flower/personal_round_before"].tolist()],
        ]


# ------------------------------------------------------------------- node side
_MIRRORS: dict[str, Simulation] = {}


def _mirror(config_text: str) -> Simulation:
    """The node's copy of the run's data and model, built once per process and config.

    Every node partitions the dataset as the server does (the partition is a function of the
    seed) and keeps only its own client's indices in use."""
    key = hashlib.sha256(config_text.encode()).hexdigest()
    sim = _MIRRORS.get(key)
    if sim is None:
        import yaml

        sim = Simulation(Config.from_dict(yaml.safe_load(config_text)))
        _MIRRORS.clear()  # one run per process at a time; release the previous run's data
        _MIRRORS[key] = sim
    return sim


class _Kept:
    """The personal tensors a node keeps for its client, by the round of the training that left
    them: in ``context.state`` (for the Flower run) and, with node config ``state-dir``, in
    ``<state-dir>/<series>/<client>/personal-<round>.safetensors`` (for a SuperNode started
    again and for a resumed run)."""

    def __init__(self, context: Context, series: str, client: int) -> None:
        if not re.fullmatch(r"[0-9a-f]{32}", series):
            raise FedpartError(f"bad run series {series!r} from the server")
        self.context = context
        self.prefix = f"fedpart.{series}.{client}.personal."
        self.finetuned = f"fedpart.{series}.{client}.finetuned"
        where = context.node_config.get("state-dir")
        self.dir = Path(str(where)).expanduser() / series / str(client) if where else None

    def _path(self, rnd: int) -> Path:
        assert self.dir is not None
        return self.dir / f"personal-{rnd}.safetensors"

    def load(self, rnd: int) -> State | None:
        record = self.context.state.get(self.prefix + str(rnd))
        if record is not None:
            return _from_record(record)
        if self.dir is not None and self._path(rnd).is_file():
            from safetensors.torch import load_file

            return load_file(str(self._path(rnd)))
        return None

    def save(self, rnd: int, state: State) -> None:
        self.context.state[self.prefix + str(rnd)] = _to_record(state)
        if self.dir is None:
            return
        from safetensors.torch import save_file

        self.dir.mkdir(parents=True, exist_ok=True)
        path = self._path(rnd)
        tmp = path.with_name(path.name + ".tmp")
        save_file({k: v.detach().cpu().contiguous() for k, v in state.items()}, str(tmp))
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)

    def prune(self, keep: set[int]) -> None:
        """Forget the tensors of every round not in ``keep``."""
        for key in list(self.context.state.keys()):
            if key.startswith(self.prefix) and int(key[len(self.prefix) :]) not in keep:
                del self.context.state[key]
        if self.dir is None or not self.dir.is_dir():
            return
        for path in self.dir.glob("personal-*.safetensors"):
            rnd = path.name[len("personal-") : -len(".safetensors")]
            if rnd.isdigit() and int(rnd) not in keep:
                path.unlink(missing_ok=True)


def _partition_id(context: Context) -> int:
    value = context.node_config.get("partition-id")
    if value is None:
        raise FedpartError(
            "this Flower node has no partition-id; start it with "
            "--node-config 'partition-id=<client> num-partitions=<clients>'"
        )
    return int(value)


def _node_state(msg: Message, context: Context, sim: Simulation) -> tuple[int, State, _Kept]:
    """The client's model: the server's tensors ⊕ the node's personal ones (those it kept
    after the round the server names, initial values from the server where it has none)."""
    job = msg.content["job"]
    client = int(job["client"])
    if client != _partition_id(context):
        raise FedpartError(
            f"message for client {client} reached partition {_partition_id(context)}"
        )
    kept = _Kept(context, str(job["series"]), client)
    state = _from_record(msg.content["model"])
    rnd = int(job["personal_round"])
    held: State = {}
    if rnd >= 0:
        found = kept.load(rnd)
        if found is None:
            raise FedpartError(
                f"the node of client {client} no longer holds its personal tensors of round "
                f"{rnd} (a SuperNode started again, or a resumed run): start SuperNodes with "
                f"--node-config 'partition-id={client} state-dir=\"DIR\"' to keep them"
            )
        held = found
    init = _from_record(msg.content["init"])
    for k in job["personal"]:
        state[k] = held[k] if k in held else init[k]
    return client, {k: state[k].to(sim.device) for k in sim.store.keys}, kept


def _reply(msg: Message, records: dict[str, Any], info: dict[str, Any]) -> Message:
    from flwr.app import ConfigRecord, Message, RecordDict

    return Message(RecordDict({**records, "info": ConfigRecord(info)}), reply_to=msg)


def _train(msg: Message, context: Context, *, finetune: bool) -> Message:
    job = msg.content["job"]
    sim = _mirror(str(job["config"]))
    client, start, kept = _node_state(msg, context, sim)
    recipe, settings, frozen = decode_job(str(job["job"]), _from_record(msg.content["recipe"]))
    rnd = int(job["round"])
    result = train_client(sim.model, start, recipe, sim.data, client, rnd, settings, frozen)
    if finetune:
        context.state[kept.finetuned] = _to_record(result.state)
    elif job["personal"]:
        kept.save(rnd, {k: result.state[k] for k in job["personal"]})
        # the server names the rounds it may still ask for: the tensors this training
        # started from (should its reply not arrive) and those of its checkpoints
        kept.prune({rnd, *(int(r) for r in job["keep"])})
    info = {
        "client": client,
        "loss": float(result.loss),
        "samples": int(result.samples),
        "steps": int(result.steps),
        "phases": json.dumps([[list(k), s, n] for k, s, n in result.phases]),
        "observations": json.dumps(result.observations),
    }
    returned = {k: result.state[k] for k in job["returned"]}
    return _reply(msg, {"model": _to_record(returned)}, info)


def _evaluate(msg: Message, context: Context) -> Message:
    job = msg.content["job"]
    sim = _mirror(str(job["config"]))
    client, state, kept = _node_state(msg, context, sim)
    if kept.finetuned in context.state:  # after a final fine-tuning the node's own model counts
        state = {
            k: v.to(sim.device) for k, v in _from_record(context.state[kept.finetuned]).items()
        }
    index = getattr(sim.data.clients[client], str(job["split"]))
    ((correct, loss),) = evaluate_clients(
        sim.model, [state], [index], sim.data, sim.cfg.engine.eval_batch_size
    )
    outcome = {"correct": correct.to(torch.uint8), "loss": loss.float()}
    return _reply(msg, {"outcome": _to_record(outcome)}, {"client": client})


def client_app() -> ClientApp:
    """The Flower ``ClientApp`` of a fedpart node: it trains, fine-tunes and evaluates the client
    named by the node's ``partition-id`` on instructions from :func:`server_app`."""
    require_flwr()
    from flwr.clientapp import ClientApp

    app = ClientApp()

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        return _reply(msg, {}, {"client": _partition_id(context)})

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        return _train(msg, context, finetune=False)

    @app.train("finetune")
    def finetune(msg: Message, context: Context) -> Message:
        return _train(msg, context, finetune=True)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        return _evaluate(msg, context)

    return app


# ----------------------------------------------------------------- server side
def _split_overrides(value: Any) -> list[str]:
    """``key=value`` overrides from a run-config string, separated by spaces (a value may hold
    commas: ``partition.split=[0.75,0.0,0.25]``)."""
    return str(value).split() if value else []


def run_on_grid(
    grid: Grid,
    cfg: Config,
    *,
    run_dir: str | Path | None = None,
    timeout: float = 600.0,
) -> Result:
    """Run ``cfg`` over the Flower nodes of ``grid`` (one per client) from inside a
    ``ServerApp``'s main function; returns what :func:`fedpart.run` returns.

    Several runs may follow one another over the same nodes: a node keeps each run's tensors
    apart (they are named by a series id drawn per run)."""
    sim = FlowerSimulation(cfg, grid, run_dir=run_dir, quiet=True, timeout=timeout)
    sim.connect()
    return sim.run()


def resume_on_grid(
    grid: Grid,
    run_dir: str | Path,
    overrides: Iterable[str] = (),
    *,
    timeout: float = 600.0,
) -> Result:
    """Continue the Flower run in ``run_dir`` from its last checkpoint over the nodes of
    ``grid``: :func:`fedpart.resume` with the clients' work on the nodes, each node restoring
    the personal tensors of the checkpoint's round from its ``state-dir``. Ends equal to a run
    that never stopped (but for the wall-clock fields)."""
    rd = run_directory(run_dir)
    rd.acquire()
    try:
        return _resume_locked(grid, rd, list(overrides), timeout)
    finally:
        rd.release()


def _resume_locked(grid: Grid, rd: RunDir, overrides: list[str], timeout: float) -> Result:
    # fedpart.api._resume_locked, building a FlowerSimulation
    cfg, tensors, meta = read_checkpoint(rd, overrides)
    sim = FlowerSimulation(cfg, grid, run_dir=rd.path, timeout=timeout)
    rows = restore(sim, rd, tensors, meta)
    sim.connect()  # before anything in the directory changes
    sim.rows = rows
    rd.write_metrics(rows + ([sim.final_row] if sim.finished and sim.final_row else []))
    if overrides:
        rd.write_text("config.yaml", dump_config(cfg))
    return sim.run()


def server_app(
    config: Config | str | Path | None = None,
    overrides: Iterable[str] = (),
    *,
    run_dir: str | Path | None = None,
    timeout: float = 600.0,
    base: str | Path | None = None,
) -> ServerApp:
    """The Flower ``ServerApp`` running a fedpart config over the connected nodes.

    ``config`` (a :class:`Config` or YAML path) defaults to the run config's ``config`` key
    (``[tool.flwr.app.config]`` of the Flower project, or ``flwr run --run-config``), a relative
    path there being read from ``base`` (the project's directory); the run config's
    ``overrides`` (``key=value`` separated by spaces) come before ``overrides``, its
    ``output-dir`` names the run directory (default ``run_dir``; without one nothing is written)
    and its ``timeout`` the seconds to wait for nodes. With ``resume`` true the run in the run
    directory is continued from its last checkpoint instead (``config`` is not read; the
    overrides apply as in ``fedpart run --resume DIR key=value``)."""
    require_flwr()
    from flwr.serverapp import ServerApp

    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        rc = context.run_config
        extra = [*_split_overrides(rc.get("overrides")), *overrides]
        out = rc.get("output-dir") or run_dir
        wait = float(rc.get("timeout", timeout))
        if rc.get("resume"):
            if not out:
                raise FedpartError("resume: give output-dir, the run directory to continue")
            result = resume_on_grid(grid, str(out), extra, timeout=wait)
        else:
            source: Any = config if config is not None else rc.get("config")
            if source is None:
                raise FedpartError("no fedpart config: set config in the Flower run config")
            if isinstance(source, Config):
                cfg = source.with_overrides(extra) if extra else source
            else:
                path = Path(str(source))
                if not path.is_absolute() and base is not None:
                    path = Path(base) / path
                cfg = load_config(path, extra)
            result = run_on_grid(grid, cfg, run_dir=out or None, timeout=wait)
        if result.run_dir is not None:
            print(f"fedpart: wrote {result.run_dir}")

    return app
