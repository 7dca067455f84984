"""The server side of a Flower run: a :class:`~fedpart.engine.simulation.Simulation` whose
clients' training, fine-tuning and evaluation happen on Flower nodes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from fedpart.config import Config, dump_config
from fedpart.engine.backends import Delivered
from fedpart.engine.recipe import Phase, Recipe
from fedpart.engine.recipe_codec import encode_job
from fedpart.engine.simulation import Simulation
from fedpart.engine.training import ClientJob, TrainResult
from fedpart.errors import FedpartError
from fedpart.flower.membership import Membership
from fedpart.flower.records import (
    TRAFFIC_KEYS,
    UNAVAILABLE,
    State,
    array_bytes,
    check_reply,
    check_upload,
    from_record,
    to_record,
    train_info,
)

if TYPE_CHECKING:
    from flwr.app import Message, RecordDict
    from flwr.serverapp import Grid


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


class FlowerSimulation(Membership, Simulation):
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
        if not messages:
            return {}
        sent = list(messages.items())
        replies = list(self.grid.send_and_receive([m for _, m in sent], timeout=self.timeout))
        key_of = {m.metadata.message_id: key for key, m in sent}
        out: dict[int, Message] = {}
        for reply in replies:
            key = key_of.get(reply.metadata.reply_to_message_id)
            if key is None:
                continue
            if reply.has_error():
                if reply.error.code in UNAVAILABLE:
                    continue
                check_reply(reply)
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
            "model": to_record({k: v for k, v in state.items() if k not in personal}),
            "init": to_record({k: store.init_personal[k] for k in personal - self.held[client]}),
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
                {**self._down(c, start), "recipe": to_record(tensors)},
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
            info = train_info(reply.content.get("info", {}), c)
            try:
                got = from_record(reply.content["model"])
            except (KeyError, TypeError, ValueError) as exc:
                got, info = {}, f"no readable model ({type(exc).__name__})"
            problem = info if isinstance(info, str) else check_upload(got, expected)
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
                {**self._down(c, self.store.client_state(c)), "recipe": to_record(tensors)},
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
                got = from_record(reply.content["outcome"])
            except (KeyError, TypeError, ValueError):
                got = {"unreadable": torch.zeros(0)}
            problem = check_upload(got, expected)
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
