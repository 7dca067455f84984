"""Cross-field validation of a built config: ranges, choices, registry names, the options of the
chosen dataset, model and method, and the rules that tie sections together (a decentralized
method has no server, ``test_source=official`` needs the official test split kept aside...).

Every error is a one-line :class:`fedpart.errors.ConfigError` naming the dotted key and, for a
choice, the valid choices.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from fedpart.config.coercion import INT_LIMIT, unknown_key
from fedpart.config.schema import AlgorithmConfig, ConfigData, DatasetConfig, ModelConfig
from fedpart.errors import ConfigError


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


def _check_options(section: str, name: str, given: dict[str, Any], valid: dict[str, str]) -> None:
    for opt in given:
        if opt not in valid:
            base = [
                f.name for f in dataclasses.fields(_SECTION_TYPES[section]) if f.name != "options"
            ]
            choices = base + sorted(valid)
            raise unknown_key(f"{section}.{opt}", opt, choices)


_SECTION_TYPES: dict[str, type] = {
    "dataset": DatasetConfig,
    "model": ModelConfig,
    "algorithm": AlgorithmConfig,
}

BACKENDS = ("auto", "sequential", "batched", "ray", "processes")
CONV_LAYOUTS = ("auto", "channels_last", "contiguous")
AUGMENTS = ("auto", "none", "crop", "crop_flip")
PARTICIPANT_PROTOCOLS = ("none", "before", "after", "both")


def validate(cfg: ConfigData) -> None:
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
    _check_client_faults(cfg, algo_cls)
    _check_capacity(cfg)

    from fedpart.topology import TOPOLOGIES, WEIGHTS

    for g in f.local_epochs_groups:
        _range("federation.local_epochs_groups", g, 0)
    if len(f.local_epochs_groups) > p.num_clients:
        raise ConfigError("federation.local_epochs_groups", "more groups than clients")
    _choice("topology.name", cfg.topology.name, ("auto", "server", *TOPOLOGIES), "topology")
    _choice("topology.weights", cfg.topology.weights, ("auto", *WEIGHTS), "mixing weights")
    setting = algo_cls.setting
    if algo_cls.peer_to_peer and cfg.topology.name == "server":
        raise ConfigError(
            "topology.name",
            f"{cfg.algorithm.name} is decentralized and has no server; choose one of: auto, "
            + ", ".join(TOPOLOGIES),
        )
    if not algo_cls.peer_to_peer and cfg.topology.name not in ("auto", "server"):
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
    _range("seed", cfg.seed, 0, INT_LIMIT - 1)


FAILURE_MODES = ("drop", "straggle")
NONFINITE_RULES = ("stop", "skip_client")


def _check_client_faults(cfg: ConfigData, algo_cls: Any) -> None:
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
    if algo_cls.peer_to_peer and (f.client_failure or f.client_failure_schedule):
        raise ConfigError(
            "federation.client_failure",
            f"{cfg.algorithm.name} is decentralized (no server to fail to return to); "
            "use topology.drop_prob for an unreliable network",
        )


#: the capacity profiles :func:`fedpart.engine.capacity.capacities` knows
CAPACITY_KINDS = ("ideal", "uniform", "uniform_random", "list")


def _check_capacity(cfg: ConfigData) -> None:
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
