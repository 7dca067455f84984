"""Counting what a stretch of PyTorch code asks of the device: the ATen operators it dispatches
and the host synchronisations among them, the same way on the CPU as on a GPU.

``with DispatchCounter(device) as counter: ...`` counts, for the code in the block:

``counter.ops`` (``total_ops``)
    every call of an ATen operator that reaches the dispatcher's Python key, by overload name
    (``aten.convolution.default``: 1). That is what a
    :class:`~torch.utils._python_dispatch.TorchDispatchMode` sees: the operators after autograd
    and ``torch.func``'s transforms (a ``vmap``-ed convolution is one grouped
    ``aten.convolution``), composite operators as the operators they decompose into (``t.to``,
    ``t.reshape``), each top-level call once (what an operator calls inside its kernel is not
    seen). Calls that never reach the dispatcher are not operators here: ``.to(device)`` of a
    tensor already there, ``.cpu()`` of a CPU tensor, tensor properties (``.shape``,
    ``.device``, ``.numel()``), and ``.tolist()``, ``.numpy()`` of a CPU tensor.
``counter.draws`` (``total_draws``)
    the operators dispatched inside :func:`fedpart.seeding.host_draws`: the per-client draws
    from seeded host generators (a client's batch order, one permutation per client and epoch on
    every backend). They are not in ``ops``: every backend makes them, one per client (the
    numbers depend on those streams), on the host whatever the device.
``counter.syncs`` (``total_syncs``)
    the operations at which a GPU's host waits for the device, by kind:

    - ``scalar``: ``aten._local_scalar_dense``, one value read into Python (``t.item()``,
      ``float(t)``, ``int(t)``, ``bool(t)``, a tensor used as a Python index or in an ``if``);
    - ``to host``: a copy from a non-CPU tensor into host memory (``aten._to_copy`` or
      ``aten.copy_`` to the CPU: ``.cpu()``, ``.to("cpu")``), and ``.tolist()`` of a non-CPU
      tensor (counted once, with the copy it makes);
    - ``data-dependent shape``: operators whose output size depends on tensor values, which a
      GPU reads back to size the output (:data:`DATA_DEPENDENT`, and indexing with a boolean
      mask);
    - ``host read``: ``.tolist()``, ``.numpy()`` or ``np.asarray`` of a CPU tensor. On the CPU
      these reads never reach the dispatcher (``.tolist()`` reads the storage in C++), so they
      are seen through a :class:`~torch.overrides.TorchFunctionMode` entered with the dispatch
      mode. They are counted as synchronisations only when ``device`` is the CPU: a run on the
      CPU holds on the host what a GPU run holds on the device, so such a read is where the GPU
      run reads its device (its ``to host`` copy there). With a GPU ``device`` they are listed
      but not counted (host data).

    ``counter.sync_ops`` lists which calls they were.

Limits, as measured: on the CPU a ``.cpu()`` or ``.to("cpu")`` dispatches nothing, so one whose
result is never read into Python (only passed to further CPU operators) is a synchronisation on a
GPU that a CPU run does not count; and a CPU run counts a ``.tolist()`` of a tensor that a GPU
run would have kept on the host anyway (an upper bound there). Copies onto the device are not
synchronisations here, although a GPU waits for its stream after one made without
``non_blocking`` (``t.to("cuda")`` of a host tensor, ``torch.tensor(data, device="cuda")``, whose
copy no dispatch mode sees): the test suite's fake CUDA device counts those
(``tests/fake_cuda.py``, ``host_writes``). ``sites`` (a path prefix, e.g. the
package's folder) also counts every operator and synchronisation by the innermost source line
under it that made it (``counter.sites``), to find where counts come from; it walks the Python
stack at each call, so it is slow.

Counting costs Python time on every operator: a counted round is for counting, not timing.
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from fedpart.seeding import in_host_draws

__all__ = ["DATA_DEPENDENT", "DispatchCounter", "SYNC_KINDS"]

#: the kinds of :attr:`DispatchCounter.syncs`
SYNC_KINDS = ("scalar", "to host", "data-dependent shape", "host read")

#: operator packets whose output size depends on the values of their inputs (a GPU copies a
#: count back to the host to allocate the output)
DATA_DEPENDENT = frozenset(
    {
        "aten.nonzero",
        "aten.masked_select",
        "aten._unique",
        "aten._unique2",
        "aten.unique_dim",
        "aten.unique_consecutive",
        "aten.unique_dim_consecutive",
        "aten.bincount",
        "aten.equal",
    }
)
#: indexing operators: data-dependent when an index is a boolean (or uint8) mask
_INDEXING = frozenset({"aten.index", "aten.index_put", "aten.index_put_", "aten._index_put_impl_"})
_COPIES = frozenset({"aten._to_copy", "aten.copy_"})
_SCALAR = "aten._local_scalar_dense"
#: Python-level reads of tensor values that bypass the dispatcher on the CPU
_READS = {torch.Tensor.tolist: "tolist", torch.Tensor.numpy: "numpy"}
if hasattr(torch.Tensor, "__array__"):
    _READS[torch.Tensor.__array__] = "__array__"


def _on_host(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "cpu"


def _device_to_host(packet: str, args: tuple, kwargs: dict) -> bool:
    """Whether a copy operator moves a non-CPU tensor into host memory."""
    if packet == "aten.copy_":
        dst, src = args[0], args[1]
        return _on_host(dst) and isinstance(src, torch.Tensor) and not _on_host(src)
    src = args[0]
    target = kwargs.get("device")
    return target is not None and torch.device(target).type == "cpu" and not _on_host(src)


def _mask_index(args: tuple) -> bool:
    indices = args[1] if len(args) > 1 else ()
    return any(
        isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8)
        for i in (indices or ())
    )


def _site(prefix: str) -> str:
    """``path:line`` of the innermost frame under ``prefix`` (outside this module), or ``?``."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(prefix) and name != __file__:
            return f"{name[len(prefix) :].lstrip('/')}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


class _HostReads(TorchFunctionMode):
    """The Python-level reads (``tolist``, ``numpy``, ``__array__``) of the counter's block."""

    def __init__(self, counter: DispatchCounter) -> None:
        super().__init__()
        self.counter = counter

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
        kwargs = kwargs or {}
        name = _READS.get(func)
        if name is None or not args or not isinstance(args[0], torch.Tensor):
            return func(*args, **kwargs)
        counter = self.counter
        if _on_host(args[0]):
            counter._sync("host read", name, counted=counter.host_is_device)
            return func(*args, **kwargs)
        # a device tensor: one read, whatever copy the call makes inside
        counter._sync("to host", name)
        counter._inside_read += 1
        try:
            return func(*args, **kwargs)
        finally:
            counter._inside_read -= 1


class DispatchCounter(TorchDispatchMode):
    """Counts the ATen operators and host synchronisations of a ``with`` block (see the module
    docstring for what is counted). ``device`` is where the counted code computes (``cpu``,
    ``cuda``, ``cuda:N``); ``sites`` a path prefix to attribute counts to source lines under it.
    """

    def __init__(self, device: str | torch.device = "cpu", sites: str | None = None) -> None:
        super().__init__()
        #: ATen overload name → calls
        self.ops: Counter[str] = Counter()
        #: ATen overload name → calls inside :func:`fedpart.seeding.host_draws`
        self.draws: Counter[str] = Counter()
        #: synchronisation kind (:data:`SYNC_KINDS`) → count
        self.syncs: Counter[str] = Counter()
        #: (kind, operator or read) → count; host reads not counted as syncs are listed too
        self.sync_ops: Counter[tuple[str, str]] = Counter()
        #: (site, operator or ``sync: kind``) → count, with ``sites``
        self.sites: Counter[tuple[str, str]] = Counter()
        self.host_is_device = torch.device(device).type == "cpu"
        self.prefix = sites
        self._inside_read = 0
        self._reads = _HostReads(self)

    @property
    def total_ops(self) -> int:
        return sum(self.ops.values())

    @property
    def total_draws(self) -> int:
        return sum(self.draws.values())

    @property
    def total_syncs(self) -> int:
        return sum(self.syncs.values())

    def __enter__(self) -> DispatchCounter:
        self._reads.__enter__()
        try:
            return super().__enter__()
        except BaseException:
            self._reads.__exit__(*sys.exc_info())
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            super().__exit__(*exc)
        finally:
            self._reads.__exit__(*exc)

    def _sync(self, kind: str, what: str, counted: bool = True) -> None:
        self.sync_ops[(kind, what)] += 1
        if counted:
            self.syncs[kind] += 1
            if self.prefix is not None:
                self.sites[(_site(self.prefix), f"sync: {kind}")] += 1

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
        kwargs = kwargs or {}
        name = str(func)
        packet = str(func.overloadpacket)
        if in_host_draws():
            self.draws[name] += 1
            if self.prefix is not None:
                self.sites[(_site(self.prefix), f"draw: {packet}")] += 1
            return func(*args, **kwargs)
        self.ops[name] += 1
        if self.prefix is not None:
            self.sites[(_site(self.prefix), packet)] += 1
        if packet == _SCALAR:
            self._sync("scalar", packet)
        elif packet in _COPIES:
            if not self._inside_read and _device_to_host(packet, args, kwargs):
                self._sync("to host", packet)
        elif packet in DATA_DEPENDENT or (packet in _INDEXING and _mask_index(args)):
            self._sync("data-dependent shape", packet)
        return func(*args, **kwargs)

    def summary(self, top: int = 10) -> list[str]:
        """Lines: the totals, the synchronisations by kind and the most called operators."""
        lines = [
            f"operators: {self.total_ops}, synchronisations: {self.total_syncs}, "
            f"host draws: {self.total_draws}"
        ]
        for (kind, what), n in sorted(self.sync_ops.items()):
            counted = kind != "host read" or self.host_is_device
            lines.append(f"  {kind}: {what} x{n}" + ("" if counted else " (host data)"))
        for name, n in self.ops.most_common(top):
            lines.append(f"  {name}: {n}")
        return lines
