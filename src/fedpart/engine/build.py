"""Building a run: the resolved config, the device, the federated data, the model, the state
store and the topology, in the order :class:`~fedpart.engine.simulation.Simulation` needs them.

The order is part of the numbers: the model is initialised from the seed's ``init`` stream
after the data and the capacity profile exist, and the method is constructed before the model
(its ``wrap_model`` and ``model_defaults`` shape it).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import torch

from fedpart.config import Config
from fedpart.data import load_dataset
from fedpart.engine.capacity import CapacityProfile, capacity_profile, narrow_for_capacity
from fedpart.engine.data import FederatedData, build_federated_data
from fedpart.engine.placement import configure_device, eval_batch_size
from fedpart.engine.store import ClientStateStore
from fedpart.errors import ConfigError, FedpartError
from fedpart.models import BlockModel, build_model
from fedpart.registry import methods
from fedpart.seeding import seed_for
from fedpart.topology import Topology, build_topology

if TYPE_CHECKING:
    from fedpart.engine.method import Method


def plain(value: Any) -> Any:
    """``value`` with tuples as lists (as JSON and YAML write them), recursively."""
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def resolved_options(options: Any) -> dict[str, Any]:
    """A method's parsed options as ``algorithm.*`` config values (every field, defaults
    included; tuples as lists), which parse back to the same options."""
    if not dataclasses.is_dataclass(options):
        return {}
    return {f.name: plain(getattr(options, f.name)) for f in dataclasses.fields(options)}


def model_options(cfg: Config, algo_cls: Any) -> dict[str, Any]:
    """``model.*`` options with the method's ``model_defaults`` filled in where the model offers
    the option and the config leaves it unset."""
    from fedpart.models import MODELS

    offered = MODELS[cfg.model.name].options
    defaults = {k: v for k, v in algo_cls.model_defaults.items() if k in offered}
    head = {} if cfg.model.head is None else {"head": cfg.model.head}
    return {**defaults, **cfg.model.options, **head}


def channels_last(cfg: Config, model: BlockModel) -> bool:
    """Whether ``model``'s convolutions compute in the channels-last layout (``engine.conv_layout``).

    ``auto`` is channels-last on the CPU where the model says it is faster
    (``model.channels_last_on_cpu``: measured by ``benchmarks/conv_layout.py``; ``fedpart bench``
    measured 2–3× faster evaluation and up to 1.4× faster one-thread training of FedAvgCNN;
    ``docs/results/performance.md``), and contiguous on CUDA.
    """
    layout = cfg.engine.conv_layout
    if layout == "auto":
        return not cfg.engine.device.startswith("cuda") and model.channels_last_on_cpu
    return layout == "channels_last"


def resolved_config(cfg: Config) -> tuple[Any, Any, Config]:
    """The method's class, its parsed options, and ``cfg`` with every option's value filled in.

    Every option's value, defaults included, goes into the run's config.yaml and checkpoint: a
    resumed run keeps the values it started with if a default changes later. So does the
    evaluation batch size the device gets."""
    algo_cls = methods()[cfg.algorithm.name]
    options = algo_cls.parse_options(cfg.algorithm.options)
    cfg = dataclasses.replace(
        cfg,
        algorithm=dataclasses.replace(cfg.algorithm, options=resolved_options(options)),
        engine=dataclasses.replace(
            cfg.engine,
            eval_batch_size=eval_batch_size(
                cfg.engine.eval_batch_size, torch.device(cfg.engine.device)
            ),
        ),
    )
    return algo_cls, options, cfg


def open_device(cfg: Config) -> tuple[torch.device, dict[str, Any]]:
    """The run's device with ``engine.threads`` and ``engine.deterministic`` applied; the
    second value is what was applied (recorded in summary.json)."""
    if cfg.engine.threads:
        torch.set_num_threads(cfg.engine.threads)
    device = torch.device(cfg.engine.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise FedpartError(
            "engine.device: CUDA was requested but no GPU is available; use engine.device=cpu"
        )
    return device, configure_device(device, cfg.engine.deterministic)


def federated_data(cfg: Config, data: FederatedData | None, device: torch.device) -> FederatedData:
    """The clients' data (loaded and partitioned unless given), moved to ``device`` once: the
    pool and every client's index arrays (docs/architecture.md)."""
    if data is None:
        bundle = load_dataset(
            cfg.dataset.name,
            cfg.dataset.root,
            download=cfg.dataset.download,
            **cfg.dataset.options,
        )
        data = build_federated_data(cfg, bundle)
    return data.to(device)


def client_capacity(cfg: Config, num_clients: int) -> CapacityProfile:
    """Each client's capacity r_i and width p_i (docs/capacity.md), fixed for the run."""
    f = cfg.federation
    return capacity_profile(f.capacity, num_clients, cfg.seed, f.capacity_values, f.p_min)


def run_model(
    cfg: Config,
    algorithm: Any,
    data: FederatedData,
    capacity: CapacityProfile,
    device: torch.device,
) -> BlockModel:
    """The server's model, initialised from the seed's ``init`` stream, shaped by the method."""
    algo_cls = type(algorithm)
    torch.manual_seed(seed_for(cfg.seed, "init"))
    model = build_model(
        cfg.model.name,
        num_classes=data.num_classes,
        input_shape=tuple(data.bundle.input_shape),
        **model_options(cfg, algo_cls),
    )
    if not algo_cls.capacity_aware:
        # every client must afford the model, so it is the full one cut to the smallest
        # width (Pa3dFL §6.1); a capacity-aware method keeps the full model on the server
        model = narrow_for_capacity(model, capacity.p_min)
    model = algorithm.wrap_model(model).to(device)
    model.set_channels_last(channels_last(cfg, model))
    return model


def client_store(model: BlockModel, algorithm: Any) -> ClientStateStore:
    """The store of the server's tensors and each client's own ones, as the method declares."""
    return ClientStateStore(
        model, model.state_dict(), algorithm.stored_blocks(), algorithm.personal_keys()
    )


def run_topology(cfg: Config, algorithm: Method, num_clients: int) -> Topology | None:
    """A peer-to-peer method's graphs over the rounds; ``None`` for a server's methods."""
    if not algorithm.peer_to_peer:
        return None
    return build_topology(cfg, num_clients, algorithm.default_topology)


def check_split(algorithm: Any, model: BlockModel) -> None:
    """Refuse a method whose personal or shared part comes out empty on this model (FedPer on
    a one-block model would upload nothing; LG-FedAvg would be FedAvg), in one line."""
    cls = type(algorithm)
    blocks = model.block_names
    name = algorithm.ctx.cfg.model.name
    if cls.needs_head_and_body and not model.body_names():
        raise ConfigError(
            "model.head",
            f"{cls.name} treats the head ({', '.join(model.head_names)}) and the body apart, but "
            f"model '{name}' has no body (blocks: {', '.join(blocks)}); use a "
            "model with two blocks or more, the last one(s) the head (model.head)",
        )
    if cls.communicates and set(blocks) <= algorithm.personal_blocks():
        raise ConfigError(
            "algorithm.name",
            f"{cls.name} keeps every block of the model ({', '.join(blocks)}) personal, so "
            "nothing would be shared; give the model a body apart from its head (model.head) "
            "or use algorithm.name=local",
        )
