"""Where a run computes: the device, the switches that make a GPU repeat itself, and their record.

One place decides placement: :class:`~fedpart.engine.simulation.Simulation` moves the data pool
and the clients' index arrays (:meth:`FederatedData.to`) and the model to ``engine.device`` once
per run; everything else is made on the device of the tensors it meets (the engine and the
methods create tensors with ``device=`` taken from the state or data they work on). Values go
back to the host once per round (metrics, checkpoints, ``summary.json``).
"""

from __future__ import annotations

import os
import platform
from typing import Any

import torch

#: cuBLAS's setting for reproducible results (NVIDIA's cuBLAS documentation, "Results
#: reproducibility"; PyTorch's reproducibility notes)
CUBLAS_WORKSPACE_CONFIG = ":4096:8"

#: ``engine.eval_batch_size=0`` per device type: small batches keep the CPU's caches warm; a
#: GPU needs large ones to fill it (evaluation holds no activations for a backward pass)
EVAL_BATCH_SIZE = {"cpu": 256, "cuda": 4096}


def eval_batch_size(requested: int, device: torch.device) -> int:
    """``engine.eval_batch_size``, its default 0 resolved for ``device``."""
    return requested or EVAL_BATCH_SIZE.get(device.type, 256)


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def configure_device(device: torch.device, deterministic: bool) -> dict[str, Any]:
    """Apply ``engine.deterministic`` for ``device`` and return what ``summary.json`` records.

    On CUDA, deterministic means: cuDNN deterministic and not benchmarking (no autotuned
    convolution that may differ between runs), ``torch.use_deterministic_algorithms(True)`` (an
    operation without a deterministic CUDA kernel raises instead of varying), the cuBLAS
    workspace setting ``CUBLAS_WORKSPACE_CONFIG`` (when the environment has none), and TF32 off
    for matrix products and convolutions (full float32, as on the CPU). These are process-wide
    switches of torch; they are set when the run is built. On the CPU nothing is switched: its
    kernels repeat themselves at a fixed thread count (``engine.threads``).
    """
    record: dict[str, Any] = {
        "deterministic": bool(deterministic),
        "device_type": device.type,
        "torch": torch.__version__,
    }
    if device.type != "cuda":
        record.update(
            device=cpu_name(),
            threads=torch.get_num_threads(),
            mkl=bool(torch.backends.mkl.is_available()),
        )
        return record
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE_CONFIG)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        torch.use_deterministic_algorithms(True)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    record.update(
        device=torch.cuda.get_device_name(device),
        cuda=torch.version.cuda,
        cudnn=torch.backends.cudnn.version(),
        cudnn_deterministic=bool(torch.backends.cudnn.deterministic),
        cudnn_benchmark=bool(torch.backends.cudnn.benchmark),
        deterministic_algorithms=bool(torch.are_deterministic_algorithms_enabled()),
        cublas_workspace_config=os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
        tf32_matmul=bool(torch.backends.cuda.matmul.allow_tf32),
        tf32_cudnn=bool(torch.backends.cudnn.allow_tf32),
    )
    return record
