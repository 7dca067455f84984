"""The node side of a Flower run: a fedpart client's training, fine-tuning and evaluation on
the node's own partition, with its personal tensors kept between rounds."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from fedpart.config import Config
from fedpart.engine.evaluation import evaluate_clients
from fedpart.engine.recipe_codec import decode_job
from fedpart.engine.simulation import Simulation
from fedpart.engine.training import train_client
from fedpart.errors import FedpartError
from fedpart.flower.records import State, from_record, require_flwr, to_record

if TYPE_CHECKING:
    from flwr.app import Context, Message
    from flwr.clientapp import ClientApp

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
            return from_record(record)
        if self.dir is not None and self._path(rnd).is_file():
            from safetensors.torch import load_file

            return load_file(str(self._path(rnd)))
        return None

    def save(self, rnd: int, state: State) -> None:
        self.context.state[self.prefix + str(rnd)] = to_record(state)
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
    state = from_record(msg.content["model"])
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
    init = from_record(msg.content["init"])
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
    recipe, settings, frozen = decode_job(str(job["job"]), from_record(msg.content["recipe"]))
    rnd = int(job["round"])
    result = train_client(sim.model, start, recipe, sim.data, client, rnd, settings, frozen)
    if finetune:
        context.state[kept.finetuned] = to_record(result.state)
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
    return _reply(msg, {"model": to_record(returned)}, info)


def _evaluate(msg: Message, context: Context) -> Message:
    job = msg.content["job"]
    sim = _mirror(str(job["config"]))
    client, state, kept = _node_state(msg, context, sim)
    if kept.finetuned in context.state:  # after a final fine-tuning the node's own model counts
        state = {k: v.to(sim.device) for k, v in from_record(context.state[kept.finetuned]).items()}
    index = getattr(sim.data.clients[client], str(job["split"]))
    ((correct, loss),) = evaluate_clients(
        sim.model, [state], [index], sim.data, sim.cfg.engine.eval_batch_size
    )
    outcome = {"correct": correct.to(torch.uint8), "loss": loss.float()}
    return _reply(msg, {"outcome": to_record(outcome)}, {"client": client})


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
