"""The bench's device: checking that a requested GPU is there, synchronising before a timer
is read, and the peak GPU memory of a block."""

from __future__ import annotations

import torch

from fedpart.errors import FedpartError


def check_device(name: str) -> torch.device:
    """``name`` as a :class:`torch.device` this process can compute on, else a one-line
    :class:`FedpartError` naming the cause (asked before any data is loaded)."""
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError) as exc:
        raise FedpartError(f"--device: expected cpu, cuda or cuda:N, got {name!r}") from exc
    if device.type not in ("cpu", "cuda"):
        raise FedpartError(f"--device: expected cpu, cuda or cuda:N, got {name!r}")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            why = (
                f"this torch build ({torch.__version__}) has no CUDA support"
                if torch.version.cuda is None
                else f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU"
            )
            raise FedpartError(
                f"--device {name}: CUDA was requested but no GPU is available: {why}; "
                "use --device cpu"
            )
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise FedpartError(
                f"--device {name}: only {count} GPU(s) are visible (cuda:0 to cuda:{count - 1})"
            )
    return device


def synchronize(device: torch.device | None) -> None:
    """Wait for the work queued on ``device`` (a CUDA device) to finish; nothing elsewhere.
    Called before every timer read, as CUDA kernels run asynchronously."""
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


class GpuPeak:
    """The peak GPU memory allocated by this process during a block: the peak statistics are
    reset on entry (``torch.cuda.reset_peak_memory_stats``) and read on exit
    (``torch.cuda.max_memory_allocated``), both after a synchronisation. ``baseline``: the memory
    allocated on entry; ``delta``: ``peak - baseline``. Off a CUDA device every value is ``None``.
    """

    def __init__(self, device: torch.device | None) -> None:
        self.device = device if device is not None and device.type == "cuda" else None
        self.baseline: int | None = None
        self.peak: int | None = None

    def __enter__(self) -> GpuPeak:
        if self.device is not None:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.baseline = torch.cuda.memory_allocated(self.device)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.device is not None:
            torch.cuda.synchronize(self.device)
            self.peak = torch.cuda.max_memory_allocated(self.device)

    @property
    def delta(self) -> int | None:
        if self.peak is None or self.baseline is None:
            return None
        return max(0, self.peak - self.baseline)
