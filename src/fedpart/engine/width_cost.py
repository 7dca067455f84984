"""What one client's model costs at a width: forward FLOPs, model size and peak training memory.

For the four kinds of client model that Pa3dFL's Table 2 compares on its CIFAR-100 CNN:

- ``fedavg``: the full model (width 1).
- ``p-width``: the width-``p`` slice of the plain model (HeteroFL, Fjord, FedRolex, TailorFL;
  ``models.width.narrow_model``).
- ``flanc``: the FLANC-factorized model at width ``p``, computing through its basis.
- ``pa3dfl``: the Pa3dFL-factorized model at width ``p``, rebuilding each weight from θ_u θ_v
  once per forward pass, with its global and local heads.

What the paper counts, found by matching the FedAvg row (``docs/capacity.md``):

- **FLOPs** are forward multiply-adds of one batch (not 2× multiply-adds, not per sample):
  14.71 M per CIFAR-100 sample × 128 = 188.3 × 10⁷ against the printed 188.0 × 10⁷. Counted here
  with ``torch.utils.flop_counter`` on the real forward pass (``2`` FLOPs per multiply-add,
  halved), on the ``meta`` device so nothing is computed. A factorized model's weight rebuild is
  counted once per batch, as it runs.
- **Model size** is the parameters of the body, without the classifier head, in float32 and MiB
  (2²⁰ bytes): 796,032 × 4 B = 3.04 MiB, printed 30.4 × 10⁻¹ MB; with the head it would be 3.11.
  :class:`ClientCost` carries both counts.
- **Peak memory** (not compared within a tolerance: the paper's GPU numbers include a fixed
  overhead of about 20 MB that its smallest models show) is measured here as the peak of the bytes
  held by live tensors during one training step (forward of every head, cross-entropy, backward,
  SGD update), parameters and the input batch included, after one warm-up step. On CUDA this is
  ``torch.cuda.max_memory_allocated``; on the CPU, where torch keeps no such statistic, it is the
  largest ``total_allocated`` the CPU allocator reports to ``torch.profiler`` (``profile_memory``)
  during the step, plus the parameters and batch allocated before it. It excludes the allocator's
  cache, the CUDA context and library workspaces that do not go through torch's allocator.

The paper's printed tables live in :mod:`fedpart.engine.width_cost_tables` (importable from
here too).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from fedpart.engine.width_cost_tables import (
    PAPER_TABLE2,
    PAPER_TABLE2_PFEDGATE,
    PAPER_TABLE8,
    TABLE2_RATIOS,
)
from fedpart.models.base import BlockModel
from fedpart.models.cnn import Pa3dFLCNN
from fedpart.models.factorization import DEFAULT_P_MIN
from fedpart.models.factorized import FactorizedCNN
from fedpart.models.width import narrow_model

__all__ = [
    "COST_METHODS",
    "PAPER_TABLE2",
    "PAPER_TABLE2_PFEDGATE",
    "PAPER_TABLE8",
    "TABLE2_RATIOS",
    "ClientCost",
    "client_cost",
    "client_model",
    "forward_macs",
    "input_shape_of",
    "model_size",
    "peak_training_memory",
]

COST_METHODS = ("fedavg", "p-width", "flanc", "pa3dfl")

_MIB = float(2**20)


@dataclass(frozen=True)
class ClientCost:
    """The cost of one client's model at width ``width`` and batch size ``batch_size``."""

    method: str
    width: float
    batch_size: int
    #: forward multiply-adds of one batch: the paper's "FLOPs"
    forward_macs: int
    #: parameters without the classifier head(s): the paper's "model size"
    body_params: int
    #: all parameters the client holds (heads included)
    params: int
    #: peak live tensor memory of one training step in MiB (``None`` when not measured)
    peak_mib: float | None

    @property
    def size_mib(self) -> float:
        """Model size in MiB: ``body_params`` float32 values."""
        return self.body_params * 4 / _MIB


def client_model(
    method: str,
    p: float,
    *,
    variant: str = "cifar100",
    num_classes: int | None = None,
    p_min: float = DEFAULT_P_MIN,
    device: torch.device | str = "cpu",
) -> BlockModel:
    """The model a width-``p`` client of ``method`` trains (Pa3dFL CNN ``variant``)."""
    if method not in COST_METHODS:
        raise ValueError(f"unknown method {method!r}; valid: {', '.join(COST_METHODS)}")
    shape = input_shape_of(variant)
    classes = num_classes or (100 if variant == "cifar100" else 10)
    with torch.device(device):
        if method in ("fedavg", "p-width"):
            if method == "fedavg" and p != 1.0:
                raise ValueError("fedavg trains the full model (p = 1)")
            full = Pa3dFLCNN(classes, shape, variant=variant)
            model = full if p == 1.0 else narrow_model(full, p)
            assert isinstance(model, BlockModel)
            return model
        return FactorizedCNN(
            classes,
            shape,
            variant=variant,
            decomposition=method,
            p_min=p_min,
            width=p,
            local_head=method == "pa3dfl",
        )


def input_shape_of(variant: str) -> tuple[int, int, int]:
    """The image shape of a Pa3dFL CNN variant: CIFAR-100 ``(3, 32, 32)``, FashionMNIST
    ``(1, 28, 28)``."""
    return (3, 32, 32) if variant == "cifar100" else (1, 28, 28)


def _all_heads(model: BlockModel, x: torch.Tensor) -> list[torch.Tensor]:
    z = model.features(x)
    return [model.get_submodule(h)(z) for h in model.head_names]


def forward_macs(model: BlockModel, input_shape: Sequence[int], batch_size: int) -> int:
    """Multiply-adds of one forward pass of a batch through the body and every head block.

    Runs on a ``meta`` copy of the model (shapes only, no arithmetic, no memory).
    """
    import copy

    meta = copy.deepcopy(model).to("meta")
    x = torch.zeros(batch_size, *input_shape, device="meta")
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        _all_heads(meta, x)
    return int(counter.get_total_flops()) // 2


def model_size(model: BlockModel) -> tuple[int, int]:
    """``(body parameters, all parameters)`` of a model: the paper's size leaves the head out."""
    head = set(model.head_names)
    total = sum(p.numel() for p in model.parameters())
    body = sum(p.numel() for k, p in model.named_parameters() if model.block_of(k) not in head)
    return body, total


def peak_training_memory(
    model: BlockModel,
    input_shape: Sequence[int],
    num_classes: int,
    batch_size: int,
    *,
    lr: float = 0.01,
) -> float:
    """Peak live tensor memory (MiB) of one SGD training step of ``model`` on its device.

    See the module docstring for what is and is not counted. The model's parameters are updated.
    """
    device = next(model.parameters()).device
    gen = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(batch_size, *input_shape, generator=gen).to(device)
    y = torch.randint(0, num_classes, (batch_size,), generator=gen).to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    model.train()

    def step() -> None:
        for p in params:
            p.grad = None
        loss = sum(F.cross_entropy(out, y) for out in _all_heads(model, x))
        assert isinstance(loss, torch.Tensor)
        loss.backward()
        with torch.no_grad():
            for p in params:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-lr)

    step()  # warm-up: lazily created library state is not the model's cost
    before = sum(p.numel() * p.element_size() for p in model.parameters())
    before += x.numel() * x.element_size() + y.numel() * y.element_size()
    if device.type == "cuda":
        for p in params:
            p.grad = None
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        start = torch.cuda.memory_allocated(device)
        step()
        torch.cuda.synchronize(device)
        return (torch.cuda.max_memory_allocated(device) - start + before) / _MIB
    for p in params:
        p.grad = None
    return (before + _cpu_step_peak(step)) / _MIB


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence file descriptor 2 for a while: the profiler's C++ layer prints a start and a stop
    line per session there, which would bury a command's own output."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _cpu_step_peak(step: object) -> int:
    """The largest number of bytes the CPU allocator held for tensors created during ``step``."""
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    assert callable(step)
    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events: list[tuple[int, int, int]] = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())  # type: ignore[union-attr]
    while stack:
        node = stack.pop()
        if node.tag == _EventType.Allocation and node.extra_fields.device.type == "cpu":
            f = node.extra_fields
            events.append((node.start_time_ns, int(f.alloc_size), int(f.total_allocated)))
        stack.extend(node.children)
    if not events:
        return 0
    events.sort()
    # the reporter's running total survives between profiling sessions (frees outside a session
    # are not seen), so measure from the total just before this session's first allocation
    start = events[0][2] - events[0][1]
    return max(total for _, _, total in events) - start


def client_cost(
    method: str,
    p: float,
    batch_size: int = 128,
    *,
    variant: str = "cifar100",
    p_min: float = DEFAULT_P_MIN,
    memory: bool = True,
    device: torch.device | str = "cpu",
) -> ClientCost:
    """Forward FLOPs, model size and (with ``memory``) peak training memory of one client."""
    torch.manual_seed(0)
    model = client_model(method, p, variant=variant, p_min=p_min, device=device)
    shape = input_shape_of(variant)
    macs = forward_macs(model, shape, batch_size)
    body, total = model_size(model)
    classes = model.get_submodule(model.head_names[0]).out_features
    peak = peak_training_memory(model, shape, int(classes), batch_size) if memory else None
    return ClientCost(method, p, batch_size, macs, body, total, peak)


def pfedgate_cost(
    p: float,
    batch_size: int = 128,
    *,
    variant: str = "cifar100",
    blocks: int = 5,
    memory: bool = True,
    device: torch.device | str = "cpu",
) -> ClientCost:
    """pFedGate's cost at sparsity ``s = p²`` by Pa3dFL's App. D.4 estimate: the width-``p``
    model's cost (a sparse model of sparsity ``s`` costs about what the width-``√s`` one does)
    plus the gating layer's, measured as the gated full model at sparsity 1 minus the plain full
    model. The model size is the full body's plus the gating layer (all parameters can be
    activated, so pFedGate sends and stores them all)."""
    from fedpart.models.gated import GatedModel

    narrow = client_cost("p-width", p, batch_size, variant=variant, memory=memory, device=device)
    full = client_cost("fedavg", 1.0, batch_size, variant=variant, memory=memory, device=device)
    torch.manual_seed(0)
    shape = input_shape_of(variant)
    base = client_model("fedavg", 1.0, variant=variant, device=device)
    gated = GatedModel(base, shape, blocks=blocks)
    gate_macs = forward_macs(gated, shape, batch_size) - full.forward_macs
    gate_params = sum(t.numel() for t in gated.gate.parameters())
    peak = None
    if memory:
        classes = int(base.get_submodule(base.head_names[0]).out_features)
        gate_peak = peak_training_memory(gated, shape, classes, batch_size) - (full.peak_mib or 0)
        peak = (narrow.peak_mib or 0.0) + gate_peak
    return ClientCost(
        "pfedgate",
        p,
        batch_size,
        narrow.forward_macs + gate_macs,
        full.body_params + gate_params,
        full.params + gate_params,
        peak,
    )
