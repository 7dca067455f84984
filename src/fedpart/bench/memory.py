"""Host memory of the bench's measurements: the process's resident set (and its worker
processes'), sampled in a background thread, and freed memory handed back to the OS."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import threading

import torch

MB = 1024 * 1024


def mb_text(value: int | None) -> str:
    """Bytes as whole megabytes (MiB) with thousands separators; ``—`` for ``None``."""
    return "—" if value is None else f"{value / MB:,.0f}"


def rss_bytes() -> int:
    """The resident set size of this process (0 where ``/proc`` is missing)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def release_memory(device: torch.device | None = None) -> None:
    """Collect garbage and hand freed heap memory back to the OS (glibc), best effort; on a
    CUDA ``device`` also hand the caching allocator's free blocks back."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    if device is not None and device.type == "cuda":
        torch.cuda.empty_cache()


def children_rss_bytes(page: int = 4096) -> int:
    """The summed resident set size of this process's child processes (worker processes; 0
    where ``/proc`` is missing). Pages shared with this process (the data pool in shared memory)
    are counted in every process that maps them, so the sum is an upper bound."""
    total = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 0
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/children", "rb") as f:
                pids = f.read().split()
        except OSError:
            continue
        for pid in pids:
            try:
                with open(f"/proc/{int(pid)}/statm", "rb") as f:
                    total += int(f.read().split()[1]) * page
            except (OSError, ValueError, IndexError):
                continue
    return total


class RssSampler:
    """Samples the process RSS every ``interval`` seconds in a background thread.

    ``baseline``: the RSS when entered; ``peak``: the highest RSS seen (the last sample is taken
    on exit); ``delta``: ``peak - baseline``. With ``children=True`` every sample adds the RSS of
    the child processes (:func:`children_rss_bytes`).
    """

    def __init__(self, interval: float = 0.01, children: bool = False) -> None:
        self.children = children
        self.interval = interval
        self.baseline = 0
        self.peak = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

    def _run(self) -> None:
        try:
            f = open("/proc/self/statm", "rb", buffering=0)  # noqa: SIM115 - kept open to sample
        except OSError:
            return
        with f:
            while not self._stop.is_set():
                f.seek(0)
                value = int(f.read().split()[1]) * self._page
                if self.children:
                    value += children_rss_bytes(self._page)
                if value > self.peak:
                    self.peak = value
                self._stop.wait(self.interval)

    def __enter__(self) -> RssSampler:
        self.baseline = rss_bytes()
        self.peak = self.baseline
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        last = rss_bytes() + (children_rss_bytes(self._page) if self.children else 0)
        self.peak = max(self.peak, last)
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    @property
    def delta(self) -> int:
        return max(0, self.peak - self.baseline)
