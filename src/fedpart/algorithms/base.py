"""The method interface: (personal blocks) × (how shared blocks mix) × (local recipe).

A method subclasses :class:`Algorithm`, states its three choices, and overrides a hook only where
its paper's algorithm box departs from the engine's defaults.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from fedpart.engine import method_state
from fedpart.engine.mixing import tensor_bytes, weighted_average
from fedpart.engine.recipe import Recipe
from fedpart.engine.training import ClientJob
from fedpart.errors import ConfigError
from fedpart.models.base import batchnorm_keys

if TYPE_CHECKING:
    from fedpart.engine.context import MethodContext
    from fedpart.topology import Graph

State = dict[str, torch.Tensor]


@dataclasses.dataclass
class NoOptions:
    """A method without hyperparameters of its own."""


class Algorithm:
    """Base class of every method. The defaults give FedAvg over the shared blocks.

    Class attributes a method sets:
      ``name``: registry name; ``summary``: one line for ``fedpart list``;
      ``setting``: ``centralized``, ``cloud-edge`` or ``decentralized`` (``peer_to_peer``
      exactly for ``decentralized``: :class:`~fedpart.algorithms.decentralized.Decentralized`
      sets both);
      ``Options``: a dataclass of the method's hyperparameters (``algorithm.*`` keys), whose
      fields carry a ``doc`` and their limits (``ge``, ``gt``, ``le``, ``lt``, ``choices``:
      ``fedpart.config.check_limits``) in their metadata, and which may define ``validate()``
      for what one field's limits cannot say;
      ``has_global_model``: whether a server model exists to evaluate globally;
      ``backends``: the engine backends it supports;
      ``checkpointed``: the attributes that evolve over rounds and go into checkpoints, each
      declared with its form (``engine.method_state``: ``Tensor``, ``Named``, ``PerClient``,
      ``Stacked``, ``Module``, ``Value``).
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    setting: ClassVar[str] = "centralized"
    Options: ClassVar[type] = NoOptions
    has_global_model: ClassVar[bool] = True
    #: backends the method can run on (``batched``, ``ray``, ``processes`` and Flower's nodes,
    #: ``flower``, need the default ``local_update``; ``batched`` also one recipe shared by the
    #: clients of a round): declared, the engine never inspects a method's hooks to find out
    backends: ClassVar[tuple[str, ...]] = ("sequential", "batched", "ray", "processes", "flower")
    #: model options the method needs, applied when the model offers the option and the config
    #: leaves it unset (FedBN: ``{"norm": "bn"}`` gives the quick-start CNN BatchNorm)
    model_defaults: ClassVar[dict[str, Any]] = {}
    #: whether each client trains at its own width (``federation.capacity``); a method that is
    #: not trains every client at the federation's smallest width, the run's model cut to it
    capacity_aware: ClassVar[bool] = False
    #: method state saved in checkpoints and restored on resume (``engine.method_state``)
    checkpointed: ClassVar[tuple[method_state.Field, ...]] = ()
    #: whether the method treats the model's head and body apart (keeps one personal, trains
    #: or freezes them apart): a model without a body is then refused (``engine.build``)
    needs_head_and_body: ClassVar[bool] = False
    #: whether clients exchange anything; a method that does and keeps every block personal
    #: is refused (only ``local`` keeps all by design)
    communicates: ClassVar[bool] = True
    #: whether the clients exchange with each other along a graph, with no server: the engine
    #: then builds the run's topology (``default_topology`` under ``topology.name=auto``) and
    #: runs the decentralized round, every client training and :meth:`communicate` before
    #: (``mix_first``) or after it; else the server round (sample, train, upload, aggregate)
    peer_to_peer: ClassVar[bool] = False
    default_topology: ClassVar[dict[str, Any]] = {}
    mix_first: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.peer_to_peer != (cls.setting == "decentralized"):
            raise TypeError(
                f"{cls.__name__}: setting {cls.setting!r} with peer_to_peer={cls.peer_to_peer}; "
                "a decentralized method subclasses fedpart.algorithms.decentralized.Decentralized"
            )

    def __init__(self, options: Any, ctx: MethodContext) -> None:
        self.options = options
        self.ctx = ctx

    # ----------------------------------------------------------------- options
    @classmethod
    def option_docs(cls) -> dict[str, str]:
        """``algorithm.*`` key → one-line description."""
        return {f.name: f.metadata.get("doc", "") for f in dataclasses.fields(cls.Options)}

    @classmethod
    def parse_options(cls, raw: dict[str, Any]) -> Any:
        """Validate ``algorithm.*`` values into ``cls.Options``; raise ConfigError on bad input."""
        from fedpart.config import check_limits, coerce  # noqa: PLC0415 - shared checking

        hints = typing.get_type_hints(cls.Options)
        values = {}
        for key, value in raw.items():
            if key not in hints:
                valid = ", ".join(["name", *hints]) or "name"
                raise ConfigError(
                    f"algorithm.{key}", f"unknown key for {cls.name}; valid keys: {valid}"
                )
            values[key] = coerce(value, hints[key], f"algorithm.{key}")
        options = cls.Options(**values)
        check_limits(options, "algorithm")
        validate = getattr(options, "validate", None)
        if validate is not None:
            validate()  # what one field's limits cannot say (a list's order, two fields)
        return options

    @classmethod
    def supports(cls, cfg: Any) -> bool:
        """Whether this method can run the given config (used by ``fedpart compare``)."""
        return True

    # ------------------------------------------------------- the three choices
    def personal_blocks(self) -> set[str]:
        """Blocks that never leave their client."""
        return set()

    def personal_keys(self) -> set[str]:
        """State keys, beyond those of :meth:`personal_blocks`, that never leave their client.

        By default the BatchNorm running statistics under ``federation.batchnorm_stats=local``
        (FL-bench's behaviour: only trainable tensors are aggregated).
        """
        if self.ctx.cfg.federation.batchnorm_stats == "local":
            return set(batchnorm_keys(self.ctx.model))
        return set()

    def stored_blocks(self) -> set[str]:
        """Blocks the state store keeps per client (the personal ones; all for decentralized)."""
        return self.personal_blocks()

    def frozen_blocks(self, rnd: int) -> set[str]:
        """Blocks neither trained nor sent in round ``rnd`` (they keep their current values)."""
        return set()

    def recipe(self, rnd: int, client: int) -> Recipe:
        """The local training of ``client`` in round ``rnd``."""
        return Recipe()

    # ------------------------------------------------------------------- hooks
    def wrap_model(self, model: Any) -> Any:
        """Give the method a chance to extend the model (e.g. a second, personal head)."""
        return model

    def setup(self) -> None:
        """Called once after the model and data exist (create method state here)."""

    def model_for(self, client: int) -> Any:
        """The module ``client`` trains and is evaluated with: the run's model, or for a
        capacity-aware method the model of the client's width (its states have that shape)."""
        return self.ctx.model

    def download_bytes(self, rnd: int, client: int, keys: list[str]) -> int:
        """Bytes the server sends ``client`` at the start of round ``rnd`` (``keys`` from
        :meth:`download_keys`): by default those tensors of the server model, whole."""
        return tensor_bytes({k: self.ctx.store.global_state[k] for k in keys})

    def begin_round(self, rnd: int) -> None:
        """Called once at the start of every round, before any other hook of that round."""

    def job(self, rnd: int, client: int) -> ClientJob:
        """A participant's job of round ``rnd``: its :meth:`start_state` and :meth:`recipe`
        (and scratch values a method adds for its ``trained`` and ``upload`` hooks)."""
        return ClientJob(rnd, client, self.start_state(rnd, client), self.recipe(rnd, client))

    def train_job(self, job: ClientJob) -> Any:
        """Train ``job`` here, in the driver; the result carries the job."""
        result = self.ctx.train(job.rnd, job.client, job.start, job.recipe)
        result.job = job
        return result

    def local_update(self, rnd: int, client: int) -> Any:
        """A participant's local work in round ``rnd``: by default, train its :meth:`job`.
        Returns the engine's ``TrainResult``."""
        return self.train_job(self.job(rnd, client))

    def start_state(self, rnd: int, client: int) -> State:
        """The model a client starts local training from: global shared blocks ⊕ its personal ones."""
        return self.ctx.store.client_state(client)

    def upload(self, rnd: int, client: int, state: State, job: ClientJob | None = None) -> State:
        """What a client sends after training ``job`` to ``state``: its shared, non-frozen
        tensors. A pure function of its arguments (Flower probes it for what it reads)."""
        keys = self.ctx.store.shared_keys(self.frozen_blocks(rnd))
        return {k: state[k] for k in keys}

    def download_keys(self, rnd: int) -> list[str]:
        """Keys the server sends each participant at the start of the round."""
        return self.ctx.store.shared_keys(self.frozen_blocks(rnd))

    def aggregate(self, rnd: int, uploads: dict[int, State], weights: dict[int, float]) -> None:
        """Mix the uploads into the server model: FedAvg's data-size-weighted average."""
        if not uploads:
            return
        clients = sorted(uploads)
        keys = list(uploads[clients[0]])
        mixed = weighted_average([uploads[c] for c in clients], [weights[c] for c in clients], keys)
        self.ctx.store.global_state.update(mixed)

    def eval_state(self, client: int) -> State:
        """The model a client is evaluated with (its personalised model)."""
        return self.ctx.store.client_state(client)

    def received_state(self, rnd: int, client: int) -> State:
        """The model a participant of round ``rnd`` holds once the server's message arrived,
        before it trains: what ``evaluation.participants=before`` (FL-bench's "test before")
        evaluates. By default its personalised model, :meth:`eval_state`."""
        return self.eval_state(client)

    def trained(self, rnd: int, client: int, result: Any) -> None:
        """Called with every participant's ``TrainResult`` (whatever the backend; its ``job``
        with it), before uploads are collected: e.g. to read what the recipe's observer
        returned."""

    def remote_limitation(self) -> str | None:
        """Why this configuration cannot run where the clients' personal tensors stay on the
        clients' own machines (Flower's nodes), or None."""
        return None

    def summary_values(self) -> dict[str, Any]:
        """Method-specific values for ``summary.json`` (under the method's name)."""
        return {}

    def round_metrics(self) -> dict[str, Any]:
        """Method-specific numbers of the round just run, added to its ``metrics.jsonl`` row."""
        return {}

    def communicate(self, rnd: int, graph: Graph) -> None:
        """A :attr:`peer_to_peer` method's exchange of round ``rnd`` along ``graph`` (the
        decentralized round calls it; a server's method has none)."""
        raise NotImplementedError(f"{self.name} exchanges through a server, not along a graph")

    def finish(self) -> bool:
        """Called after the last round, before the final evaluation (e.g. fine-tuning).

        Returns whether it changed the clients' models (then the run is evaluated once more).
        """
        return False

    # ------------------------------------------------------------- checkpoints
    def extra_state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """The :attr:`checkpointed` state, as (tensors, JSON-able values), for checkpoints."""
        return method_state.save_state(self, self.checkpointed)

    def load_extra_state(self, tensors: dict[str, torch.Tensor], values: dict[str, Any]) -> None:
        """Restore what :meth:`extra_state` returned, then :meth:`state_restored`."""
        method_state.load_state(self, self.checkpointed, tensors, values)
        self.state_restored()

    def state_restored(self) -> None:
        """Called after a checkpoint's :attr:`checkpointed` state was restored: re-derive what
        follows from it (e.g. a block that became personal)."""
