"""Run a fedpart method on Flower's Message API (``pip install 'fedpart[flower]'``).

The server app drives a fedpart :class:`~fedpart.engine.simulation.Simulation`: the round loop,
client sampling, the method's ``start_state``/``upload``/``aggregate`` hooks, accounting,
``metrics.jsonl`` and ``summary.json`` are the engine's own, so a Flower run writes the same run
directory as ``fedpart run``. What changes is where a client's work happens. Each Flower node is
one fedpart client (its ``partition-id``):

- the server sends a participant the non-personal tensors of its start state as an
  ``ArrayRecord``, with the method's recipe, optimiser settings and frozen blocks;
- the node overlays its personal tensors, kept in ``context.state`` between rounds, runs
  ``engine.training.train_client`` on its own partition and sends back the tensors the method's
  ``upload`` reads (the shared ones, plus any personal tensor the method itself uploads, such as
  pFedSim's classifier or FedCMD's φ), never the rest of its personal ones;
- evaluation is federated: every node evaluates its personalised model on its own split and
  returns per-sample outcomes, from which the engine computes the same accuracies.

Methods with their own ``local_update`` (Ditto, FedFomo, FedAP, …), decentralized methods and
capacity-aware methods are refused with a one-line error.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import cloudpickle
import torch

from fedpart.config import Config, dump_config, load_config
from fedpart.engine.evaluation import evaluate_clients
from fedpart.engine.recipe import Phase, Recipe
from fedpart.engine.simulation import Result, Simulation
from fedpart.engine.training import TrainResult, train_client
from fedpart.errors import FedpartError

if TYPE_CHECKING:
    from flwr.app import Context, Message, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp

State = dict[str, torch.Tensor]

#: the flwr release this module is written and tested against (the ``flower`` extra pins it)
FLWR_VERSION = "1.41.0"


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
    from fedpart.algorithms.base import Algorithm

    algo = sim.algorithm
    name = sim.cfg.algorithm.name
    if algo.setting not in ("centralized", "cloud-edge"):
        raise FedpartError(
            f"{name} is {algo.setting}: Flower runs only methods whose aggregation is on a server"
        )
    if type(algo).local_update is not Algorithm.local_update:
        raise FedpartError(
            f"{name} has its own local update (several trainings per round on client state the "
            "server holds); it runs with fedpart run only"
        )
    if type(algo).capacity_aware:
        raise FedpartError(f"{name} trains clients at different widths; not on Flower yet")
    switch = getattr(algo.options, "switch", None)
    if name == "fedcmd" and switch is not None and switch("similarity") == "weight_deltas":
        # the weight deltas are taken from the personal layer's start values, which only the
        # node holds
        raise FedpartError(
            "fedcmd with similarity=weight_deltas (variant=code) is not on Flower; "
            "use algorithm.similarity=parameters"
        )
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


def _check_reply(reply: Message) -> None:
    if reply.has_error():
        # the node's reason may carry a traceback; its last line names the error
        lines = str(reply.error.reason).strip().splitlines() or ["no reason given"]
        raise FedpartError(f"Flower node {reply.metadata.src_node_id} failed: {lines[-1]}")


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
        self.backend = "flower"
        self.grid = grid
        self.timeout = timeout
        self.config_text = dump_config(cfg)
        #: client → Flower node id
        self.nodes: dict[int, int] = {}
        #: client → the personal keys its node already holds (others are sent initial values)
        self.node_keys: dict[int, set[str]] = {}

    # --------------------------------------------------------------- messages
    def _content(self, records: dict[str, Any], **job: Any) -> RecordDict:
        from flwr.app import ConfigRecord, RecordDict

        return RecordDict({**records, "job": ConfigRecord({"config": self.config_text, **job})})

    def _exchange(self, messages: list[Message]) -> list[Message]:
        replies = list(self.grid.send_and_receive(messages, timeout=self.timeout))
        if len(replies) < len(messages):
            raise FedpartError(
                f"only {len(replies)} of {len(messages)} Flower nodes replied within "
                f"{self.timeout:g} s"
            )
        for reply in replies:
            _check_reply(reply)
        return replies

    def connect(self) -> None:
        """Wait for one node per client and learn which client each node is."""
        from flwr.app import Message

        n = self.data.num_clients
        deadline = time.monotonic() + self.timeout
        nodes = list(self.grid.get_node_ids())
        while len(nodes) < n:
            if time.monotonic() > deadline:
                raise FedpartError(
                    f"{len(nodes)} Flower nodes connected, the config has {n} clients; start "
                    "one SuperNode per client (node config partition-id=0..N-1)"
                )
            time.sleep(1.0)
            nodes = list(self.grid.get_node_ids())
        messages = [Message(self._content({}), node, "query") for node in nodes]
        for reply in self._exchange(messages):
            client = int(reply.content["info"]["client"])
            if client in self.nodes or not 0 <= client < n:
                raise FedpartError(
                    f"Flower node {reply.metadata.src_node_id} has partition-id {client}: each "
                    f"of 0..{n - 1} must be held by exactly one node"
                )
            self.nodes[client] = reply.metadata.src_node_id
        missing = sorted(set(range(n)) - set(self.nodes))
        if missing:
            raise FedpartError(f"no Flower node holds partition-id {missing[0]}")

    def _down(self, client: int, state: State) -> dict[str, Any]:
        """The records a node needs to rebuild ``state``: its non-personal tensors, and the
        initial values of personal keys the node does not hold yet."""
        store = self.store
        personal = set(store.personal_keys)
        held = self.node_keys.get(client, set())
        return {
            "model": _to_record({k: v for k, v in state.items() if k not in personal}),
            "init": _to_record({k: store.init_personal[k] for k in personal - held}),
        }

    # ------------------------------------------------------- training on nodes
    def train_clients(
        self, rnd: int, clients: list[int]
    ) -> tuple[dict[int, TrainResult], dict[str, Any]]:
        """The engine's ``train_clients``, its clients' training done by their nodes."""
        # the remote branch of Simulation.train_clients calls _train_remote for every client
        self.backend = "processes"
        try:
            return super().train_clients(rnd, clients)
        finally:
            self.backend = "flower"

    def _train_remote(self, rnd: int, clients: list[int]) -> dict[int, TrainResult]:
        from flwr.app import Message

        algo = self.algorithm
        personal = list(self.store.personal_keys)
        frozen = algo.frozen_blocks(rnd)
        starts: dict[int, State] = {}
        messages = []
        for c in clients:
            start = algo.start_state(rnd, c)
            starts[c] = start
            probe = _Recorder(start)
            algo.upload(rnd, c, probe)  # upload is a pure function of the state it is given
            returned = [k for k in start if k not in personal or k in probe.read]
            job = cloudpickle.dumps((algo.recipe(rnd, c), self.train_settings(rnd, c), frozen))
            content = self._content(
                self._down(c, start),
                round=rnd,
                client=c,
                personal=personal,
                returned=returned,
                job=job,
            )
            messages.append(Message(content, self.nodes[c], "train"))
        out: dict[int, TrainResult] = {}
        for reply in self._exchange(messages):
            info = reply.content["info"]
            c = int(info["client"])
            self.node_keys[c] = set(personal)
            # personal tensors the node did not send stay the server's placeholders: the server
            # never uses them (start states and evaluation overlay the node's own)
            state = {**starts[c], **_from_record(reply.content["model"])}
            out[c] = TrainResult(
                state=state,
                loss=float(info["loss"]),
                samples=int(info["samples"]),
                steps=int(info["steps"]),
                phases=[(tuple(k), s, n) for k, s, n in json.loads(str(info["phases"]))],
                observations=json.loads(str(info["observations"])),
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
        rnd = self.cfg.federation.rounds
        recipe = Recipe(phases=(Phase(blocks=None, epochs=epochs, name="finetune"),))
        personal = list(self.store.personal_keys)
        messages = []
        for c in range(self.data.num_clients):
            job = cloudpickle.dumps((recipe, self.train_settings(rnd, c), set()))
            content = self._content(
                self._down(c, self.store.client_state(c)),
                round=rnd,
                client=c,
                personal=personal,
                returned=[],
                job=job,
            )
            messages.append(Message(content, self.nodes[c], "train.finetune"))
        self._exchange(messages)
        return {}

    # ----------------------------------------------------- evaluation on nodes
    def evaluate_states(
        self, clients: list[int], states: list[State], index: list[torch.Tensor]
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per-sample (correct, loss) of each client's model, computed by its node on its
        ``evaluation.split`` with its personal tensors overlaid on ``states[i]``."""
        from flwr.app import Message

        personal = list(self.store.personal_keys)
        split = self.cfg.evaluation.split
        messages = [
            Message(
                self._content(self._down(c, s), client=c, personal=personal, split=split),
                self.nodes[c],
                "evaluate",
            )
            for c, s in zip(clients, states, strict=True)
        ]
        outcomes: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        for reply in self._exchange(messages):
            c = int(reply.content["info"]["client"])
            got = _from_record(reply.content["outcome"])
            outcomes[c] = (got["correct"].bool(), got["loss"])
        out = []
        for c, idx in zip(clients, index, strict=True):
            if outcomes[c][0].numel() != idx.numel():
                raise FedpartError(
                    f"Flower node of client {c} evaluated {outcomes[c][0].numel()} samples, the "
                    f"server expected {idx.numel()}: node and server partition differently"
                )
            out.append(outcomes[c])
        return out


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


def _state_keys(config_text: str) -> tuple[str, str]:
    """The ``context.state`` keys of a run's personal and fine-tuned tensors: named by the
    config, so that runs served one after another by the same node never mix."""
    tag = hashlib.sha256(config_text.encode()).hexdigest()[:16]
    return f"fedpart.{tag}.personal", f"fedpart.{tag}.finetuned"


def _partition_id(context: Context) -> int:
    value = context.node_config.get("partition-id")
    if value is None:
        raise FedpartError(
            "this Flower node has no partition-id; start it with "
            "--node-config 'partition-id=<client> num-partitions=<clients>'"
        )
    return int(value)


def _node_state(msg: Message, context: Context, sim: Simulation) -> tuple[int, State]:
    """The client's model: the server's tensors ⊕ the node's personal ones (initial values
    from the server for keys it does not hold yet)."""
    job = msg.content["job"]
    client = int(job["client"])
    if client != _partition_id(context):
        raise FedpartError(
            f"message for client {client} reached partition {_partition_id(context)}"
        )
    state = _from_record(msg.content["model"])
    personal, _ = _state_keys(str(job["config"]))
    held = _from_record(context.state[personal]) if personal in context.state else {}
    init = _from_record(msg.content["init"])
    for k in job["personal"]:
        state[k] = held[k] if k in held else init[k]
    return client, {k: state[k].to(sim.device) for k in sim.store.keys}


def _reply(msg: Message, records: dict[str, Any], info: dict[str, Any]) -> Message:
    from flwr.app import ConfigRecord, Message, RecordDict

    return Message(RecordDict({**records, "info": ConfigRecord(info)}), reply_to=msg)


def _train(msg: Message, context: Context, *, finetune: bool) -> Message:
    job = msg.content["job"]
    sim = _mirror(str(job["config"]))
    client, start = _node_state(msg, context, sim)
    recipe, settings, frozen = cloudpickle.loads(job["job"])
    result = train_client(
        sim.model, start, recipe, sim.data, client, int(job["round"]), settings, frozen
    )
    personal, finetuned = _state_keys(str(job["config"]))
    if finetune:
        context.state[finetuned] = _to_record(result.state)
    else:
        context.state[personal] = _to_record({k: result.state[k] for k in job["personal"]})
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
    client, state = _node_state(msg, context, sim)
    _, finetuned = _state_keys(str(job["config"]))
    if finetuned in context.state:  # after a final fine-tuning the node's own model is evaluated
        state = {k: v.to(sim.device) for k, v in _from_record(context.state[finetuned]).items()}
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
    apart (they are named by the run's config)."""
    sim = FlowerSimulation(cfg, grid, run_dir=run_dir, quiet=True, timeout=timeout)
    sim.connect()
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
    and its ``timeout`` the seconds to wait for nodes."""
    require_flwr()
    from flwr.serverapp import ServerApp

    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        rc = context.run_config
        source: Any = config if config is not None else rc.get("config")
        if source is None:
            raise FedpartError("no fedpart config: set config in the Flower run config")
        extra = [*_split_overrides(rc.get("overrides")), *overrides]
        if isinstance(source, Config):
            cfg = source.with_overrides(extra) if extra else source
        else:
            path = Path(str(source))
            if not path.is_absolute() and base is not None:
                path = Path(base) / path
            cfg = load_config(path, extra)
        out = rc.get("output-dir") or run_dir
        result = run_on_grid(
            grid, cfg, run_dir=out or None, timeout=float(rc.get("timeout", timeout))
        )
        if result.run_dir is not None:
            print(f"fedpart: wrote {result.run_dir}")

    return app
