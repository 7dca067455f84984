"""Dropout from each client's own stream, drawn by the engine: the same masks on every backend.

``nn.Dropout`` draws its masks from torch's global generator, which a ``vmap`` over clients
cannot give each client its own of. So while a client trains, every ``nn.Dropout`` of the model
multiplies its input by a noise tensor the engine supplies, nn.Dropout's own formula
``x · (keep / q)`` (``q = 1 − p``), with ``keep = u < q`` for uniform draws ``u`` from the
client's stream ``torch_generator(seed, "dropout", rnd, client, phase)`` (on a CUDA device a
CUDA generator with that seed):

* each step draws ``batch_size × S`` uniforms, sample after sample, ``S`` being the per-sample
  sizes of one forward's dropout calls in call order (:func:`probe` finds them with a forward of
  two samples); a shorter last batch uses the first rows;
* the sequential trainer draws them step by step (:func:`fedpart.engine.training.train_client`),
  the batched one draws the step's uniforms of every active client and passes the noise into
  ``vmap`` as an input (:mod:`fedpart.engine.batched_step`), so both apply the same masks.

A model's dropout therefore trains batched, resumes bit for bit and gives the same numbers on
every backend; its masks differ from those ``nn.Dropout`` would have drawn (another stream), and
a CUDA run's from a CPU run's (another generator). Only ``nn.Dropout`` itself is drawn this way;
the other dropout modules (``Dropout1d/2d/3d``, ``AlphaDropout``, subclasses) keep their own
forward, from the global generator seeded per client (:func:`fedpart.seeding.model_draws`), and
keep a model out of the batched backend (:func:`unbatchable`). Outside a fed step (evaluation,
cached features) a module behaves as ``nn.Dropout``.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.func import functional_call

from fedpart.seeding import host_draws, seed_for

__all__ = [
    "ClientDraws",
    "Sites",
    "explicit",
    "feeding",
    "install",
    "modules",
    "noise",
    "probe",
    "stream",
    "unbatchable",
    "uninstall",
]

_FEED = threading.local()
_PROBED: weakref.WeakKeyDictionary[nn.Module, dict[tuple, Sites | None]] = (
    weakref.WeakKeyDictionary()
)


def modules(model: nn.Module) -> list[nn.Module]:
    """The model's ``nn.Dropout`` modules (exactly that class) that drop anything."""
    return [m for m in model.modules() if type(m) is nn.Dropout and m.p > 0]


def unbatchable(model: nn.Module) -> str | None:
    """A reason why the model's dropout cannot train batched (another dropout module), or
    ``None``."""
    for name, m in model.named_modules():
        if isinstance(m, nn.modules.dropout._DropoutNd) and type(m) is not nn.Dropout:
            return (
                f"model {type(model).__name__} has {type(m).__name__} ({name}), whose masks "
                "only nn.Dropout draws from each client's own stream"
            )
    return None


@dataclass(frozen=True)
class Sites:
    """The dropout calls of one forward, in call order: each call's ``p`` and per-sample shape."""

    calls: tuple[tuple[float, tuple[int, ...]], ...]

    @property
    def width(self) -> int:
        """``S``: the uniforms one sample takes per step."""
        return sum(_numel(shape) for _, shape in self.calls)


def _forward(module: nn.Dropout, x: Tensor) -> Tensor:
    record = getattr(_FEED, "record", None)
    if record is not None:
        record.append((module.p, tuple(x.shape)))
        return x
    noises = getattr(_FEED, "noises", None)
    if noises is None or not module.training:
        return nn.Dropout.forward(module, x)
    at = _FEED.at
    if at >= len(noises):
        raise RuntimeError(f"the model called dropout more often than the {len(noises)} probed")
    _FEED.at = at + 1
    return x * noises[at]


def install(model: nn.Module) -> list[nn.Module]:
    """From now on the model's ``nn.Dropout`` modules apply the noise of :func:`feeding` (and are
    ``nn.Dropout`` outside it) until :func:`uninstall`; returns them."""
    found = [m for m in modules(model) if "forward" not in vars(m)]
    for m in found:
        m.forward = _forward.__get__(m)  # type: ignore[method-assign]
    return found


def uninstall(found: list[nn.Module]) -> None:
    """The modules :func:`install` returned, back to ``nn.Dropout``'s forward."""
    for m in found:
        del m.forward


@contextmanager
def explicit(model: nn.Module) -> Iterator[list[nn.Module]]:
    """:func:`install` inside, :func:`uninstall` after."""
    found = install(model)
    try:
        yield found
    finally:
        uninstall(found)


@contextmanager
def feeding(noises: Sequence[Tensor]) -> Iterator[None]:
    """The dropout calls of one forward inside take ``noises`` in order (all of them)."""
    before = getattr(_FEED, "noises", None), getattr(_FEED, "at", 0)
    _FEED.noises, _FEED.at = list(noises), 0
    try:
        yield
        if _FEED.at != len(noises):
            raise RuntimeError(
                f"the model called dropout {_FEED.at} times in a forward, {len(noises)} probed"
            )
    finally:
        _FEED.noises, _FEED.at = before


def probe(model: nn.Module, state: dict[str, Tensor], x: Tensor) -> Sites | None:
    """The dropout calls of a forward of ``model`` (with :func:`explicit` installed) on the
    samples ``x`` (two are enough), or ``None`` when it has none; a call on a tensor whose first
    dimension is not the samples' is refused (``ValueError``)."""
    found = modules(model)
    if not found:
        return None
    # one probe per model, input shape and dropout rates (each client's training asks again)
    key = (tuple(x.shape[1:]), x.dtype, tuple((id(m), m.p) for m in found))
    cached = _PROBED.setdefault(model, {})
    if key not in cached:
        cached[key] = _probe(model, state, x)
    return cached[key]


def _probe(model: nn.Module, state: dict[str, Tensor], x: Tensor) -> Sites | None:
    x = x[:2]
    _FEED.record = []
    try:
        with torch.no_grad():
            functional_call(model, state, (x,))
        seen = _FEED.record
    finally:
        _FEED.record = None
    calls = []
    for p, shape in seen:
        if not shape or shape[0] != len(x):
            raise ValueError(
                f"dropout on a tensor of shape {list(shape)} in a forward of {len(x)} samples: "
                "only dropout over per-sample features is drawn per client"
            )
        calls.append((p, shape[1:]))
    return Sites(tuple(calls)) if calls else None


def stream(seed: int, rnd: int, client: int, phase: int, device: torch.device) -> torch.Generator:
    """The client's dropout stream of a phase (a CUDA generator on a CUDA device)."""
    g = torch.Generator(device=device) if device.type == "cuda" else torch.Generator()
    g.manual_seed(seed_for(seed, "dropout", rnd, client, phase))
    return g


def draw(generator: torch.Generator, batch_size: int, sites: Sites) -> Tensor:
    """One step's uniforms of one client: ``[batch_size, S]``, on the generator's device."""
    with host_draws():
        u = torch.rand(batch_size * sites.width, generator=generator, device=generator.device)
    return u.view(batch_size, sites.width)


def noise(u: Tensor, sites: Sites, device: torch.device, dtype: torch.dtype) -> list[Tensor]:
    """Each call's ``keep / q`` from uniforms ``u [..., L, S]``: ``[..., L, *shape]``."""
    out, at = [], 0
    lead = u.shape[:-1]
    for p, shape in sites.calls:
        size = _numel(shape)
        q = 1.0 - p
        keep = (u[..., at : at + size] < q).to(device)
        at += size
        n = keep.to(dtype).div_(q) if q > 0 else torch.zeros(keep.shape, dtype=dtype, device=device)
        out.append(n.view(*lead, *shape))
    return out


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


class ClientDraws:
    """One client's dropout in the sequential trainer: :meth:`phase` starts a phase's stream,
    :meth:`step` feeds one step's noise (nothing for a model without ``nn.Dropout``)."""

    def __init__(self, model: nn.Module, seed: int, rnd: int, client: int, batch_size: int):
        self.model, self.seed, self.rnd, self.client = model, seed, rnd, client
        self.batch_size = batch_size
        self.installed = install(model)
        self.active = bool(modules(model))
        self.sites: Sites | None = None
        self.generator: torch.Generator | None = None

    def close(self) -> None:
        """The model's dropout modules back to ``nn.Dropout``'s forward."""
        uninstall(self.installed)
        self.installed = []

    def phase(self, phase_no: int, device: torch.device) -> None:
        if self.active:
            self.generator = stream(self.seed, self.rnd, self.client, phase_no, device)

    @contextmanager
    def step(self, state: dict[str, Tensor], x: Tensor) -> Iterator[None]:
        if not self.active:
            yield
            return
        if self.sites is None:
            self.sites = probe(self.model, state, x)
        if self.sites is None:  # dropout modules the forward never calls
            yield
            return
        assert self.generator is not None
        u = draw(self.generator, self.batch_size, self.sites)[: len(x)]
        with feeding(noise(u, self.sites, x.device, x.dtype)):
            yield
