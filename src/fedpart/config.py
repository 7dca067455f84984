"""Experiment configuration: YAML files and dotted ``key=value`` overrides, validated into typed objects.

Every error a user can make here (an unknown key, a wrong type, an out-of-range value, an unknown
dataset, model or method) raises :class:`fedpart.errors.ConfigError` whose message is one line
naming the dotted key and the valid choices.

Sections ``dataset``, ``model`` and ``algorithm`` also accept the options of the chosen dataset,
model and method (e.g. ``dataset.split`` for EMNIST, ``model.fc_layers`` for LeNet5,
``algorithm.mu`` for FedProx); they are checked against what that dataset, model or method declares.
"""

from __future__ import annotations

import dataclasses
import decimal
import difflib
import math
import os
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fedpart.errors import ConfigError
from fedpart.overrides import apply_overrides


@dataclass
class DatasetConfig:
    """Where the data comes from.

    ``merge_test`` pools the official train and test splits before partitioning (the convention
    of several seed papers); otherwise the official test split is kept aside.
    """

    name: str = "digits"
    root: str | None = None
    download: bool = True
    merge_test: bool = True
    augment: str = "auto"
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class PartitionConfig:
    """How samples are spread over clients and split per client.

    ``split`` holds the per-client (train, validation, test) fractions, stratified by label.
    ``test_source``: ``split`` takes each client's test set from its own samples by ``split``;
    ``official`` draws it from the official test split with the client's label distribution
    (needs ``dataset.merge_test=false``). ``pool_size``: partition a seeded random subset of
    that many samples of the pool instead of all of it (0: all) — fewer samples per client
    without changing the number of clients, e.g. to keep an easy dataset from saturating.
    """

    kind: str = "dirichlet"
    num_clients: int = 20
    alpha: float = 0.5
    min_size: int = 10
    shards_per_client: int = 2
    classes_per_client: int = 2
    split: list[float] = field(default_factory=lambda: [0.75, 0.0, 0.25])
    test_source: str = "split"
    pool_size: int = 0


@dataclass
class ModelConfig:
    """The network; options of the chosen model (``model.padding``, ``model.fc_layers``...) sit beside ``name``.

    ``head`` names the blocks that form the head (the classifier: what FedPer keeps personal,
    FedRep trains apart, FedBABU freezes), instead of the model's own choice (its last block
    unless it says otherwise); they must be the model's last blocks.
    """

    name: str = "fedavgcnn"
    head: list[str] | None = None
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class AlgorithmConfig:
    """The method; its hyperparameters (``algorithm.mu``...) sit beside ``name``."""

    name: str = "fedavg"
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class FederationConfig:
    """Rounds, participation and the local optimiser (SGD with momentum and weight decay).

    The learning rate of round t is ``lr * lr_decay**t``. ``drop_last`` drops the last
    incomplete batch of each local epoch (a client smaller than one batch still takes one step).
    ``batchnorm_stats``: ``shared`` (BatchNorm running statistics are sent and averaged like
    any tensor) or ``local`` (they stay on each client: FL-bench aggregates only trainable
    tensors, so every method of the FedCMD protocol keeps them local).

    Client faults (methods with a server; decentralized methods have ``topology.drop_prob``):
    ``client_failure`` is the probability that a sampled client fails in a round, drawn from a
    stream keyed by (seed, round, client); ``client_failure_schedule`` lists ``[round, client]``
    pairs that fail as well. ``client_failure_mode``: ``drop`` (the client received the model but
    never returns: no training, no upload; the round aggregates what arrived and a round where
    nobody returns keeps the model) or ``straggle`` (the client trains and sends, but its update
    arrives one round late and joins the next round's aggregation unless the client sends a
    fresh one then). ``on_nonfinite``: ``stop`` ends the run at a non-finite training loss,
    ``skip_client`` discards that client's update and goes on (counted in ``metrics.jsonl``);
    in a decentralized round the discarded client keeps its previous model and neither sends
    nor receives that round (a method that mixes before training has sent already).
    ``max_grad_norm`` (default 0: off) clips each local SGD step's gradient to that global L2
    norm over the step's trained parameters, before weight decay and momentum (as
    ``torch.nn.utils.clip_grad_norm_``); a step under the limit is unchanged bit for bit, and
    ``metrics.jsonl`` counts the clipped steps of each round (``clipped_steps``). The batched
    backend does not clip: with a limit set, ``auto`` runs sequentially.

    Capacity heterogeneity (``docs/capacity.md``): ``capacity`` is the profile of the clients'
    capacities ``r_i`` (``ideal``: all 1; ``uniform``: the grid 1 %–100 % in a seeded client
    order; ``uniform_random``: i.i.d. draws; ``list``: ``capacity_values``, one per client), and
    a client trains width ``p_i = max(p_min, ⌊√r_i / p_min⌋ · p_min)``. Capacity-aware methods
    train each client at its width; every other method trains all clients at ``min_i p_i``.
    """

    rounds: int = 50
    join_ratio: float = 1.0
    local_epochs: int = 1
    batch_size: int = 10
    lr: float = 0.01
    lr_decay: float = 1.0
    momentum: float = 0.0
    weight_decay: float = 0.0
    drop_last: bool = False
    local_epochs_groups: list[int] = field(default_factory=list)
    batchnorm_stats: str = "shared"
    client_failure: float = 0.0
    client_failure_schedule: list[list[int]] = field(default_factory=list)
    client_failure_mode: str = "drop"
    on_nonfinite: str = "stop"
    max_grad_norm: float = 0.0
    capacity: str = "ideal"
    capacity_values: list[float] = field(default_factory=list)
    p_min: float = 0.0625


@dataclass
class TopologyConfig:
    """The communication graph. ``auto`` lets the method choose (a server for centralized methods).

    Decentralized graphs (``fedpart list topologies``) use ``neighbors`` as their degree k
    (0: the method's default, at most ``num_clients - 1``);
    ``time_varying`` draws a new graph every round; ``weights`` picks the mixing weights
    (``auto``: the method's own); ``drop_prob`` makes every link fail independently with that
    probability in every round (an unreliable network).
    """

    name: str = "auto"
    neighbors: int = 0
    time_varying: bool = True
    weights: str = "auto"
    drop_prob: float = 0.0


@dataclass
class EngineConfig:
    """How the simulation executes.

    ``backend``: ``sequential`` (the readable reference), ``batched`` (clients that share a
    recipe trained as one ``torch.func`` computation; same numbers up to float rounding) or
    ``auto`` (on a GPU batched where the method and model allow it; on a CPU with several cores
    ``processes`` when the method allows it and a round's training is large enough to pay for
    the workers, ``backends.PARALLEL_MIN_MACS``; else sequential), or ``ray`` (clients
    as Ray tasks; ``ray_address`` names an existing cluster, empty starts a local Ray with
    ``ray_workers`` CPUs, 0 = all), or ``processes`` (a round's clients spread over
    ``workers`` worker processes on this machine, 0 = one per core; the data pool in shared
    memory; the sequential backend's numbers at the same ``threads``). ``batch_clients``: at most this many clients per batched
    computation (0: all). ``threads`` sets torch's intra-op threads (0: torch's default).
    ``conv_layout``: the memory layout convolutions compute in: ``channels_last`` (oneDNN's fast
    path on the CPU), ``contiguous`` (NCHW) or ``auto`` (on the CPU the model's measured faster
    layout, ``BlockModel.channels_last_on_cpu``; contiguous on CUDA); the two agree up to float
    rounding. The batched backend's vmap always computes NCHW. ``cache_features``: head-only
    training phases (FedRep's and DFedPGP's head epochs, FedBABU-style fine-tuning of the head)
    run the fixed body once per phase, ``eval_batch_size`` samples at a time, and train the head
    on those features, where that is exact (no augmentation, no BatchNorm or dropout in the body,
    the plain task loss); equal to per-batch body passes up to float rounding.
    ``eval_batch_size``: samples per evaluation forward pass; 0 (default) is 256 on the CPU and
    4,096 on CUDA (``engine.placement.EVAL_BATCH_SIZE``), resolved into the run's config.yaml.
    ``ray_gpus_per_client``: on CUDA, the fraction of a GPU each Ray client task asks for (0.25:
    four clients share one GPU at a time). ``deterministic``: on CUDA, pin the kernels that
    would otherwise vary from run to run (cuDNN deterministic and not benchmarking,
    ``torch.use_deterministic_algorithms``, ``CUBLAS_WORKSPACE_CONFIG``, TF32 off); recorded in
    ``summary.json`` (``docs/reliability.md``).
    """

    backend: str = "auto"
    device: str = "cpu"
    threads: int = 0
    eval_batch_size: int = 0
    conv_layout: str = "auto"
    cache_features: bool = True
    batch_clients: int = 0
    ray_address: str = ""
    ray_workers: int = 0
    ray_gpus_per_client: float = 0.25
    workers: int = 0
    deterministic: bool = True


@dataclass
class EvaluationConfig:
    """When and on what clients are evaluated.

    ``every``: evaluate every this many rounds (the last round always). ``last_k``: the window of
    the ``last10_mean``-style summary. ``split``: ``test`` or ``val`` (the per-client split used).
    ``participants``: FL-bench's protocol, every round, on the round's sampled clients only —
    ``before`` (the model each receives, before local training), ``after`` (after local
    training), ``both`` or ``none``; sample-weighted over the participants' splits.
    """

    every: int = 1
    last_k: int = 10
    split: str = "test"
    participants: str = "none"


@dataclass
class OutputConfig:
    """The run directory. ``dir`` may use ``{algorithm}``, ``{dataset}``, ``{seed}``, ``{time}``.

    ``checkpoint_every``: save a checkpoint every this many rounds (and at the end); 0 saves only
    at the end. ``overwrite``: allow writing into a directory that already holds a run.
    ``tensorboard``: also write TensorBoard event files into ``<dir>/tensorboard/``
    (``fedpart.tracking.tensorboard``; needs the ``tensorboard`` package).
    """

    dir: str = "runs/{algorithm}-{dataset}-{time}"
    checkpoint_every: int = 10
    overwrite: bool = False
    tensorboard: bool = False


@dataclass
class Config:
    """A whole experiment. ``Config.from_dict`` / ``load_config`` build and validate one."""

    seed: int = 0
    #: modules that register the user's datasets, models or methods (docs/extending.md),
    #: imported before anything else of the config is resolved
    plugins: list[str] = field(default_factory=list)
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    partition: PartitionConfig = field(default_factory=PartitionConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    federation: FederationConfig = field(default_factory=FederationConfig)
    topology: TopologyConfig = field(default_factory=TopologyConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    output: OutputConfig = field(default_factory=OutputConfig)

    # ------------------------------------------------------------------ building
    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Config:
        """Build and validate a config from a nested dict (e.g. parsed YAML)."""
        cfg = _build(cls, data or {}, "")
        from fedpart.plugins import from_environment, load_plugins  # noqa: PLC0415

        # before any name is resolved; with those --plugin named (FEDPART_PLUGINS)
        cfg.plugins = list(dict.fromkeys(load_plugins(cfg.plugins, "plugins")))
        cfg.plugins += [
            p for p in load_plugins(from_environment(), "--plugin") if p not in cfg.plugins
        ]
        validate(cfg)
        return cfg

    def to_dict(self) -> dict[str, Any]:
        """The config as plain nested dicts; open sections are flattened back beside ``name``."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if dataclasses.is_dataclass(value):
                section = {}
                for g in dataclasses.fields(value):
                    if g.name == "options":
                        section.update(value.options)
                    else:
                        section[g.name] = getattr(value, g.name)
                out[f.name] = section
            else:
                out[f.name] = value
        return out

    def with_overrides(self, overrides: list[str]) -> Config:
        """A new validated config with dotted ``key=value`` overrides applied."""
        data = self.to_dict()
        apply_overrides(data, overrides, Config)
        return Config.from_dict(data)


OPEN_SECTIONS = ("dataset", "model", "algorithm")


def _type_name(tp: Any) -> str:
    if tp is type(None):
        return "null"
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is list:
        return "list"
    if origin is dict:
        return "mapping"
    return getattr(tp, "__name__", str(tp))


_INT_LIMIT = 2**63


def _show(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters: an error message stays one short line."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_FLOAT_TEXT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check ``value`` against the type ``tp``; ints are accepted where floats are expected."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            try:
                return _coerce(value, arg, key)
            except ConfigError:
                continue
        raise ConfigError(key, f"expected {_type_name(tp)}, got {_show(value)}")
    if tp is type(None):
        if value is None:
            return None
        raise ConfigError(key, f"expected null, got {_show(value)}")
    if tp is Any:
        return value
    if origin is list:
        if not isinstance(value, list | tuple):
            raise ConfigError(key, f"expected a list, got {_show(value)}")
        (item_tp,) = typing.get_args(tp) or (Any,)
        return [_coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(key, f"expected a mapping, got {_show(value)}")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(key, f"expected true or false, got {_show(value)}")
    if tp is int:
        if isinstance(value, str) and _FLOAT_TEXT.match(value.strip()):
            # 1e3 (YAML 1.1 reads it as a string): exact through Decimal, so 1e30 stays 10**30
            number = decimal.Decimal(value.strip())
            if number.adjusted() > 18:  # beyond int64, and int() of 1e999999999 would not end
                raise ConfigError(
                    key, f"expected an integer of at most 2**63-1, got {_show(value)}"
                )
            if number == number.to_integral_value():
                value = int(number)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool):
            if not -_INT_LIMIT <= value < _INT_LIMIT:
                raise ConfigError(
                    key, f"expected an integer of at most 2**63-1, got {_show(value)}"
                )
            return value
        raise ConfigError(key, f"expected an integer, got {_show(value)}")
    if tp is float:
        if isinstance(value, str) and _FLOAT_TEXT.match(value.strip()):
            # YAML 1.1 reads 1e-3 (an exponent without a dot) as a string
            value = float(value.strip())
        if isinstance(value, int | float) and not isinstance(value, bool):
            try:
                number = float(value)
            except OverflowError:
                number = math.inf
            if not math.isfinite(number):
                raise ConfigError(key, f"expected a finite number, got {_show(value)}")
            return number
        raise ConfigError(key, f"expected a number, got {_show(value)}")
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(key, f"expected a string, got {_show(value)}")
    raise ConfigError(key, f"unsupported type {tp!r}")  # pragma: no cover


def _unknown_key(key: str, name: str, valid: list[str]) -> ConfigError:
    close = difflib.get_close_matches(name, valid, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return ConfigError(key, f"unknown key{hint}; valid keys: {', '.join(valid)}")


def _build(cls: type, data: Any, prefix: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(prefix or "config", f"expected a mapping, got {_show(data)}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    section_name = prefix.rstrip(".")
    is_open = section_name in OPEN_SECTIONS
    kwargs: dict[str, Any] = {}
    options: dict[str, Any] = {}
    for name, value in data.items():
        key = f"{prefix}{name}"
        if not isinstance(name, str):
            raise ConfigError(key, "keys must be strings")
        if name not in fields or (is_open and name == "options"):
            if is_open:
                options[name] = value
                continue
            raise _unknown_key(key, name, [n for n in fields if n != "options"])
        tp = hints[name]
        if dataclasses.is_dataclass(tp):
            kwargs[name] = _build(tp, value, f"{key}.")
        else:
            kwargs[name] = _coerce(value, tp, key)
    if is_open:
        kwargs["options"] = options
    return cls(**kwargs)


def _choice(key: str, value: str, choices: list[str] | tuple[str, ...], what: str) -> None:
    if value not in choices:
        raise ConfigError(key, f"unknown {what} '{value}'; valid choices: {', '.join(choices)}")


def _range(
    key: str, value: float, lo: float | None = None, hi: float | None = None, lo_open: bool = False
) -> None:
    if lo is not None and (value < lo or (lo_open and value == lo)):
        bound = f"> {lo}" if lo_open else f">= {lo}"
        raise ConfigError(key, f"must be {bound}, got {value}")
    if hi is not None and value > hi:
        raise ConfigError(key, f"must be <= {hi}, got {value}")


#: the limits an options dataclass's field may declare in its metadata, checked by
#: :func:`check_limits`: bounds (``ge`` ≥, ``gt`` >, ``le`` ≤, ``lt`` <) and ``choices``
LIMITS = ("ge", "gt", "le", "lt", "choices")


def option(
    default: Any = dataclasses.MISSING,
    doc: str = "",
    *,
    factory: Any = None,
    **limits: Any,
) -> Any:
    """One option of a method's ``Options`` dataclass (an ``algorithm.*`` key): its default (or
    ``factory`` for a list), its one-line ``doc`` and its limits (:data:`LIMITS`, checked by
    :func:`check_limits`), e.g. ``rho: float = option(0.1, "ρ of the selection phase", ge=0,
    le=1)``."""
    unknown = set(limits) - set(LIMITS)
    if unknown:
        raise TypeError(f"unknown option limits {sorted(unknown)}; valid: {', '.join(LIMITS)}")
    metadata = {"doc": doc, **limits}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def fraction(default: float, doc: str) -> Any:
    """An option that is a fraction in [0, 1] (a ratio, a weight, a share of rounds):
    ``option(default, doc, ge=0, le=1)``."""
    return option(default, doc, ge=0, le=1)


def check_limits(options: Any, section: str) -> None:
    """Check every field of the dataclass ``options`` against the limits its metadata declares
    (:data:`LIMITS`); ``None`` passes (an unset optional value), a list is checked item by item.
    Raises a one-line :class:`ConfigError` naming ``section.field`` and what it allows."""
    for f in dataclasses.fields(options):
        value = getattr(options, f.name)
        limits = {k: f.metadata[k] for k in LIMITS if k in f.metadata}
        if value is None or not limits:
            continue
        key = f"{section}.{f.name}"
        if isinstance(value, list):
            for i, item in enumerate(value):
                _check_limit(f"{key}[{i}]", item, limits)
        else:
            _check_limit(key, value, limits)


def _check_limit(key: str, value: Any, limits: dict[str, Any]) -> None:
    choices = limits.get("choices")
    if choices is not None and value not in choices:
        valid = ", ".join(str(c) for c in choices)
        raise ConfigError(key, f"unknown value '{value}'; valid choices: {valid}")
    lo, lo_open = (limits["gt"], True) if "gt" in limits else (limits.get("ge"), False)
    hi, hi_open = (limits["lt"], True) if "lt" in limits else (limits.get("le"), False)
    # written as "not inside" so that a NaN fails too
    too_low = lo is not None and not (value > lo if lo_open else value >= lo)
    too_high = hi is not None and not (value < hi if hi_open else value <= hi)
    if not (too_low or too_high):
        return
    if lo is not None and hi is not None:
        bound = f"in {'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"
    elif lo is not None:
        bound = f"{'>' if lo_open else '>='} {lo}"
    else:
        bound = f"{'<' if hi_open else '<='} {hi}"
    raise ConfigError(key, f"must be {bound}, got {value}")


def _check_options(section: str, name: str, given: dict[str, Any], valid: dict[str, str]) -> None:
    for opt in given:
        if opt not in valid:
            base = [
                f.name for f in dataclasses.fields(_SECTION_TYPES[section]) if f.name != "options"
            ]
            choices = base + sorted(valid)
            raise _unknown_key(f"{section}.{opt}", opt, choices)


_SECTION_TYPES: dict[str, type] = {
    "dataset": DatasetConfig,
    "model": ModelConfig,
    "algorithm": AlgorithmConfig,
}

BACKENDS = ("auto", "sequential", "batched", "ray", "processes")
CONV_LAYOUTS = ("auto", "channels_last", "contiguous")
AUGMENTS = ("auto", "none", "crop", "crop_flip")
PARTICIPANT_PROTOCOLS = ("none", "before", "after", "both")


def validate(cfg: Config) -> None:
    """Check ranges, registry names and method/dataset/model options; raise ConfigError."""
    from fedpart.data.partition import PARTITIONS
    from fedpart.data.registry import DATASETS
    from fedpart.models import MODELS
    from fedpart.registry import lookup, methods

    ALGORITHMS = methods()

    cfg.dataset.name = lookup(list(DATASETS), cfg.dataset.name, "dataset.name", "dataset")
    _check_options(
        "dataset", cfg.dataset.name, cfg.dataset.options, DATASETS[cfg.dataset.name].options
    )
    _choice("dataset.augment", cfg.dataset.augment, AUGMENTS, "augmentation")
    cfg.model.name = lookup(list(MODELS), cfg.model.name, "model.name", "model")
    _check_options("model", cfg.model.name, cfg.model.options, MODELS[cfg.model.name].options)
    cfg.algorithm.name = lookup(list(ALGORITHMS), cfg.algorithm.name, "algorithm.name", "algorithm")
    algo_cls = ALGORITHMS[cfg.algorithm.name]
    _check_options("algorithm", cfg.algorithm.name, cfg.algorithm.options, algo_cls.option_docs())
    algo_cls.parse_options(cfg.algorithm.options)  # type and range checks of the method's own

    p = cfg.partition
    _choice("partition.kind", p.kind, sorted(PARTITIONS), "partition")
    _range("partition.num_clients", p.num_clients, 1)
    _range("partition.alpha", p.alpha, 0.0, lo_open=True)
    _range("partition.min_size", p.min_size, 0)
    _range("partition.pool_size", p.pool_size, 0)
    _range("partition.shards_per_client", p.shards_per_client, 1)
    _range("partition.classes_per_client", p.classes_per_client, 1)
    if len(p.split) != 3 or any(f < 0 for f in p.split) or abs(sum(p.split) - 1.0) > 1e-6:
        raise ConfigError(
            "partition.split",
            f"expected three fractions [train, val, test] summing to 1, got {p.split}",
        )
    _choice("partition.test_source", p.test_source, ("split", "official"), "test source")
    if p.test_source == "official" and cfg.dataset.merge_test:
        raise ConfigError(
            "partition.test_source",
            "'official' needs the official test split kept aside: set dataset.merge_test=false",
        )
    if p.test_source == "split" and p.split[2] == 0 and cfg.evaluation.split == "test":
        raise ConfigError("partition.split", "the test fraction is 0 but evaluation.split=test")
    if cfg.evaluation.split == "val" and p.split[1] == 0:
        raise ConfigError(
            "partition.split", "the validation fraction is 0 but evaluation.split=val"
        )

    f = cfg.federation
    _range("federation.rounds", f.rounds, 0)
    _range("federation.join_ratio", f.join_ratio, 0.0, 1.0, lo_open=True)
    _range("federation.local_epochs", f.local_epochs, 0)
    _range("federation.batch_size", f.batch_size, 1)
    _range("federation.lr", f.lr, 0.0)
    _range("federation.lr_decay", f.lr_decay, 0.0, lo_open=True)
    _range("federation.momentum", f.momentum, 0.0, 1.0)
    _range("federation.weight_decay", f.weight_decay, 0.0)
    _range("federation.max_grad_norm", f.max_grad_norm, 0.0)
    _choice(
        "federation.batchnorm_stats", f.batchnorm_stats, ("shared", "local"), "BatchNorm statistics"
    )
    _check_client_faults(cfg, algo_cls.setting)
    _check_capacity(cfg)

    from fedpart.topology import TOPOLOGIES, WEIGHTS

    for g in f.local_epochs_groups:
        _range("federation.local_epochs_groups", g, 0)
    if len(f.local_epochs_groups) > p.num_clients:
        raise ConfigError("federation.local_epochs_groups", "more groups than clients")
    _choice("topology.name", cfg.topology.name, ("auto", "server", *TOPOLOGIES), "topology")
    _choice("topology.weights", cfg.topology.weights, ("auto", *WEIGHTS), "mixing weights")
    setting = algo_cls.setting
    if setting == "decentralized" and cfg.topology.name == "server":
        raise ConfigError(
            "topology.name",
            f"{cfg.algorithm.name} is decentralized and has no server; choose one of: auto, "
            + ", ".join(TOPOLOGIES),
        )
    if setting != "decentralized" and cfg.topology.name not in ("auto", "server"):
        raise ConfigError(
            "topology.name",
            f"{cfg.algorithm.name} is a {setting} method; it runs with topology.name=auto or server",
        )
    _range("topology.neighbors", cfg.topology.neighbors, 0)
    _range("topology.drop_prob", cfg.topology.drop_prob, 0.0, 1.0)

    _choice("engine.backend", cfg.engine.backend, BACKENDS, "backend")
    _choice("engine.conv_layout", cfg.engine.conv_layout, CONV_LAYOUTS, "convolution layout")
    if cfg.engine.device != "cpu" and not cfg.engine.device.startswith("cuda"):
        raise ConfigError("engine.device", f"expected cpu or cuda[:N], got {cfg.engine.device!r}")
    _range("engine.threads", cfg.engine.threads, 0, 1024)  # more would only stall the run
    _range("engine.batch_clients", cfg.engine.batch_clients, 0)
    _range("engine.ray_workers", cfg.engine.ray_workers, 0)
    _range("engine.ray_gpus_per_client", cfg.engine.ray_gpus_per_client, 0.0, 1.0, lo_open=True)
    if cfg.engine.device.startswith("cuda") and cfg.engine.backend == "processes":
        raise ConfigError(
            "engine.backend",
            "processes runs clients in CPU worker processes and cannot share a GPU; on CUDA use "
            "engine.backend=batched (one GPU) or ray (clients as Ray tasks on one or more GPUs)",
        )
    _range("engine.workers", cfg.engine.workers, 0)
    _range("engine.eval_batch_size", cfg.engine.eval_batch_size, 0)

    _range("evaluation.every", cfg.evaluation.every, 1)
    _range("evaluation.last_k", cfg.evaluation.last_k, 1)
    _choice("evaluation.split", cfg.evaluation.split, ("test", "val"), "evaluation split")
    _choice(
        "evaluation.participants",
        cfg.evaluation.participants,
        PARTICIPANT_PROTOCOLS,
        "participants protocol",
    )
    _range("output.checkpoint_every", cfg.output.checkpoint_every, 0)
    _range("seed", cfg.seed, 0, _INT_LIMIT - 1)


FAILURE_MODES = ("drop", "straggle")
NONFINITE_RULES = ("stop", "skip_client")


def _check_client_faults(cfg: Config, setting: str) -> None:
    """``federation.client_failure*`` and ``on_nonfinite``: ranges, and only where a server is."""
    f = cfg.federation
    _range("federation.client_failure", f.client_failure, 0.0, 1.0)
    _choice("federation.client_failure_mode", f.client_failure_mode, FAILURE_MODES, "failure mode")
    _choice("federation.on_nonfinite", f.on_nonfinite, NONFINITE_RULES, "non-finite rule")
    for i, entry in enumerate(f.client_failure_schedule):
        key = f"federation.client_failure_schedule[{i}]"
        if len(entry) != 2 or entry[0] < 0 or not 0 <= entry[1] < cfg.partition.num_clients:
            raise ConfigError(
                key,
                f"expected [round, client] with round >= 0 and 0 <= client < "
                f"{cfg.partition.num_clients}, got {entry}",
            )
    if setting == "decentralized" and (f.client_failure or f.client_failure_schedule):
        raise ConfigError(
            "federation.client_failure",
            f"{cfg.algorithm.name} is decentralized (no server to fail to return to); "
            "use topology.drop_prob for an unreliable network",
        )


#: the capacity profiles :func:`fedpart.engine.capacity.capacities` knows
CAPACITY_KINDS = ("ideal", "uniform", "uniform_random", "list")


def _check_capacity(cfg: Config) -> None:
    """``federation.capacity``, ``capacity_values`` and ``p_min``."""
    f = cfg.federation
    _choice("federation.capacity", f.capacity, CAPACITY_KINDS, "capacity profile")
    _range("federation.p_min", f.p_min, 0.0, 1.0, lo_open=True)
    n = cfg.partition.num_clients
    if f.capacity != "list":
        if f.capacity_values:
            raise ConfigError(
                "federation.capacity_values", "is only read with federation.capacity=list"
            )
        return
    if len(f.capacity_values) != n:
        raise ConfigError(
            "federation.capacity_values",
            f"capacity=list needs one ratio per client: {n} clients, "
            f"{len(f.capacity_values)} values",
        )
    for i, r in enumerate(f.capacity_values):
        if not (math.isfinite(r) and 0.0 < r <= 1.0):
            raise ConfigError(f"federation.capacity_values[{i}]", f"must be in (0, 1], got {r}")


def load_config(
    path: str | os.PathLike | None = None, overrides: list[str] | None = None
) -> Config:
    """Read a YAML config (or start from the defaults), apply overrides and validate."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            what = "is a directory, not a config file" if p.is_dir() else "config file not found"
            raise ConfigError("", f"{what}: {p}")
        loaded = _parse_yaml(p, _read_text(p))
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError("", f"{p}: the top level must be a mapping of sections")
        data = loaded
    apply_overrides(data, overrides or [], Config)
    return Config.from_dict(data)


def _read_text(p: Path) -> str:
    """A config file's text: UTF-8 (a byte-order mark is dropped); binary files refused."""
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise ConfigError("", f"{p}: cannot read ({exc.strerror})") from exc
    if b"\0" in data:
        raise ConfigError("", f"{p}: not a text file (it contains NUL bytes); expected YAML")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            "", f"{p}: not UTF-8 text (byte {exc.start} is invalid); expected a YAML file"
        ) from exc


def _parse_yaml(p: Path, text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        where = f" (line {line + 1})" if line is not None else ""
        raise ConfigError("", f"{p}: not valid YAML{where}") from exc
    except RecursionError as exc:
        raise ConfigError("", f"{p}: nested too deeply to be a config") from exc
    except (ValueError, TypeError, OverflowError) as exc:
        # a scalar YAML cannot build: a 5,000-digit integer, a date like 2024-13-45
        raise ConfigError("", f"{p}: not valid YAML ({_show(str(exc), 80)})") from exc


def dump_config(cfg: Config) -> str:
    """The resolved config as YAML text."""
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False)
