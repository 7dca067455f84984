"""A CUDA device for the CPU-only test machine that checks placement and keeps real values.

``with FakeCuda() as gpu:`` makes ``engine.device=cuda`` runnable without a GPU:

- a tensor is "on cuda" when its storage was made on the fake device: by a factory called with
  ``device="cuda"``, by ``.to("cuda")`` / ``.cuda()`` (a copy, as on a GPU), or by any operation
  one of whose inputs is on cuda. Its ``.device`` says ``cuda:0`` and ``.is_cuda`` is true; its
  values are computed on the CPU as usual, so the numbers are the CPU's bit for bit, and
  autograd, ``torch.func`` and ``.item()`` work;
- an operation that meets a CUDA tensor and a CPU tensor with elements raises what a GPU raises
  ("Expected all tensors to be on the same device"). As on a GPU, a 0-dim CPU tensor is a scalar
  that may meet CUDA tensors, and ``copy_``, ``to``, ``cpu()`` and assignment into a slice move
  data between the devices. Unlike a GPU, a CPU index tensor into a CUDA tensor is refused (on a
  GPU it is a blocking host-to-device copy at every call, which the engine must not make per
  step); ``.numpy()`` of a CUDA tensor raises as on a GPU;
- ``gpu.host_reads`` counts the values read back to the host (``.item()``, ``float(t)``,
  ``bool(t)``, ``.tolist()``, ``.cpu()``): a GPU synchronises on each;
- ``gpu.host_writes`` counts the blocking copies of host data onto the device (``.to("cuda")``
  or ``.cuda()`` of a CPU tensor without ``non_blocking``, ``torch.tensor``/``torch.as_tensor``
  of host data with ``device="cuda"``, ``copy_`` or slice assignment of a CPU tensor into a
  CUDA one): PyTorch waits for the device's stream to finish after each (``memcpy_and_sync``),
  so one per step keeps the host from running ahead of the GPU.

Every torch call goes through a ``TorchFunctionMode`` that checks devices and tags its output
tensors (weakly, by identity: a tensor's Python object lives as long as the tensor); a view is
the output of a call, so it is tagged too; functorch's transforms, whose outputs are made
outside any torch call, are followed by wrapping their unwrapping functions.

``FakeTensorMode`` with a fake ``cuda`` device checks devices the same way but carries no
values: it stops at the first ``float(loss)`` or data-dependent branch, and on a CPU-only build of
torch neither indexing (which needs a CUDA device guard) nor a backward pass (which needs a CUDA
runtime) runs there. This checker runs whole methods, training included, and its numbers can be
compared with the CPU's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch._functorch.eager_transforms as _eager_transforms
import torch._functorch.vmap as _vmap_module
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

CUDA = torch.device("cuda", 0)
CPU = torch.device("cpu")

_functorch = torch._C._functorch


def _physical(t: torch.Tensor) -> torch.Tensor:
    """The tensor under functorch's batching and gradient wrappers."""
    while _functorch.is_functorch_wrapped_tensor(t):
        t = _functorch.get_unwrapped(t)
    return t


#: host reads: they return Python values (or a host copy)
_READS = {
    torch.Tensor.item,
    torch.Tensor.tolist,
    torch.Tensor.__float__,
    torch.Tensor.__int__,
    torch.Tensor.__bool__,
    torch.Tensor.__index__,
}
_DEVICE_GET = torch.Tensor.device.__get__
_IS_CUDA_GET = torch.Tensor.is_cuda.__get__
_DATA_SET = torch.Tensor.data.__set__
_UNCHECKED = {
    torch.Tensor.copy_,
    torch._has_compatible_shallow_copy_type,
    torch.Tensor.data.__set__,
    torch.Tensor.untyped_storage,
    torch.Tensor.data_ptr,
    torch.Tensor.__repr__,
    torch.Tensor.__format__,
}


class FakeCuda(TorchFunctionMode):
    """The fake CUDA device, active inside the ``with`` block (see the module's docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.host_reads = 0
        self.host_writes = 0
        self._tagged = WeakIdKeyDictionary()
        self._saved: list[tuple[Any, str, Any]] = []

    # ----------------------------------------------------------- tagging
    def on_cuda(self, t: torch.Tensor) -> bool:
        return t in self._tagged or _physical(t) in self._tagged

    def _tag(self, value: Any) -> Any:
        for t in tree_flatten(value)[0]:
            if isinstance(t, torch.Tensor):
                self._tagged[t] = True
                self._tagged[_physical(t)] = True
        return value

    def _follow(self, fn: Any) -> Any:
        """``fn`` (a functorch unwrapping), whose result is on cuda when its input was."""

        def followed(x: Any, *args: Any, **kwargs: Any) -> Any:
            out = fn(x, *args, **kwargs)
            return self._tag(out) if isinstance(x, torch.Tensor) and self.on_cuda(x) else out

        return followed

    # ----------------------------------------------------------- the mode
    def __enter__(self) -> FakeCuda:
        patches = {
            "is_available": lambda: True,
            "device_count": lambda: 1,
            "get_device_name": lambda *a, **k: "fake CUDA (CPU checker)",
            "synchronize": lambda *a, **k: None,
            "reset_peak_memory_stats": lambda *a, **k: None,
            "max_memory_allocated": lambda *a, **k: 0,
            "memory_allocated": lambda *a, **k: 0,
            "empty_cache": lambda *a, **k: None,
            "current_device": lambda: 0,
            "manual_seed_all": lambda *a, **k: None,
        }
        for name, value in patches.items():
            self._saved.append((torch.cuda, name, getattr(torch.cuda, name)))
            setattr(torch.cuda, name, value)
        follow = (
            (_vmap_module, "_remove_batch_dim"),
            (_eager_transforms, "_unwrap_for_grad"),
            (torch.nn.Parameter, "__deepcopy__"),  # it copies with torch functions disabled
        )
        for module, name in follow:
            original = getattr(module, name)
            self._saved.append((module, name, original))
            setattr(module, name, self._follow(original))
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        for owner, name, value in reversed(self._saved):
            setattr(owner, name, value)
        self._saved.clear()

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206, C901
        kwargs = kwargs or {}
        if func == _DEVICE_GET:
            return CUDA if self.on_cuda(args[0]) else func(*args)
        if func == _IS_CUDA_GET:
            return self.on_cuda(args[0])
        if func == _DATA_SET:  # param.data = tensor: param now holds that tensor's storage
            func(*args, **kwargs)
            if self.on_cuda(args[1]):
                self._tag(args[0])
            elif args[0] in self._tagged:
                del self._tagged[args[0]]
            return None
        if func is torch.Tensor.copy_ and self._host_to_device(args[1], args[0]):
            if not (args[2] if len(args) > 2 else kwargs.get("non_blocking", False)):
                self.host_writes += 1
        if func in _UNCHECKED:
            return func(*args, **kwargs)
        if func is torch.Tensor.numpy and self.on_cuda(args[0]):
            raise TypeError(
                "can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the "
                "tensor to host memory first."
            )
        if func in _READS:
            if self.on_cuda(args[0]):
                self.host_reads += 1
            return func(*args, **kwargs)
        if func in (torch.Tensor.to, torch.Tensor.cuda, torch.Tensor.cpu):
            return self._move(func, args, kwargs)
        if func is torch.Tensor.__setitem__:  # the value may come from the other device
            self._check(func, [args[0], args[1]])
            if len(args) > 2 and self._host_to_device(args[2], args[0]):
                self.host_writes += 1
            return func(*args, **kwargs)
        checked = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        cuda_in = self._check(func, checked)
        device = kwargs.get("device")
        if device is not None:
            wanted = torch.device(device)
            kwargs = {**kwargs, "device": CPU if wanted.type == "cuda" else wanted}
            if wanted.type == "cuda" and func in (torch.tensor, torch.as_tensor):
                data = args[0] if args else kwargs.get("data")
                if not (isinstance(data, torch.Tensor) and self.on_cuda(data)):
                    self.host_writes += 1  # host data copied onto the device
            out = func(*args, **kwargs)
            return self._tag(out) if wanted.type == "cuda" else out
        out = func(*args, **kwargs)
        return self._tag(out) if cuda_in else out

    def _check(self, func: Any, tensors: list[Any]) -> bool:
        devices = set()
        for t in tensors:
            if not isinstance(t, torch.Tensor):
                continue
            if self.on_cuda(t):
                devices.add("cuda:0")
            elif t.dim() > 0 and _physical(t).device.type == "cpu":
                devices.add("cpu")
        if len(devices) > 1:
            name = getattr(func, "__name__", str(func))
            raise RuntimeError(
                "Expected all tensors to be on the same device, but found at least two devices, "
                f"cuda:0 and cpu! (in {name})"
            )
        return "cuda:0" in devices

    def _host_to_device(self, src: Any, dst: Any) -> bool:
        """Whether copying ``src`` into ``dst`` moves host data onto the device."""
        return (
            isinstance(dst, torch.Tensor)
            and self.on_cuda(dst)
            and isinstance(src, torch.Tensor)
            and not self.on_cuda(src)
        )

    def _move(self, func: Any, args: tuple, kwargs: dict) -> Any:
        source = args[0]
        from_cuda = self.on_cuda(source)
        if func is torch.Tensor.cuda:
            target = CUDA
            rest: dict[str, Any] = {}
        elif func is torch.Tensor.cpu:
            target = CPU
            rest = {}
        else:
            other = args[1] if len(args) > 1 else kwargs.get("other")
            if isinstance(other, torch.Tensor):  # t.to(other): other's device and dtype
                target = CUDA if self.on_cuda(other) else other.device
                rest = {"dtype": other.dtype}
            else:
                device, dtype, non_blocking, memory_format = torch._C._nn._parse_to(
                    *args[1:], **kwargs
                )
                target = device
                rest = {"dtype": dtype, "non_blocking": non_blocking}
                if memory_format is not None:
                    rest["memory_format"] = memory_format
                rest = {k: v for k, v in rest.items() if v is not None}
        if target is not None:
            target = torch.device(target)
        to_cuda = target is not None and target.type == "cuda"
        to_cpu = target is not None and target.type == "cpu"
        out = source.to(**rest) if rest else source
        if from_cuda and to_cpu:
            self.host_reads += 1
            copied = out.clone() if out is source else out
            return copied  # a fresh, untagged storage
        if to_cuda and not from_cuda:
            if not rest.get("non_blocking", False):
                self.host_writes += 1
            copied = out.clone() if out is source else out
            return self._tag(copied)
        return self._tag(out) if from_cuda else out


def tree_devices(value: Any, gpu: FakeCuda) -> set[str]:
    """The devices of every tensor in a nested structure."""
    out = set()
    for t in tree_flatten(value)[0]:
        if isinstance(t, torch.Tensor):
            out.add("cuda" if gpu.on_cuda(t) else "cpu")
    return out


@contextlib.contextmanager
def torch_switches_kept() -> Iterator[None]:
    """Restore torch's process-wide determinism switches afterwards: a CUDA run sets them
    (``engine.deterministic``), and the fake device lets it do so on the CPU."""
    state = (
        torch.are_deterministic_algorithms_enabled(),
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
    )
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(state[0])
        torch.backends.cudnn.deterministic = state[1]
        torch.backends.cudnn.benchmark = state[2]
        torch.backends.cuda.matmul.allow_tf32 = state[3]
        torch.backends.cudnn.allow_tf32 = state[4]
