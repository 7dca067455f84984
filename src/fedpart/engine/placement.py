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
import re
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


#: environment variables that hold a math library to another instruction set than the CPU's
ISA_VARIABLES = ("ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY", "MKL_CBWR")


def _cpu_flags() -> list[str]:
    """The CPU's vector instruction sets (``/proc/cpuinfo``'s flags that the kernels dispatch
    on: SSE4, AVX*, FMA, F16C, AMX), empty where the file is absent."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = line.split(":", 1)[1].split()
                    keep = ("sse4", "avx", "fma", "f16c", "amx")
                    return sorted(x for x in flags if x.startswith(keep))
    except OSError:
        pass
    return []


def _library_version(pattern: str) -> str | None:
    """A version printed by ``torch.__config__.show()`` (the libraries torch was built with)."""
    match = re.search(pattern, torch.__config__.show())
    return match.group(1) if match else None


def cpu_record() -> dict[str, Any]:
    """Where a CPU run computed, for reading a mismatch between two machines' numbers: the CPU
    model and its vector instruction sets, the instruction set ATen's kernels dispatch on, the
    MKL and oneDNN versions, and any environment variable holding a library to another set."""
    return {
        "device": cpu_name(),
        "cpu_flags": " ".join(_cpu_flags()),
        "aten_capability": torch.backends.cpu.get_cpu_capability(),
        "mkl": bool(torch.backends.mkl.is_available()),
        "mkl_version": _library_version(r"Math Kernel Library Version ([\w.]+)"),
        "onednn_version": _library_version(r"MKL-DNN (v[\d.]+)"),
        "isa_env": {k: os.environ[k] for k in ISA_VARIABLES if k in os.environ},
    }


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
        record.update(cpu_record(), threads=torch.get_num_threads())
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
