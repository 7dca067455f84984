"""Experiment configuration: YAML files and dotted ``key=value`` overrides, validated into typed objects.

Every error a user can make here (an unknown key, a wrong type, an out-of-range value, an unknown
dataset, model or method) raises :class:`fedpart.errors.ConfigError` whose message is one line
naming the dotted key and the valid choices.

Sections ``dataset``, ``model`` and ``algorithm`` also accept the options of the chosen dataset,
model and method (e.g. ``dataset.split`` for EMNIST, ``model.fc_layers`` for LeNet5,
``algorithm.mu`` for FedProx); they are checked against what that dataset, model or method declares.

The modules, each importing only those listed before it: ``schema`` (the sections' dataclasses),
``coercion`` (a value checked against its field's type, a dict built into a dataclass),
``options`` (the vocabulary of a method's options and their limits), ``validation`` (ranges,
choices, registry names, the rules across sections), ``overrides`` (dotted ``key=value``) and
``loading`` (:class:`Config` from a dict, overrides or a YAML file).
"""

from fedpart.config.coercion import coerce
from fedpart.config.loading import Config, dump_config, load_config
from fedpart.config.options import LIMITS, check_limits, fraction, option
from fedpart.config.schema import (
    AlgorithmConfig,
    DatasetConfig,
    EngineConfig,
    EvaluationConfig,
    FederationConfig,
    ModelConfig,
    OutputConfig,
    PartitionConfig,
    TopologyConfig,
)
from fedpart.config.validation import CAPACITY_KINDS, validate

__all__ = [
    "CAPACITY_KINDS",
    "LIMITS",
    "AlgorithmConfig",
    "Config",
    "DatasetConfig",
    "EngineConfig",
    "EvaluationConfig",
    "FederationConfig",
    "ModelConfig",
    "OutputConfig",
    "PartitionConfig",
    "TopologyConfig",
    "check_limits",
    "coerce",
    "dump_config",
    "fraction",
    "load_config",
    "option",
    "validate",
]
