"""The config's schema: one typed dataclass per section, and the whole experiment as data.

:class:`ConfigData` holds the fields of a whole experiment; :class:`fedpart.config.Config` adds
building one from a dict, validating it and applying overrides (``fedpart.config.loading``), so
that the checks of ``fedpart.config.validation`` can be typed against the data without importing
the class that calls them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

#: the sections that also take the options of the chosen dataset, model and method beside ``name``
OPEN_SECTIONS = ("dataset", "model", "algorithm")


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
    computation (0: all). ``cuda_graphs``: the batched backend trains a group on a few
    fixed step shapes (padded batches, bucketed rows) in buffers kept across rounds, each shape
    captured once as a CUDA graph and replayed (:mod:`fedpart.engine.captured`); the sequential
    numbers up to float rounding; recipes with their own objective train eagerly; on the CPU the
    same code runs without graphs (for tests). ``threads`` sets torch's intra-op threads (0: torch's default).
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
    cuda_graphs: bool = False
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
class ConfigData:
    """A whole experiment's sections and seed, as data (:class:`fedpart.config.Config` builds
    and validates one)."""

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
